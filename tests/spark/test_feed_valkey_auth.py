"""The Glue job authenticates to the cache as the functions do: the template passes tierq's
ElastiCache user, the cache's name and region as job parameters, and every engine the job
builds (the driver's, each executor's) signs its own IAM tokens with the job's role."""

from __future__ import annotations

from tierq_feeder.glue import STORE_PARAMETERS, stores_from_options

from tierq.dal import connect
from tierq.dal.valkey_auth import ElastiCacheIAMProvider


def test_the_job_parameters_carry_the_caches_user_to_every_engine() -> None:
    assert {"VALKEY_IAM_USER", "VALKEY_CACHE_NAME", "VALKEY_IAM_REGION"} <= set(STORE_PARAMETERS)
    stores = stores_from_options({"DATABASE_URL": "postgresql://u@db/x",
                                  "VALKEY_URL": "rediss://cache:6379/0", "VALKEY_CLUSTER": "true",
                                  "VALKEY_IAM_USER": "tierq-3f2a1b4c-app",
                                  "VALKEY_CACHE_NAME": "stack-valkey",
                                  "VALKEY_IAM_REGION": "eu-west-1"})
    assert (stores.valkey_iam_user, stores.valkey_cache_name, stores.valkey_iam_region) == (
        "tierq-3f2a1b4c-app", "stack-valkey", "eu-west-1")
    provider = connect.valkey_credentials(stores.settings())
    assert isinstance(provider, ElastiCacheIAMProvider)
    assert (provider.user, provider.cache_name, provider.region) == (
        "tierq-3f2a1b4c-app", "stack-valkey", "eu-west-1")


def test_without_them_the_url_carries_whatever_credentials_there_are() -> None:
    stores = stores_from_options({"DATABASE_URL": "postgresql://u@db/x",
                                  "VALKEY_URL": "redis://tierq:pw@127.0.0.1:6379/0"})
    assert stores.valkey_iam_user == ""
    assert connect.valkey_credentials(stores.settings()) is None
