"""The store's rows against the real schema: each statement read into a row class returns
that class's fields, in order (described by PostgreSQL, not assumed); a column a migration
adds reaches none of them (migrations run before the code that knows the column is live,
and stay after a rollback of the code); and the column check of ``positional`` is made per
statement, not once per row class."""

from __future__ import annotations

import ast
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import pytest

from tests.support.stores import migrated_database
from tierq.dal.postgres import Database
from tierq.dal.sql_files import queries
from tierq.dal.store import rows
from tierq.dal.store.base import ColumnMismatch, StoreBase, positional, returns_rows
from tierq.dal.task_store import TaskStore

ROOT = Path(__file__).resolve().parents[2]
STORE = sorted((ROOT / "shared/tierq/dal/store").glob("*.py"))
# Statements read otherwise than by ``positional``, and the columns they must return.
OTHER_READS = {"upsert_schedule": (*rows.ScheduleRow._fields, "created")}
# The statements that once read ``SELECT *`` / ``RETURNING *`` (the added-column test's list).
WHOLE_ROWS = {"task_by_id", "cancel_task", "dlq_page", "dlq_page_of_tenant",
              "queue_settings_row", "upsert_queue_settings", "schedule_by_name",
              "schedules_page", "upsert_schedule"}
# Statements also read by ``positional`` outside ``_fetch`` (a pipeline's cursors:
# GroupQueries.release_groups), each into the class its ``_fetch`` read uses.
PIPELINED_READS = {"release_group_heads": rows.GroupReleasedRow}
LAST_ID = uuid.UUID(int=2**128 - 1)
_PARAM = re.compile(r"%\((\w+)\)s")


def positional_reads() -> dict[str, type]:
    """{query name: row class} of every ``_fetch("name", ..., positional(Class), ...)`` of
    the store's modules; fails on a ``positional`` read whose query or class is not a name."""
    found: dict[str, type] = {}
    calls = mapped = 0
    for path in STORE:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "positional":
                calls += 1
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "_fetch" and len(node.args) >= 3):
                continue
            query, row = node.args[0], node.args[2]
            if (isinstance(row, ast.Call) and getattr(row.func, "id", None) == "positional"):
                assert isinstance(query, ast.Constant) and isinstance(row.args[0], ast.Name)
                cls = getattr(rows, row.args[0].id)
                # (a statement read in two places reads the same class in both)
                assert found.setdefault(query.value, cls) is cls, query.value
                mapped += 1
    assert all(found.get(query) is cls for query, cls in PIPELINED_READS.items())
    assert calls == mapped + len(PIPELINED_READS), \
        "a positional read this test cannot map to its statement"
    return found


def described_columns(conn: psycopg.Connection[Any], text: str) -> tuple[str, ...]:
    """The result columns of a statement, as PostgreSQL describes it once prepared (nothing
    runs). Its ``%(name)s`` placeholders become ``$n``, as psycopg sends them."""
    numbers: dict[str, int] = {}
    sql = _PARAM.sub(lambda m: f"${numbers.setdefault(m.group(1), len(numbers) + 1)}", text)
    statement = f"tierq_describe_{uuid.uuid4().hex[:8]}".encode()
    conn.pgconn.prepare(statement, sql.replace("%%", "%").encode())
    try:
        described = conn.pgconn.describe_prepared(statement)
        assert described.error_message == b"", described.error_message
        return tuple((described.fname(i) or b"").decode() for i in range(described.nfields))
    finally:
        conn.execute(f"DEALLOCATE {statement.decode()}")


@pytest.fixture(scope="module")
def migrated(services: Any) -> Iterator[str]:
    """A database of this module's own (the added-column test alters its tables)."""
    with migrated_database(services.postgres.url, "tierq_columns") as url:
        yield url


def test_each_statement_returns_its_row_class_fields_in_order(migrated: str) -> None:
    reads = positional_reads()
    assert WHOLE_ROWS - {*reads, *OTHER_READS} == set()
    expected = {name: tuple(cls._fields) for name, cls in reads.items()}
    expected.update(OTHER_READS)
    text = queries()
    with psycopg.connect(migrated, autocommit=True) as conn:
        mismatched = {name: (columns, described)
                      for name, columns in sorted(expected.items())
                      if (described := described_columns(conn, text[name])) != columns}
    assert mismatched == {}


def test_the_description_sees_a_swapped_column(migrated: str) -> None:
    """(The check above fails when a statement's columns are not its class's fields.)"""
    with psycopg.connect(migrated, autocommit=True) as conn:
        assert described_columns(conn, "SELECT tenant, queue FROM tierq_tasks "
                                       "WHERE id = %(id)s") == ("tenant", "queue")


def test_rows_are_read_after_a_migration_adds_columns(migrated: str) -> None:
    """Each table read whole gains a column (as a later migration would, before the code
    that knows it is live): every statement that once read ``*`` still gives its rows."""
    with psycopg.connect(migrated, autocommit=True) as conn:
        for table in ("tierq_tasks", "tierq_queues", "tierq_schedules"):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN added_later text DEFAULT 'new'")
        dead, live = uuid.uuid4(), uuid.uuid4()
        conn.execute(
            "INSERT INTO tierq_tasks (id, queue, tenant, payload, state, run_at,"
            " run_at_initially, max_attempts, seq, created_at, state_since, finished_at,"
            " last_error) SELECT id, 'q', 't', '{\"n\": 1}', state, now(), now(), 3, seq,"
            " now(), now(), finished, err FROM (VALUES (%s::uuid, 'dead', 1, now(), 'boom'),"
            " (%s::uuid, 'delayed', 2, NULL, NULL)) AS v(id, state, seq, finished, err)",
            (dead, live))
    db = Database(migrated, max_size=1)
    store = TaskStore(db)
    try:
        settings = store.upsert_queue_settings(
            "q", warm_max=7, warm_max_bytes=None, lease_seconds=None, max_attempts=None,
            backoff_kind=None, backoff_base_seconds=None, backoff_cap_seconds=None,
            backoff_jitter=None, retention_seconds=None, paused=None)
        assert settings.warm_max == 7
        assert store.queue_settings_row("q") == settings

        task = store.task_by_id("q", dead)
        assert task is not None and (task.id, task.state, task.last_error) == (
            dead, "dead", "boom")
        for tenant in (None, "t"):  # dlq_page, dlq_page_of_tenant: the first page
            page = store.dlq_page("q", tenant, "infinity", str(LAST_ID), 10)
            assert [(r.id, r.state) for r in page] == [(dead, "dead")]
        cancelled = store.cancel_task("q", live)
        assert cancelled is not None and (cancelled.id, cancelled.state) == (live, "delayed")

        with db.connection() as conn, conn.transaction():
            schedule, created = store.upsert_schedule(
                conn, name="s", queue="q", tenant="t", payload="{}", priority=0, cron=None,
                every_ms=60_000, daily_times=None, timezone="UTC", horizon=2, enabled=True,
                config_hash="h", now=datetime.now(UTC))
        assert created and schedule.every_ms == 60_000
        assert store.schedule_by_name("t", "s") == schedule
        assert store.schedules_page(None, ("", ""), 10) == [schedule]
    finally:
        db.close()


class Counts(NamedTuple):
    cold: int
    delayed: int


class CheckingStore(StoreBase):
    """Two statements read into one class, the second with its columns swapped."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._sql = {"in_order": "SELECT 1 AS cold, 2 AS delayed",
                     "swapped": "SELECT 2 AS delayed, 1 AS cold"}

    def read(self, name: str) -> list[Counts]:
        return self._fetch(name, None, positional(Counts))


def test_the_column_check_is_made_per_statement_not_per_row_class(migrated: str) -> None:
    db = Database(migrated, max_size=1)
    try:
        store = CheckingStore(db)
        assert store.read("in_order") == [Counts(1, 2)]
        assert store.read("in_order") == [Counts(1, 2)]  # checked already: read the same
        with pytest.raises(ColumnMismatch, match="swapped"):
            store.read("swapped")  # one check per class would have let it through
        # raised as itself, after the statement: the pool's one connection still works
        assert store.read("in_order") == [Counts(1, 2)]
    finally:
        db.close()


@pytest.mark.parametrize("statement", [
    "SELECT 1 AS a, 'b' AS b",
    "SELECT 1 AS a WHERE false",
    "SELECT",
    "CREATE TEMP TABLE IF NOT EXISTS returns_rows_probe (a int)",
    "INSERT INTO returns_rows_probe VALUES (1)",
    "INSERT INTO returns_rows_probe VALUES (2) RETURNING a",
    "DELETE FROM returns_rows_probe WHERE false RETURNING a",
    "DELETE FROM returns_rows_probe",
])
def test_returns_rows_is_what_the_cursor_describes(database_url: str, statement: str) -> None:
    """``returns_rows`` (read by ``_fetch`` for every statement) says what psycopg's
    ``description`` does, without building its columns."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS returns_rows_probe (a int)")
        cur = conn.execute(statement)
        assert returns_rows(cur) is (cur.description is not None)
