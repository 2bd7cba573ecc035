"""The stores every test shares: real PostgreSQL and real Valkey/Redis, never mocks
(loaded as a plugin by tests/conftest.py; its helpers are imported from here).

Each test session gets its own servers: when DATABASE_URL / VALKEY_URL are set and answer,
they are reused (with a fresh database, and the Valkey db of the URL flushed between tests);
otherwise private servers start under a per-session folder in /tmp (about a second) and stop
at the end. Concurrent test sessions therefore never flush each other's data. An xdist worker
is a session of its own, with a fresh database on a shared PostgreSQL and always a private
Valkey (``worker_environ``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
import redis
from psycopg import sql
from redis.cluster import RedisCluster

from tests.support.parallel import worker_index
from tierq.config import Settings
from tierq.dal.migrate import app_group, ensure_app_login, migrate
from tierq.engine import Tierq
from tierq.local.services import LocalServices, ensure_services, flush_all_nodes
from tierq.local.services.valkey_cluster import cluster_enabled
from tierq.logic.context import OffsetClock

# Every tierq table but the migrations' own record is emptied between tests; the list is
# read from the catalog, so a table a migration adds needs no change here.
AWS_REGION = "us-east-1"  # where moto plays AWS in tests

TABLES_QUERY = """
    SELECT quote_ident(tablename) FROM pg_tables
    WHERE schemaname = current_schema() AND tablename LIKE 'tierq\\_%'
      AND tablename <> 'tierq_schema_migrations'
    ORDER BY tablename"""


@pytest.fixture(scope="session")
def session_dir() -> Iterator[Path]:
    """This session's folder under /tmp (private servers live below it), removed at the end."""
    base = Path(tempfile.mkdtemp(prefix="tierq-tests-", dir="/tmp"))
    base.chmod(0o755)  # the postgres system user must be able to enter it when we are root
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(autouse=True)
def rows_layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``rows_layout`` runs with ``TIERQ_BATCH_ROWS=false`` in its environment:
    the engines it makes write a row per task, as its assertions on ``tierq_tasks`` (its
    rows, their statements, locks or stalls) need. Settings a test names win."""
    if request.node.get_closest_marker("rows_layout") is not None:
        monkeypatch.setenv("TIERQ_BATCH_ROWS", "false")


@pytest.fixture(autouse=True)
def small_batch_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch rows of any size (``TIERQ_BATCH_ROWS_MIN=1``) unless the environment names a
    floor: the tests' enqueues are small, and with ``TIERQ_BATCH_ROWS=true`` it is the batch
    rows' paths they are run for. The product's floor has tests of its own
    (test_batch_rows_engine.py). Settings a test names win."""
    if "TIERQ_BATCH_ROWS_MIN" not in os.environ:
        monkeypatch.setenv("TIERQ_BATCH_ROWS_MIN", "1")


@contextmanager
def worker_environ() -> Iterator[None]:
    """Under xdist, this worker's session runs without VALKEY_URL (a private Valkey of its
    own): some tests change a server's settings (``maxmemory``, ``SCRIPT FLUSH``), which on
    a shared server would reach the other workers' tests."""
    given = os.environ.get("VALKEY_URL")
    if worker_index() is None or given is None:
        yield
        return
    del os.environ["VALKEY_URL"]
    try:
        yield
    finally:
        os.environ["VALKEY_URL"] = given


@pytest.fixture(scope="session")
def services(session_dir: Path) -> Iterator[LocalServices]:
    with worker_environ(), ensure_services(session_dir / "services") as local:
        yield local


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@contextmanager
def scratch_database(admin: str, prefix: str) -> Iterator[str]:
    """A fresh, empty database on the server of ``admin``. Dropped afterwards, with the
    application group role its migrations may have created (roles are cluster-wide, so the
    database's group would outlive it)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(admin, name)
    try:
        yield url
    finally:
        group = None
        with psycopg.connect(url, autocommit=True) as conn:
            if conn.execute("SELECT to_regprocedure('tierq_app_group()') IS NOT NULL"
                            ).fetchone() == (True,):
                group = app_group(conn)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            if group:
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(group)))


@contextmanager
def migrated_database(admin: str, prefix: str) -> Iterator[str]:
    """A fresh database on the server of ``admin``, migrated; dropped afterwards."""
    with scratch_database(admin, prefix) as url:
        migrate(url)
        yield url


def with_login(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    host = f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
    return urlunsplit(parts._replace(netloc=f"{quote(user, safe='')}:"
                                            f"{quote(password, safe='')}@{host}"))


@contextmanager
def app_login(url: str) -> Iterator[str]:
    """A fresh login in the application's group role of the database at ``url`` (the
    owner's): the URL it connects with. Dropped afterwards."""
    login = f"tierq_login_{uuid.uuid4().hex[:12]}"
    password = uuid.uuid4().hex
    ensure_app_login(url, login, password)
    try:
        yield with_login(url, login, password)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(login)))


@pytest.fixture(scope="session")
def app_database_url(database_url: str) -> Iterator[str]:
    """The session's database as the application connects to it: a login in the
    application's group role, as every function but migrate (and the Glue job) on AWS.
    Engines from ``make_tq`` use it, so every engine test checks the role's grants too."""
    with app_login(database_url) as url:
        yield url


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fake credentials and moto's in-process AWS (the only mocks the suite allows: AWS
    service APIs)."""
    from moto import mock_aws

    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": AWS_REGION,
                        "AWS_REGION": AWS_REGION}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


# TIERQ_TEST_SEQ_START=<n>: the session's tierq_task_seq hands out n first (e.g. 2^53 + 1 =
# 9007199254740993, to run any part of the suite with every task's seq past what a double
# holds exactly, its ready-set members in their long form: core/ordering.py).
SEQ_START = "TIERQ_TEST_SEQ_START"


@pytest.fixture(scope="session")
def database_url(services: LocalServices) -> Iterator[str]:
    """A fresh, migrated database for this test session."""
    with migrated_database(services.postgres.url, "tierq_test") as url:
        start = os.environ.get(SEQ_START)
        if start:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SELECT setval('tierq_task_seq', %s, false)", (int(start),))
        yield url


@pytest.fixture
def task_seq(database_url: str) -> Iterator[Callable[[int], None]]:
    """``task_seq(n)``: the next value tierq_task_seq hands out is ``n`` (each opens a block
    of 512 places). After the test the sequence goes back to where it was (the tables are
    emptied between tests, the sequence is not)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT last_value, is_called FROM tierq_task_seq").fetchone()
        assert row is not None

        def set_next(value: int) -> None:
            conn.execute("SELECT setval('tierq_task_seq', %s, false)", (value,))

        yield set_next
        conn.execute("SELECT setval('tierq_task_seq', %s, %s)", row)


@pytest.fixture(scope="session")
def valkey_url(services: LocalServices) -> str:
    return services.valkey.url


@pytest.fixture(scope="session")
def valkey_private(services: LocalServices) -> bool:
    return services.valkey.private


@pytest.fixture(scope="session")
def valkey_cluster() -> bool:
    """Whether ``valkey_url`` names a cluster (tests/cluster overrides this and the URL)."""
    return False


def flush_valkey(url: str, private: bool) -> None:
    """Wipe the warm tier: the whole private server, or only the db of a shared one; on a
    cluster, every master."""
    if cluster_enabled(url):
        flush_all_nodes(url)
        return
    client = redis.Redis.from_url(url)
    try:
        if private:
            client.flushall()
        else:
            client.flushdb()
    finally:
        client.close()


# The tierq tables whose heap has a page: those written since their last TRUNCATE (a row
# deleted since holds its page and its line pointer until a vacuum trims the table).
# (to_regclass: a name the catalog listed but this session cannot see, such as another
# session's temporary staging table, is passed over rather than failing the query)
WRITTEN_TABLES_QUERY = f"""
    SELECT t FROM ({TABLES_QUERY}) AS tables(t)
    WHERE coalesce(pg_relation_size(to_regclass(t)), 0) > 0"""


def truncate(database_url: str, attempts: int = 5) -> None:
    """Empty every tierq table that was written: each test starts with fresh heaps, as
    after a TRUNCATE of all of them, at the cost of those it used (a TRUNCATE costs a
    table and its indexes new files: about 70 ms for all 20 on a server with fsync on).
    A local stack's maintenance may still be running against the database (e2e tests): a
    TRUNCATE that meets its locks in the other order is a deadlock victim, and is simply
    tried again."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        for attempt in range(1, attempts + 1):
            try:
                tables = [row[0] for row in conn.execute(WRITTEN_TABLES_QUERY).fetchall()]
                if not tables:
                    return
                conn.execute(f"TRUNCATE {', '.join(tables)}")
                return
            except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable):
                if attempt == attempts:
                    raise
                time.sleep(0.1 * attempt)


@pytest.fixture
def clean_stores(database_url: str, valkey_url: str, valkey_private: bool) -> None:
    truncate(database_url)
    flush_valkey(valkey_url, valkey_private)


TierqFactory = Callable[..., Tierq]


@pytest.fixture
def make_tq(app_database_url: str, valkey_url: str, valkey_cluster: bool,
            clean_stores: None) -> Iterator[TierqFactory]:
    """Build engines over the session's stores (empty at the start of each test), logged
    in as the application role. Keyword arguments are TIERQ_* settings by field name
    (e.g. ``warm_max=50``)."""
    made: list[Tierq] = []

    def factory(clock: Any = None, **overrides: Any) -> Tierq:
        fields: dict[str, Any] = {"settings_cache_seconds": 0.0,
                                  "valkey_cluster": valkey_cluster, **overrides}
        settings = Settings(database_url=app_database_url, valkey_url=valkey_url, **fields)
        tq = Tierq(settings=settings, clock=clock or OffsetClock())
        made.append(tq)
        return tq

    yield factory
    for tq in made:
        tq.close()


@pytest.fixture
def tq(make_tq: TierqFactory) -> Tierq:
    """An engine with default settings and a clock tests can move forward
    (``tq.ctx.clock.advance(seconds)``)."""
    return make_tq()


@pytest.fixture
def pg(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain connection for assertions on the system of record."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def valkey(valkey_url: str, valkey_cluster: bool) -> Iterator[redis.Redis]:
    """A client of the warm tier's server (a cluster client under tests/cluster)."""
    client = RedisCluster.from_url(valkey_url) if valkey_cluster else redis.Redis.from_url(
        valkey_url)
    yield client  # type: ignore[misc]
    client.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    given = [name for name in ("DATABASE_URL", "VALKEY_URL") if os.environ.get(name)]
    if given:
        return [f"tierq: reusing {', '.join(given)} when they answer (fresh database per session"
                f"; a private Valkey per xdist worker)"]
    return ["tierq: private PostgreSQL and Redis per test session (under /tmp)"]
