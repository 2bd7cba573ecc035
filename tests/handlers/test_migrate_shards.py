"""The migrate function of a deployment with shards, as template.yaml wires it: the stack of
each further shard migrates its own database (the custom resource's properties name it), and
DbMigrations migrates every shard found by the naming convention (TIERQ_SHARD_NAMES, the
default shard at DB_HOST, the others at their Parameter Store entries), makes each one's
application login, puts them in service together and answers the shard names the functions
read. moto stands in for Secrets Manager and Parameter Store; the databases are real."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from urllib.parse import urlsplit

import boto3
import psycopg
import pytest
from psycopg import sql

from tests.support.stores import scratch_database
from tierq.aws.custom_resource import Migrated, handle, migrate_shards
from tierq.config import get_settings
from tierq.dal.migrate import available
from tierq.local.services import LocalServices

REGION = "us-east-1"
RESPONSE_URL = ("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com"
                "/arn%3Aaws%3Acloudformation/resource?X-Amz-Signature=abc")
SHARDS = ("default", "b", "c")


@dataclass
class Shard:
    name: str
    url: str  # the owner's, as the test reaches it
    owner_secret: str
    app_secret: str
    login: str

    @property
    def database(self) -> str:
        return urlsplit(self.url).path.lstrip("/")


@pytest.fixture
def shards(services: LocalServices, aws_credentials: None,
           monkeypatch: pytest.MonkeyPatch, valkey_url: str) -> Iterator[dict[str, Shard]]:
    secrets = boto3.client("secretsmanager", region_name=REGION)
    ssm = boto3.client("ssm", region_name=REGION)
    run = f"r{time.time_ns()}"  # Powertools caches secrets and parameters per process
    directory = f"/tierq/{run}/shards"
    made: dict[str, Shard] = {}
    with ExitStack() as stack:
        for name in SHARDS:
            url = stack.enter_context(scratch_database(services.postgres.url, f"tq_{name}"))
            parts = urlsplit(url)
            database = parts.path.lstrip("/")
            owner = secrets.create_secret(Name=f"{directory}/{name}/owner", SecretString=json.dumps(
                {"username": parts.username, "password": "unused-locally",
                 "host": parts.hostname, "port": parts.port}))["ARN"]
            login = f"login_{database}"
            app = secrets.create_secret(Name=f"{directory}/{name}/app", SecretString=json.dumps(
                {"username": login, "password": f"pw-{name}", "masterarn": owner}))["ARN"]
            made[name] = Shard(name, url, owner, app, login)
            if name != SHARDS[0]:  # what a further shard's stack writes once it is migrated
                ssm.put_parameter(Name=f"{directory}/{name}", Type="String", Value=json.dumps(
                    {"host": parts.hostname, "dbname": database, "app_secret": app,
                     "owner_secret": owner}))
        first = made[SHARDS[0]]
        parts = urlsplit(first.url)
        for variable, value in {
                "DB_SECRET_ARN": first.owner_secret, "DB_APP_SECRET_ARN": first.app_secret,
                "DB_HOST": str(parts.hostname), "DB_PORT": str(parts.port),
                "DB_NAME": first.database, "DB_SSLMODE": "disable", "VALKEY_URL": valkey_url,
                "TIERQ_SHARD_NAMES": ",".join(SHARDS), "TIERQ_SHARD_DIRECTORY": directory,
                "POWERTOOLS_TRACE_DISABLED": "true"}.items():
            monkeypatch.setenv(variable, value)
        monkeypatch.delenv("DATABASE_URL", raising=False)
        monkeypatch.delenv("TIERQ_SHARD_URLS", raising=False)
        get_settings.cache_clear()
        try:
            yield made
        finally:
            get_settings.cache_clear()
            with psycopg.connect(services.postgres.url, autocommit=True) as conn:
                for shard in made.values():
                    # (roles are cluster-wide: the login outlives its database)
                    conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(
                        sql.Identifier(shard.login)))


def identity(url: str) -> str | None:
    with psycopg.connect(url) as conn:
        if conn.execute("SELECT to_regclass('tierq_shard_identity')").fetchone() == (None,):
            return None  # not migrated
        row = conn.execute("SELECT name FROM tierq_shard_identity").fetchone()
    return None if row is None else str(row[0])


def is_app_member(shard: Shard) -> bool:
    with psycopg.connect(shard.url) as conn:
        row = conn.execute("SELECT pg_has_role(%s, tierq_app_group(), 'MEMBER')",
                           (shard.login,)).fetchone()
    return bool(row and row[0])


class Context:
    log_stream_name = "stream"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


def test_a_further_shards_own_resource_migrates_only_that_shard(
        shards: dict[str, Shard]) -> None:
    c = shards["c"]
    done = migrate_shards({"Shard": "c", "Host": urlsplit(c.url).hostname,
                           "DbName": c.database, "OwnerSecretArn": c.owner_secret,
                           "AppSecretArn": c.app_secret})
    assert done == Migrated([m.version for m in available()], ["c"])
    assert is_app_member(c)
    with psycopg.connect(shards["b"].url) as conn:  # the other shards are not touched
        assert conn.execute("SELECT to_regclass('tierq_tasks')").fetchone() == (None,)


def test_db_migrations_migrates_every_shard_and_answers_their_names(
        shards: dict[str, Shard], monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, object]] = []
    monkeypatch.setattr("tierq.aws.custom_resource.send",
                        lambda url, body: sent.append(dict(body)) or 200)
    event = {"RequestType": "Create", "ResponseURL": RESPONSE_URL, "StackId": "s",
             "RequestId": "r", "LogicalResourceId": "DbMigrations",
             "ResourceProperties": {"ShardNames": ",".join(SHARDS)}}
    body = handle(event, Context())
    assert sent == [body]
    assert body["Status"] == "SUCCESS", body.get("Reason")
    versions = [m.version for m in available()]
    assert body["Data"] == {"Applied": ",".join(versions), "AppliedCount": len(versions),
                            "Shards": "default,b,c"}
    for name, shard in shards.items():
        assert identity(shard.url) == name  # each database named after its shard
        assert is_app_member(shard)
    again = handle({**event, "RequestType": "Update"}, Context())
    assert again["Data"] == {"Applied": "", "AppliedCount": 0, "Shards": "default,b,c"}


def test_a_shard_without_its_entry_fails_the_step_by_name(
        shards: dict[str, Shard], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_SHARD_NAMES", "default,b,c,d")
    get_settings.cache_clear()
    monkeypatch.setattr("tierq.aws.custom_resource.send", lambda url, body: 200)
    body = handle({"RequestType": "Update", "ResponseURL": RESPONSE_URL, "StackId": "s",
                   "RequestId": "r", "LogicalResourceId": "DbMigrations"}, Context())
    assert body["Status"] == "FAILED"
    assert "shard 'd'" in str(body["Reason"]) and "/d in Parameter Store" in str(body["Reason"])
    assert identity(shards["b"].url) is None  # nothing was migrated
