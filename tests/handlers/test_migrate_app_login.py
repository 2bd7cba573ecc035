"""The migrate function as the owner: applies the migrations, then makes the login of the
application's secret (DB_APP_SECRET_ARN) a member of the application group — created the
first time, its password set again on later runs (after a rotation the secret may name the
"_clone" login). moto stands in for Secrets Manager; the database is real."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import boto3
import psycopg
import pytest
from psycopg import sql

from tests.support.stores import scratch_database, with_login
from tierq.aws.custom_resource import apply_migrations
from tierq.config import get_settings
from tierq.local.services import LocalServices

REGION = "us-east-1"


@pytest.fixture
def fresh_database(services: LocalServices) -> Iterator[str]:
    with scratch_database(services.postgres.url, "tierq_migrate_login") as url:
        yield url
    # the login the test makes outlives the database (roles are cluster-wide)
    login = f"login_{urlsplit(url).path.lstrip('/')}"
    with psycopg.connect(services.postgres.url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(login)))


@pytest.fixture
def secrets(aws_credentials: None) -> Iterator[object]:
    yield boto3.client("secretsmanager", region_name=REGION)
    get_settings.cache_clear()


def test_the_migrate_function_creates_the_application_login(
        secrets: object, fresh_database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = urlsplit(fresh_database)
    database = parts.path.lstrip("/")
    login = f"login_{database}"
    owner_arn = secrets.create_secret(  # type: ignore[attr-defined]
        Name=f"tierq/owner-{time.time_ns()}", SecretString=json.dumps(
            {"username": parts.username, "password": "unused-locally", "host": parts.hostname,
             "port": parts.port}))["ARN"]
    app_arn = secrets.create_secret(  # type: ignore[attr-defined]
        Name=f"tierq/app-{time.time_ns()}", SecretString=json.dumps(
            {"username": login, "password": "first", "masterarn": owner_arn}))["ARN"]
    for name, value in {"DB_SECRET_ARN": owner_arn, "DB_APP_SECRET_ARN": app_arn,
                        "DB_HOST": str(parts.hostname), "DB_PORT": str(parts.port),
                        "DB_NAME": database, "DB_SSLMODE": "disable"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    get_settings.cache_clear()

    applied = apply_migrations()
    assert "0007" in applied
    assert apply_migrations() == []  # a second run: nothing to apply, the login kept
    with psycopg.connect(fresh_database, autocommit=True) as owner:
        row = owner.execute(
            "SELECT r.rolcanlogin, r.rolsuper, pg_has_role(r.oid, %s, 'MEMBER')"
            " FROM pg_roles r WHERE r.rolname = %s",
            (f"tierq_app_{database}", login)).fetchone()
    assert row == (True, False, True)
    with psycopg.connect(with_login(fresh_database, login, "first"), autocommit=True) as app:
        assert app.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app.execute("DROP TABLE tierq_tasks")
