"""Migrations on a live database: neither kind of migration makes the writers of the table it
changes wait behind it (tierq.dal.migrate's table).

| migration                       | while a transaction holds its table          | the writers    |
| ------------------------------- | -------------------------------------------- | -------------- |
| no-transaction, a concurrent    | the build waits for it, then ends valid      | go on          |
| index build                     |                                              |                |
| plain, an ``ALTER TABLE``       | gives up each ``lock_timeout``, tries again; | go on between  |
|                                 | applied once the transaction ends, or        | its tries      |
|                                 | refused with nothing applied                 |                |

A second runner meanwhile waits for the first without a deadlock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from tests.support.stores import scratch_database
from tierq.dal import migrate as migrations
from tierq.dal.migrate import (
    LOCK_KEY,
    Migration,
    MigrationLockTimeout,
    MigrationRunnerBusy,
    migrate,
)

TABLE = Migration("0001", "table", "CREATE TABLE t (id int NOT NULL);\n")
INDEX = Migration("0002", "index", "-- The index, built while writes go on.\n"
                  "-- tierq: no-transaction\n"
                  "DROP INDEX CONCURRENTLY IF EXISTS t_id;\n"
                  "CREATE INDEX CONCURRENTLY t_id ON t (id);\n")
COLUMN = Migration("0002", "column", "ALTER TABLE t ADD COLUMN note text;\n")
# How long a writer waits for its lock at most before the test calls it stalled.
WRITER_PATIENCE = "2s"


@pytest.fixture
def table_url(services) -> Iterator[str]:
    """A scratch database holding table ``t`` (migration 0001 of this file)."""
    with scratch_database(services.postgres.url, "migrate_live") as url:
        assert migrate(url, migrations=[TABLE]) == ["0001"]
        yield url


@pytest.fixture(autouse=True)
def short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migrations, "RETRY_PAUSE_SECONDS", 0.05)


def write_once(url: str) -> None:
    """One insert into ``t`` that fails (LockNotAvailable) rather than wait past
    WRITER_PATIENCE."""
    with psycopg.connect(url, autocommit=True) as writer:
        writer.execute(f"SET lock_timeout = '{WRITER_PATIENCE}'")
        writer.execute("INSERT INTO t VALUES (2)")


def run_in_thread(target, *args, **kwargs) -> tuple[threading.Thread, list[object]]:
    """``target(*args, **kwargs)`` in a thread; its result or exception lands in the list."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(target(*args, **kwargs))
        except BaseException as exc:  # (handed to the test's thread)
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def wait_until_blocked(url: str, query_prefix: str) -> None:
    """Until a backend running a statement that starts with ``query_prefix`` waits for a
    lock (or a virtual transaction id, as a concurrent build does)."""
    with psycopg.connect(url, autocommit=True) as watcher:
        for _ in range(400):
            found = watcher.execute(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE %s", (query_prefix + "%",)).fetchone()
            if found:
                return
            threading.Event().wait(0.025)
    raise AssertionError(f"no statement {query_prefix!r} ever waited for a lock")


def test_a_concurrent_index_build_lets_writers_go_on(table_url: str) -> None:
    """An open transaction that wrote ``t`` keeps the build waiting; another writer inserts
    meanwhile (a plain CREATE INDEX would queue it behind its ShareLock); once the
    transaction ends the index is built valid and the migration recorded."""
    with psycopg.connect(table_url) as holder:
        holder.execute("INSERT INTO t VALUES (1)")  # (open: its transaction goes on)
        thread, outcome = run_in_thread(migrate, table_url, migrations=[TABLE, INDEX])
        wait_until_blocked(table_url, "CREATE INDEX CONCURRENTLY")
        write_once(table_url)
        holder.commit()
    thread.join(30)
    assert outcome == [["0002"]]
    with psycopg.connect(table_url) as conn:
        valid = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = 't_id'::regclass"
                             ).fetchone()
        assert valid == (True,)
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)
    assert migrate(table_url, migrations=[TABLE, INDEX]) == []


def test_a_second_runner_waits_for_a_concurrent_build_without_a_deadlock(
        table_url: str) -> None:
    """A runner that comes while another builds an index concurrently waits for the runners'
    lock without holding a snapshot: waiting inside pg_advisory_lock it held one, which the
    build waits for, and PostgreSQL failed one of the two (deadlock detected)."""
    with psycopg.connect(table_url) as holder:
        holder.execute("INSERT INTO t VALUES (1)")  # (the build waits for it)
        first, first_outcome = run_in_thread(migrate, table_url, migrations=[TABLE, INDEX])
        wait_until_blocked(table_url, "CREATE INDEX CONCURRENTLY")
        second, second_outcome = run_in_thread(migrate, table_url, migrations=[TABLE, INDEX])
        threading.Event().wait(0.5)  # (the second runner is waiting for the lock)
        holder.commit()
    first.join(30)
    second.join(30)
    assert (first_outcome, second_outcome) == ([["0002"]], [[]])


def test_a_failed_concurrent_build_is_built_again_by_the_next_run(table_url: str) -> None:
    """A build that fails leaves an invalid index and no record; the next run drops it and
    builds it valid."""
    with psycopg.connect(table_url, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (1), (1)")
    unique = Migration("0002", "index", INDEX.sql.replace("CREATE INDEX", "CREATE UNIQUE INDEX"))
    with pytest.raises(psycopg.errors.UniqueViolation):
        migrate(table_url, migrations=[TABLE, unique])
    with psycopg.connect(table_url, autocommit=True) as conn:
        assert conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = 't_id'::regclass"
                            ).fetchone() == (False,)
        conn.execute("DELETE FROM t")
    assert migrate(table_url, migrations=[TABLE, unique]) == ["0002"]
    with psycopg.connect(table_url) as conn:
        assert conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = 't_id'::regclass"
                            ).fetchone() == (True,)


def test_a_migration_waiting_for_a_lock_lets_writers_through_and_applies_later(
        table_url: str) -> None:
    """An ALTER TABLE behind an open reader gives up each lock_timeout: a writer that comes
    meanwhile is not queued behind it for long; once the reader ends, the next try applies
    the migration."""
    with psycopg.connect(table_url) as holder:
        holder.execute("SELECT count(*) FROM t")  # (AccessShare, held to the transaction's end)
        thread, outcome = run_in_thread(migrate, table_url, migrations=[TABLE, COLUMN],
                                        lock_timeout_ms=200, lock_attempts=1000)
        wait_until_blocked(table_url, "ALTER TABLE t")
        for _ in range(3):
            write_once(table_url)
        holder.commit()
    thread.join(30)
    assert outcome == [["0002"]]
    with psycopg.connect(table_url) as conn:
        assert conn.execute("SELECT count(note) FROM t").fetchone() == (0,)


def test_a_migration_that_never_has_its_lock_applies_nothing(table_url: str) -> None:
    """Every try timed out: MigrationLockTimeout names the migration, the column is not
    there and nothing is recorded; the next run applies it."""
    with psycopg.connect(table_url) as holder:
        holder.execute("SELECT count(*) FROM t")
        with pytest.raises(MigrationLockTimeout, match="0002_column"):
            migrate(table_url, migrations=[TABLE, COLUMN], lock_timeout_ms=100,
                    lock_attempts=3)
        holder.commit()
    with psycopg.connect(table_url) as conn:
        columns = conn.execute("SELECT column_name FROM information_schema.columns "
                               "WHERE table_name = 't'").fetchall()
        assert columns == [("id",)]
    assert migrate(table_url, migrations=[TABLE, COLUMN]) == ["0002"]


def test_a_runner_waits_for_another_only_so_long_and_names_it(table_url: str) -> None:
    """A session that holds the runners' lock (a run still migrating, or stuck) makes the
    next run give up after runner_wait_seconds, naming the session's backend, having
    applied nothing; once it ends the next run applies the migration."""
    with psycopg.connect(table_url, autocommit=True) as holder:
        holder.execute("SET application_name = 'stuck-runner'")
        holder.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        pid = holder.info.backend_pid
        with pytest.raises(MigrationRunnerBusy, match=f"pid {pid} 'stuck-runner'"):
            migrate(table_url, migrations=[TABLE, COLUMN], runner_wait_seconds=0.3)
    with psycopg.connect(table_url) as conn:
        columns = conn.execute("SELECT column_name FROM information_schema.columns "
                               "WHERE table_name = 't'").fetchall()
        assert columns == [("id",)]
    assert migrate(table_url, migrations=[TABLE, COLUMN]) == ["0002"]


@pytest.mark.parametrize("bad", [0, -1])
def test_the_runner_wait_is_checked(bad: float) -> None:
    with pytest.raises(ValueError, match="runner_wait_seconds"):
        migrate("postgresql://unused", runner_wait_seconds=bad)


@pytest.mark.parametrize("bad", [0, -1])
def test_the_lock_bounds_are_checked(bad: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        migrate("postgresql://unused", lock_timeout_ms=bad)
    with pytest.raises(ValueError, match="at least 1"):
        migrate("postgresql://unused", lock_attempts=bad)
