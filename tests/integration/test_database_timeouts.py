"""statement_timeout and lock_timeout, set by tierq per transaction (SET LOCAL) on a real
PostgreSQL: a statement over the limit is cancelled, a lock wait over the limit fails, and
nothing is sent as a startup option or left on the session (RDS Proxy refuses startup
options and is pinned by a session SET; an alternating-user rotation's new login would not
carry per-login settings). On direct connections (``session_settings``, the engine without
RDS Proxy) the same limits are the session's, and only shorter ones are sent per statement."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors

from tierq.dal.postgres import (
    Database,
    execute_text,
    pipelined_transaction,
    scoped_timeouts,
    transaction,
)
from tierq.dal.task_store import TaskStore
from tierq.engine import Tierq
from tierq.errors import DatabaseTimedOut, Unavailable

SHOW = ("SELECT current_setting('statement_timeout') AS statement_timeout,"
        " current_setting('lock_timeout') AS lock_timeout,"
        " current_setting('synchronous_commit') AS synchronous_commit")


@pytest.fixture
def db(app_database_url: str, clean_stores: None) -> Iterator[Database]:
    database = Database(app_database_url, max_size=2, statement_timeout_ms=300,
                        lock_timeout_ms=150)
    yield database
    database.close()


def test_no_startup_options_and_nothing_left_on_the_session(db: Database) -> None:
    for relaxed in (False, True):
        with db.connection(relaxed=relaxed) as conn:
            assert "options" not in conn.info.get_parameters()
            assert "options=" not in conn.info.dsn
            # inside tierq's statements: its settings; on the session: the server's
            inside = execute_text(conn, SHOW).fetchone()
            assert inside == {"statement_timeout": "300ms", "lock_timeout": "150ms",
                              "synchronous_commit": "off" if relaxed else "on"}
            assert conn.execute(SHOW).fetchone() == {
                "statement_timeout": "0", "lock_timeout": "0", "synchronous_commit": "on"}


def test_a_statement_over_the_statement_timeout_is_cancelled(db: Database) -> None:
    with db.connection() as conn:
        started = time.monotonic()
        with pytest.raises(errors.QueryCanceled, match="statement timeout"):
            execute_text(conn, "SELECT pg_sleep(5)")
        assert time.monotonic() - started < 4
        # the connection is usable at once, and the limit went with the statement
        assert conn.execute("SELECT current_setting('statement_timeout') AS t"
                            ).fetchone() == {"t": "0"}
    # in a transaction opened by the engine: the same limit, answered as a timeout (503 with
    # Retry-After; PostgreSQL answered, so not "not answering")
    with pytest.raises(DatabaseTimedOut, match="did not finish in time"), \
            db.transaction() as conn:
        assert conn.execute(SHOW).fetchone()["statement_timeout"] == "300ms"
        conn.execute("SELECT pg_sleep(5)")


def test_a_lock_wait_over_the_lock_timeout_fails(db: Database, database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as owner:
        owner.execute("INSERT INTO tierq_queues (queue) VALUES ('locked')")
        with owner.transaction():
            owner.execute("SELECT * FROM tierq_queues WHERE queue = 'locked' FOR UPDATE")
            with db.connection() as conn:
                started = time.monotonic()
                with pytest.raises(errors.LockNotAvailable):
                    execute_text(conn, "UPDATE tierq_queues SET paused = true"
                                       " WHERE queue = 'locked'")
                waited = time.monotonic() - started
            assert 0.1 < waited < 3
            with pytest.raises(DatabaseTimedOut) as raised, db.transaction() as conn:
                conn.execute("UPDATE tierq_queues SET paused = true WHERE queue = 'locked'")
            assert "lock timeout" in (raised.value.detail or "")


def test_an_engine_answers_503_when_a_row_stays_locked(make_tq: Any, database_url: str) -> None:
    tq: Tierq = make_tq(statement_timeout_ms=2000, lock_timeout_ms=200)
    tq.put_queue("held", {"warm_max": 10})
    with psycopg.connect(database_url, autocommit=True) as owner, owner.transaction():
        owner.execute("SELECT * FROM tierq_queues WHERE queue = 'held' FOR UPDATE")
        with pytest.raises(DatabaseTimedOut):
            tq.put_queue("held", {"warm_max": 20})
    assert tq.put_queue("held", {"warm_max": 20}).warm_max == 20


def test_a_lock_timeout_the_caller_set_in_its_transaction_is_kept(db: Database) -> None:
    """The cold -> warm mover sets a shorter lock timeout of its own (local_lock_timeout)
    in a transaction it opened: statements run inside it do not override that."""
    store = TaskStore(db)
    with db.connection() as conn:
        with conn.transaction():
            store.local_lock_timeout(conn, "25ms")
            # a named query inside the transaction
            assert store.queue_settings_row("none", conn=conn) is None
            assert execute_text(conn, SHOW).fetchone()["lock_timeout"] == "25ms"
        with transaction(conn):  # tierq's own: BEGIN and the settings in one query
            assert execute_text(conn, SHOW).fetchone()["lock_timeout"] == "150ms"
            store.local_lock_timeout(conn, "25ms")
            assert execute_text(conn, SHOW).fetchone()["lock_timeout"] == "25ms"
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_transactions_commit_on_success_and_roll_back_on_errors(db: Database,
                                                                pg: Any) -> None:
    with db.transaction() as conn:
        conn.execute("INSERT INTO tierq_queues (queue) VALUES ('kept')")
    with pytest.raises(RuntimeError), db.transaction() as conn:
        conn.execute("INSERT INTO tierq_queues (queue) VALUES ('dropped')")
        raise RuntimeError("the caller failed")
    queues = [r[0] for r in pg.execute("SELECT queue FROM tierq_queues ORDER BY 1")]
    assert queues == ["kept"]
    with db.connection() as conn:  # the connection went back clean
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_pipelined_transaction_carries_the_timeouts_and_rolls_back_whole(
        db: Database, pg: Any) -> None:
    """pipelined_transaction (one round trip: BEGIN, the statements, COMMIT): its statements
    carry tierq's settings, a failing one rolls back those before it, and the connection
    goes back clean."""
    with db.connection() as conn:
        shown, _ = pipelined_transaction(conn, [
            (SHOW, {}, None),
            ("INSERT INTO tierq_queues (queue) VALUES (%(q)s)", {"q": "kept"}, None)])
        assert shown.fetchone() == {"statement_timeout": "300ms", "lock_timeout": "150ms",
                                    "synchronous_commit": "on"}
        with pytest.raises(errors.UniqueViolation):
            pipelined_transaction(conn, [
                ("INSERT INTO tierq_queues (queue) VALUES (%(q)s)", {"q": "dropped"}, None),
                ("INSERT INTO tierq_queues (queue) VALUES (%(q)s)", {"q": "kept"}, None)])
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute(SHOW).fetchone()["statement_timeout"] == "0"
    queues = [r[0] for r in pg.execute("SELECT queue FROM tierq_queues ORDER BY 1")]
    assert queues == ["kept"]


def test_zero_means_no_limit(app_database_url: str, clean_stores: None) -> None:
    unlimited = Database(app_database_url, max_size=1, statement_timeout_ms=0,
                         lock_timeout_ms=0)
    try:
        with unlimited.connection() as conn:
            assert execute_text(conn, SHOW).fetchone()["statement_timeout"] == "0"
    finally:
        unlimited.close()


@pytest.fixture
def direct(app_database_url: str, clean_stores: None) -> Iterator[Database]:
    """A pool of direct connections, as the engine opens them without RDS Proxy: the
    timeouts are set on each session once."""
    database = Database(app_database_url, max_size=2, statement_timeout_ms=300,
                        lock_timeout_ms=150, session_settings=True)
    yield database
    database.close()


def test_direct_connections_carry_the_timeouts_on_their_session(direct: Database) -> None:
    """No set_config goes with their statements (one statement less each: ~25 µs of the
    server's CPU), none as a startup option, and the limits still hold."""
    for relaxed in (False, True):
        with direct.connection(relaxed=relaxed) as conn:
            assert "options" not in conn.info.get_parameters()
            assert conn.statements() == (None, "BEGIN")
            wanted = {"statement_timeout": "300ms", "lock_timeout": "150ms",
                      "synchronous_commit": "off" if relaxed else "on"}
            assert execute_text(conn, SHOW).fetchone() == wanted
            assert conn.execute(SHOW).fetchone() == wanted
    with direct.connection() as conn:
        with pytest.raises(errors.QueryCanceled, match="statement timeout"):
            execute_text(conn, "SELECT pg_sleep(5)")
        assert execute_text(conn, SHOW).fetchone()["statement_timeout"] == "300ms"
    with pytest.raises(DatabaseTimedOut), direct.transaction() as conn:
        conn.execute("SELECT pg_sleep(5)")


def test_a_scope_on_a_direct_connection_shortens_only_its_own_statements(
        direct: Database) -> None:
    with direct.connection() as conn:
        with scoped_timeouts(200, 50):
            set_local, begin = conn.statements()
            assert set_local is not None and "SET LOCAL lock_timeout = '50ms'" in begin
            assert execute_text(conn, SHOW).fetchone()["lock_timeout"] == "50ms"
            with transaction(conn):
                assert conn.execute(SHOW).fetchone()["statement_timeout"] == "200ms"
        with scoped_timeouts(5000, 0):  # no shorter than the session's: nothing sent
            assert conn.statements() == (None, "BEGIN")
        # the session's own again
        assert execute_text(conn, SHOW).fetchone()["lock_timeout"] == "150ms"
        assert conn.execute(SHOW).fetchone()["lock_timeout"] == "150ms"


def test_a_lock_wait_on_a_direct_connection_fails_at_the_lock_timeout(
        direct: Database, database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as owner:
        owner.execute("INSERT INTO tierq_queues (queue) VALUES ('locked-direct')")
        with owner.transaction():
            owner.execute("SELECT * FROM tierq_queues WHERE queue = 'locked-direct'"
                          " FOR UPDATE")
            with direct.connection() as conn:
                started = time.monotonic()
                with pytest.raises(errors.LockNotAvailable):
                    execute_text(conn, "UPDATE tierq_queues SET paused = true"
                                       " WHERE queue = 'locked-direct'")
                assert 0.1 < time.monotonic() - started < 3


def test_an_engine_without_rds_proxy_sets_the_timeouts_on_its_sessions(make_tq: Any) -> None:
    tq: Tierq = make_tq()
    assert tq.settings.db_secret_arn is None and tq.db.session_settings
    with tq.db.connection() as conn:
        assert conn.statements() == (None, "BEGIN")
        assert conn.execute(SHOW).fetchone()["lock_timeout"] == "5s"


def test_a_dedicated_connection_carries_the_timeouts_as_the_pools_do(
        db: Database, direct: Database) -> None:
    """A connection outside the pools (``dedicated_connection``: the feed's lock): behind
    a proxy each statement carries the timeouts, on a direct connection its session does;
    no startup option either way, no prepared statement, and the store's errors."""
    with db.dedicated_connection() as conn:
        assert "options" not in conn.info.get_parameters() and conn.prepare_threshold is None
        assert execute_text(conn, SHOW).fetchone() == {
            "statement_timeout": "300ms", "lock_timeout": "150ms", "synchronous_commit": "on"}
        assert conn.execute(SHOW).fetchone()["statement_timeout"] == "0"
    with direct.dedicated_connection() as conn:
        assert conn.statements() == (None, "BEGIN")
        assert conn.execute(SHOW).fetchone()["lock_timeout"] == "150ms"
    assert conn.closed
    with pytest.raises(DatabaseTimedOut), direct.dedicated_connection() as conn:
        execute_text(conn, "SELECT pg_sleep(5)")


def test_a_dedicated_connection_that_gets_no_answer_gives_up_at_the_pools_timeout() -> None:
    """A server that accepts the connection and never answers: the attempt waits about
    the pool's timeout (libpq's ``connect_timeout``), not the minutes of psycopg's
    default, and is ``Unavailable``."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        database = Database(f"postgresql://nobody@127.0.0.1:{port}/x", min_size=0,
                            timeout=1.0)
        try:
            started = time.monotonic()
            with pytest.raises(Unavailable), database.dedicated_connection():
                pytest.fail("connected to a server that never answered")
            assert time.monotonic() - started < 5
        finally:
            database.close()
