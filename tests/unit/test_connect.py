"""The database URL built on AWS (moto stands in for Secrets Manager): TLS that verifies
the proxy's certificate against the system's roots, and nothing else in the connection
options (RDS Proxy refuses startup ``options``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import boto3
import psycopg
import pytest

from tierq.config import Settings, SettingsError
from tierq.dal import connect
from tierq.dal.postgres import Database

REGION = "us-east-1"


@pytest.fixture
def secrets(aws_credentials: None) -> object:
    return boto3.client("secretsmanager", region_name=REGION)


def put_secret(client: object, value: dict[str, object]) -> str:
    return client.create_secret(  # type: ignore[attr-defined,no-any-return]
        Name=f"tierq/app-{time.time_ns()}", SecretString=json.dumps(value))["ARN"]


def test_the_url_on_aws_verifies_the_proxy_with_the_system_roots(
        secrets: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    arn = put_secret(secrets, {"username": "tierq_app", "password": "p@ss/w:rd?&=",
                               "engine": "postgres", "host": "cluster.example", "port": 5432,
                               "masterarn": "arn:aws:secretsmanager:us-east-1:1:secret:o"})
    settings = Settings(DB_SECRET_ARN=arn, DB_HOST="proxy.example", DB_NAME="tierq")
    url = connect.database_url(settings)
    parts = urlsplit(url)
    assert (parts.hostname, parts.port, parts.path) == ("proxy.example", 5432, "/tierq")
    assert parse_qs(parts.query) == {"sslmode": ["verify-full"], "sslrootcert": ["system"]}
    # libpq reads it the same way: the special password survives, and no options are sent
    conninfo = psycopg.conninfo.conninfo_to_dict(url)
    assert conninfo["user"] == "tierq_app" and conninfo["password"] == "p@ss/w:rd?&="
    assert conninfo["sslmode"] == "verify-full" and conninfo["sslrootcert"] == "system"
    assert "options" not in conninfo
    # and OpenSSL can find the system roots (the wheel's own OpenSSL folder does not exist)
    assert os.environ.get("SSL_CERT_FILE") and Path(os.environ["SSL_CERT_FILE"]).is_file()


def test_a_local_server_without_tls_gets_no_root_certificate(secrets: object) -> None:
    arn = put_secret(secrets, {"username": "u", "password": "p", "host": "127.0.0.1"})
    url = connect.database_url(Settings(DB_SECRET_ARN=arn, DB_SSLMODE="disable"))
    assert parse_qs(urlsplit(url).query) == {"sslmode": ["disable"]}


def test_a_secret_without_credentials_is_refused_by_name(secrets: object) -> None:
    arn = put_secret(secrets, {"host": "h"})
    with pytest.raises(RuntimeError, match="username and password"):
        connect.database_url(Settings(DB_SECRET_ARN=arn))


def test_system_roots_need_verify_full() -> None:
    with pytest.raises(SettingsError, match="verify-full"):
        Settings(DB_SSLMODE="verify-ca")
    assert Settings(DB_SSLMODE="verify-ca", DB_SSLROOTCERT="/etc/rds-ca.pem").db_sslmode


def test_lock_timeout_may_not_exceed_the_statement_timeout() -> None:
    with pytest.raises(SettingsError, match="TIERQ_LOCK_TIMEOUT_MS"):
        Settings(TIERQ_STATEMENT_TIMEOUT_MS=1000, TIERQ_LOCK_TIMEOUT_MS=2000)
    assert Settings(TIERQ_STATEMENT_TIMEOUT_MS=0, TIERQ_LOCK_TIMEOUT_MS=2000).lock_timeout_ms
    defaults = Settings()
    assert 0 < defaults.lock_timeout_ms <= defaults.statement_timeout_ms < 29_000


def test_the_system_trust_store_is_found_or_left_alone(tmp_path: Path) -> None:
    bundle = tmp_path / "ca-bundle.crt"
    bundle.write_text("roots")
    env: dict[str, str] = {}
    assert connect.use_system_trust_store(env, (str(tmp_path / "missing"), str(bundle))) == \
        str(bundle)
    assert env == {"SSL_CERT_FILE": str(bundle)}
    chosen = {"SSL_CERT_DIR": "/opt/roots"}
    assert connect.use_system_trust_store(chosen, (str(bundle),)) == "/opt/roots"
    assert chosen == {"SSL_CERT_DIR": "/opt/roots"}  # the operator's choice wins


def test_a_process_given_a_ready_url_finds_the_system_roots_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Spark executor gets the URL the driver built: opening the pool points OpenSSL at
    the system's roots there as well."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    db = Database("postgresql://u:p@127.0.0.1:1/d?sslmode=verify-full&sslrootcert=system",
                  min_size=1, max_size=1)
    db.close()
    assert os.environ.get("SSL_CERT_FILE") and Path(os.environ["SSL_CERT_FILE"]).is_file()


def test_the_glue_job_builds_the_same_verified_url(secrets: object,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The feeder's driver resolves the application's secret from its job parameters, with
    the same TLS as the functions (or what the parameters say)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "spark_glue"))
    glue = pytest.importorskip("tierq_feeder.glue")
    arn = put_secret(secrets, {"username": "tierq_app", "password": "pw"})
    options = {"DB_SECRET_ARN": arn, "DB_HOST": "proxy.example", "DB_NAME": "tierq",
               "VALKEY_URL": "rediss://cache.example:6379/0"}
    query = parse_qs(urlsplit(glue.stores_from_options(options).database_url).query)
    assert query == {"sslmode": ["verify-full"], "sslrootcert": ["system"]}
    custom = glue.stores_from_options({**options, "DB_SSLROOTCERT": "/opt/ca.pem"})
    assert parse_qs(urlsplit(custom.database_url).query)["sslrootcert"] == ["/opt/ca.pem"]
    # the tenant's warm share reaches the executors' settings as the functions have it
    def bound(given: dict[str, str]) -> int:
        settings = glue.stores_from_options({**options, **given}).settings()
        return settings.tenant_warm_bound(settings.warm_capacity_bytes)

    assert bound({}) == 0
    assert bound({"TIERQ_WARM_CAPACITY_BYTES": "8000000000",
                  "TIERQ_TENANT_WARM_MAX_BYTES": ""}) == 2_000_000_000
    assert bound({"TIERQ_TENANT_WARM_MAX_BYTES": "3000000"}) == 3_000_000
