"""The statements that run as PL/pgSQL functions where nothing is prepared (behind RDS
Proxy; migrations 0029 and 0032): each function's body is its named statement and nothing
else, the store calls the function exactly when its database prepares nothing, and an
engine that works the way it does on AWS gives every outcome the prepared statements give,
tenants and attempts checked alike, on the real PostgreSQL and Valkey."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from tests.support.every_task import EVERY_TASK
from tests.support.stores import migrated_database
from tierq.config import Settings
from tierq.dal.postgres import Database, uuid_array
from tierq.dal.sql_files import queries
from tierq.dal.store import base
from tierq.dal.store.base import ROUTINE
from tierq.dal.store.base import _called_function as called_function
from tierq.dal.task_store import TaskStore
from tierq.engine import Tierq
from tierq.logic import batch_rows as batch_rows_logic
from tierq.logic.context import OffsetClock
from tierq.models import AckItem

QUEUE = "q"
ALL = frozenset({"insert_tasks", "insert_tasks_keyless", "insert_tasks_uniform",
                 "insert_tasks_uniform_keyed", "ack_delete", "ack_delete_by_attempt", "ack_keep",
                 "lease_outcomes", "release_leased", "insert_batch", "insert_batch_keyed",
                 "lock_batches", "move_out_of_batches"})
_PARAM = re.compile(r"%\((\w+)\)s")
_COMMENT = re.compile(r"--[^\n]*")


def routines() -> dict[str, str]:
    """{named statement: its call's query} of every statement with a function."""
    named = queries()
    return {name[len(ROUTINE):]: text for name, text in named.items()
            if name.startswith(ROUTINE)}


def words(text: str) -> str:
    """``text`` without comments, its whitespace one space: what a comparison should see."""
    return " ".join(_COMMENT.sub("", text).split())


@pytest.fixture(scope="module")
def migrated(database_url: str) -> Iterator[str]:
    with migrated_database(database_url, "tierq_routines") as url:
        yield url


@pytest.fixture
def stores(migrated: str) -> Iterator[tuple[TaskStore, TaskStore, psycopg.Connection[Any]]]:
    """(the statements prepared, the functions with nothing prepared, a plain connection),
    on a database emptied first."""
    prepared = Database(migrated, max_size=1)
    proxied = Database(migrated, max_size=1, prepare=False)
    with psycopg.connect(migrated, autocommit=True) as pg:
        pg.execute("TRUNCATE tierq_tasks")
        try:
            yield TaskStore(prepared), TaskStore(proxied), pg
        finally:
            prepared.close()
            proxied.close()


def test_every_routine_is_its_named_statement(migrated: str) -> None:
    """Each call names a function whose body is its statement and whose parameters are
    the call's arguments, typed as the call casts them; the application's group may call
    it even where PUBLIC may not."""
    named = queries()
    assert set(routines()) == ALL
    with psycopg.connect(migrated) as pg:
        for name, call in routines().items():
            function = called_function(call)
            assert re.fullmatch(rf"tierq_{name}_v\d+", function), function
            found = pg.execute(
                "SELECT prosrc, pg_get_function_identity_arguments(oid),"
                " has_function_privilege(tierq_app_group(), oid, 'EXECUTE')"
                " FROM pg_proc WHERE proname = %s"
                " AND pronamespace = current_schema()::regnamespace", (function,)).fetchall()
            assert len(found) == 1, f"{function}: {len(found)} functions"
            [(body, arguments, granted)] = found
            assert granted, f"{function}: no EXECUTE for the application's group"
            statement = named[name]
            params = sorted(set(_PARAM.findall(statement)))
            casts = dict(re.findall(r"\b(p_\w+) => %\(\w+\)s::([^,)]+)", call))
            assert sorted(casts) == [f"p_{p}" for p in params], name
            assert all(f"p_{p} => %({p})s::" in call for p in params), name
            assert dict(a.split(" ", 1) for a in arguments.split(", ")) == casts, (
                f"{function}({arguments}) is not called as {casts}")
            expected = "#variable_conflict use_column BEGIN RETURN QUERY " + words(
                _PARAM.sub(lambda m: f"p_{m.group(1)}", statement)) + "; END"
            assert words(body) == expected, f"{function} is not the statement {name}"


def test_the_store_calls_a_function_only_where_nothing_is_prepared(
        stores: tuple[TaskStore, TaskStore, psycopg.Connection[Any]]) -> None:
    prepared, proxied, pg = stores
    mine = warm_rows(pg, ["t", "t"])
    assert prepared.ack_delete(QUEUE, mine[:1], ["t"], 1) == [(mine[0], "g-t")]
    assert proxied.ack_delete(QUEUE, mine[1:], ["t"], 1) == [(mine[1], "g-t")]
    assert prepared.routines_in_use == frozenset()
    assert proxied.routines_in_use == ALL
    assert Database("postgresql://127.0.0.1:1/x", min_size=0, prepare=False).routines
    assert not Database("postgresql://127.0.0.1:1/x", min_size=0).routines
    assert not Database("postgresql://127.0.0.1:1/x", min_size=0, prepare=False,
                        routines=False).routines


def test_a_missing_function_leaves_its_statement_to_run_itself_until_found(
        migrated: str, stores: tuple[TaskStore, TaskStore, psycopg.Connection[Any]],
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Code deployed before migration 0029 ran (or EXECUTE revoked): the statement runs
    itself, inside a transaction too, warned once; the function is used once found."""
    _, _, pg = stores
    caplog.set_level(logging.WARNING, logger="tierq.dal.store.base")
    now = datetime.now(UTC)

    def batch() -> Any:
        return columns([str(uuid.uuid4()) for _ in range(3)], state="warm", run_at=0.0,
                       max_attempts=1, timeout=None)

    def warnings() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "missing or not callable" in r.getMessage()]

    monkeypatch.setattr(base, "ROUTINE_RECHECK_SECONDS", 0.0)  # (looks on every call)
    pg.execute("ALTER FUNCTION tierq_insert_tasks_uniform_v1 RENAME TO tierq_gone")
    store = TaskStore(Database(migrated, max_size=1, prepare=False))
    try:
        with store.db.transaction() as conn:
            assert store.insert_tasks_uniform(QUEUE, now, batch(), conn=conn)[1] == 3
        assert store.insert_tasks_uniform(QUEUE, now, batch())[1] == 3
        assert store.routines_in_use == ALL - {"insert_tasks_uniform"}
        [warned] = warnings()
        assert "tierq_insert_tasks_uniform_v1" in warned.getMessage()
    finally:
        pg.execute("ALTER FUNCTION tierq_gone RENAME TO tierq_insert_tasks_uniform_v1")
    try:
        assert store.insert_tasks_uniform(QUEUE, now, batch())[1] == 3
        assert store.routines_in_use == ALL
        assert len(warnings()) == 1
    finally:
        store.db.close()


def test_a_function_gone_after_it_was_found_is_looked_for_again(
        migrated: str, stores: tuple[TaskStore, TaskStore, psycopg.Connection[Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropped or renamed after the store found it: an autocommit statement runs itself at
    once, one in a caller's transaction fails once (its caller retries), and the store
    looks again, finding it once it is back; another function's error is not taken for
    it."""
    _, _, pg = stores
    monkeypatch.setattr(base, "ROUTINE_RECHECK_SECONDS", 0.0)  # (a minute, at once)
    store = TaskStore(Database(migrated, max_size=1, prepare=False))
    now = datetime.now(UTC)

    def batch() -> Any:
        return columns([str(uuid.uuid4()) for _ in range(3)], state="warm", run_at=0.0,
                       max_attempts=1, timeout=None)

    try:
        assert store.insert_tasks_uniform(QUEUE, now, batch())[1] == 3
        assert store.routines_in_use == ALL
        pg.execute("ALTER FUNCTION tierq_insert_tasks_uniform_v1 RENAME TO tierq_gone")
        try:
            with pytest.raises(psycopg.errors.UndefinedFunction), \
                    store.db.transaction() as conn:
                store.insert_tasks_uniform(QUEUE, now, batch(), conn=conn)
            assert store.routines_in_use == ALL  # (looked for at the next call)
            with store.db.transaction() as conn:  # (the retry)
                assert store.insert_tasks_uniform(QUEUE, now, batch(), conn=conn)[1] == 3
            assert store.routines_in_use == ALL - {"insert_tasks_uniform"}
        finally:
            pg.execute("ALTER FUNCTION tierq_gone RENAME TO tierq_insert_tasks_uniform_v1")
        assert store.insert_tasks_uniform(QUEUE, now, batch())[1] == 3
        assert store.routines_in_use == ALL
        pg.execute("ALTER FUNCTION tierq_insert_tasks_uniform_v1 RENAME TO tierq_gone")
        try:
            assert store.insert_tasks_uniform(QUEUE, now, batch())[1] == 3  # (at once)
            assert store.routines_in_use == ALL
            assert store.insert_tasks_uniform(QUEUE, now, batch())[1] == 3
            assert store.routines_in_use == ALL - {"insert_tasks_uniform"}
            mine = warm_rows(pg, ["t"])  # (the others go on as functions)
            assert store.ack_delete(QUEUE, mine, ["t"], 1) == [(mine[0], "g-t")]
        finally:
            pg.execute("ALTER FUNCTION tierq_gone RENAME TO tierq_insert_tasks_uniform_v1")
        assert store.insert_tasks_uniform(QUEUE, now, batch())[1] == 3
        assert store.routines_in_use == ALL
        # an error naming another function is the caller's, not a missing routine
        with pytest.raises(psycopg.errors.UndefinedFunction), \
                store.db.transaction() as conn:
            conn.execute("SELECT tierq_no_such_function()")
        assert store.routines_in_use == ALL
    finally:
        store.db.close()


def rows_of(pg: psycopg.Connection[Any], ids: list[str]) -> list[tuple[Any, ...]]:
    """The columns an insert writes, without the id and seq (each store's own)."""
    return pg.execute(
        "SELECT queue, tenant, key, priority, payload, state, run_at, run_at_initially,"
        " attempts, max_attempts, created_at, ready_since, state_since, grp,"
        " timeout_seconds, trace FROM tierq_tasks t"
        " JOIN unnest(%s::uuid[]) WITH ORDINALITY AS v(id, n) ON v.id = t.id ORDER BY v.n",
        (ids,)).fetchall()


def columns(ids: list[str], **shared: Any) -> dict[str, Any]:
    return {"ids": uuid_array(ids), "tenants": '["a", "b", "a"]', "priorities": "{0,9,3}",
            "payloads": '[{"n": 1}, "two", [3]]', **shared}


def test_the_inserts_write_what_the_statements_write(
        stores: tuple[TaskStore, TaskStore, psycopg.Connection[Any]]) -> None:
    prepared, proxied, pg = stores
    now = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    run_at = now.timestamp() + 60
    for state in ("warm", "delayed"):
        a, b = ([str(uuid.uuid4()) for _ in range(3)] for _ in range(2))
        uniform = {"state": state, "run_at": run_at, "max_attempts": 4, "timeout": 30}
        first_a, n_a = prepared.insert_tasks_uniform(QUEUE, now, columns(a, **uniform))
        first_b, n_b = proxied.insert_tasks_uniform(QUEUE, now, columns(b, **uniform))
        assert n_a == n_b == 3 and first_b > first_a
        assert rows_of(pg, b) == rows_of(pg, a)
        seqs = pg.execute("SELECT seq FROM tierq_tasks t JOIN unnest(%s::uuid[])"
                          " WITH ORDINALITY AS v(id, n) ON v.id = t.id ORDER BY v.n",
                          (b,)).fetchall()
        assert [s for (s,) in seqs] == [first_b, first_b + 1, first_b + 2]
    a, b = ([str(uuid.uuid4()) for _ in range(3)] for _ in range(2))
    each = {"states": "{warm,delayed,warm}", "run_ats": f"{{{run_at},{run_at},{run_at}}}",
            "max_attempts": "{1,2,3}", "grps": '["g", null, "h"]', "timeouts": "{5,NULL,7}",
            "traces": '[null, "{\\"traceparent\\": \\"x\\"}", null]'}
    assert prepared.insert_tasks_keyless(QUEUE, now, columns(a, **each))[1] == 3
    assert proxied.insert_tasks_keyless(QUEUE, now, columns(b, **each))[1] == 3
    assert rows_of(pg, b) == rows_of(pg, a)


def warm_rows(pg: psycopg.Connection[Any], tenants: list[str], attempts: int = 0) -> list[str]:
    ids = [str(uuid.uuid4()) for _ in tenants]
    pg.execute(
        "INSERT INTO tierq_tasks (id, queue, tenant, payload, state, run_at, run_at_initially,"
        " max_attempts, seq, created_at, state_since, attempts, grp)"
        " SELECT v.id, %s, v.tenant, '1', 'warm', now(), now(), 5,"
        " nextval('tierq_task_seq'), now(), now(), %s, 'g-' || v.tenant"
        " FROM unnest(%s::uuid[], %s::text[]) AS v(id, tenant)",
        (QUEUE, attempts, ids, tenants))
    return ids


def left(pg: psycopg.Connection[Any], ids: list[str]) -> set[str]:
    return {str(i) for (i,) in pg.execute(
        "SELECT id FROM tierq_tasks WHERE id = ANY(%s::uuid[])", (ids,)).fetchall()}


def test_the_acks_delete_only_what_the_statements_delete(
        stores: tuple[TaskStore, TaskStore, psycopg.Connection[Any]]) -> None:
    _, proxied, pg = stores
    # ack_delete: the tenant's rows whose attempt is not recorded yet, no other's
    mine, other = warm_rows(pg, ["a", "a"]), warm_rows(pg, ["b"])
    stale = warm_rows(pg, ["a"], attempts=1)
    done = proxied.ack_delete(QUEUE, mine + other + stale, ["a"], 1)
    assert sorted(done) == sorted((i, "g-a") for i in mine)
    assert left(pg, mine + other + stale) == set(other + stale)
    # ack_delete_by_attempt: each row with its own tenant and attempt; a swapped pairing
    # deletes neither row
    a, b = warm_rows(pg, ["a"]), warm_rows(pg, ["b"])
    assert proxied.ack_delete_by_attempt(QUEUE, a + b, ["b", "a"], [1, 1]) == []
    assert left(pg, a + b) == set(a + b)
    old = warm_rows(pg, ["b"], attempts=2)
    done = proxied.ack_delete_by_attempt(QUEUE, a + b + old, ["a", "b", "b"], [1, 1, 2])
    assert sorted(done) == sorted([(a[0], "g-a"), (b[0], "g-b")])
    assert left(pg, a + b + old) == set(old)


@pytest.mark.parametrize("batch_rows", [False, True], ids=["rows", "batch rows"])
def test_an_engine_as_on_aws_enqueues_claims_and_acks_over_tenants(
        app_database_url: str, valkey_url: str, valkey_cluster: bool,
        clean_stores: None, pg: psycopg.Connection[Any], batch_rows: bool) -> None:
    """An engine as on AWS enqueues, claims and acks over tenants on each layout, named:
    rows (their acks ack_delete_by_attempt and ack_delete) and batch rows (the members'
    ends, tierq_end_batch_members_v2, whatever the environment says)."""
    settings = Settings(database_url=app_database_url, valkey_url=valkey_url,
                        settings_cache_seconds=0.0, valkey_cluster=valkey_cluster,
                        batch_rows=batch_rows)
    # (as on AWS: no prepared statement, timeouts set per transaction, never per session)
    db = Database(app_database_url, max_size=2, prepare=False, session_settings=False)
    tq = Tierq(settings=settings, db=db, clock=OffsetClock())
    try:
        for tenant in ("a", "b", "c"):
            tq.enqueue(QUEUE, [{"payload": {"n": n}} for n in range(4)], tenant=tenant)
        assert pg.execute("SELECT count(*) FROM tierq_batches").fetchone() == (3 * batch_rows,)
        claimed = tq.claim(QUEUE, max=12)
        assert len(claimed) == 12 and {t.tenant for t in claimed} == {"a", "b", "c"}
        # one ack over three tenants, then the same again: refused
        first = tq.ack(QUEUE, claimed)
        assert len(first.acked) == 12
        again = tq.ack(QUEUE, [AckItem(id=t.id, lease_token=t.lease_token)
                               for t in claimed[:2]])
        assert len(again.rejected) == 2
        assert not again.acked
        assert pg.execute(f"SELECT count(*) FROM {EVERY_TASK}").fetchone() == (0,)
        # one tenant's batch; a lease of another tenant named with it is not acked by the
        # statement (the check in Valkey is skipped on purpose)
        tq.enqueue(QUEUE, [{"payload": 1}, {"payload": 2}], tenant="a")
        tq.enqueue(QUEUE, [{"payload": 3}], tenant="b")
        mine = tq.claim(QUEUE, tenant="a", max=2)
        [theirs] = tq.claim(QUEUE, tenant="b")
        assert batch_rows_logic.finish_plain(tq.ctx, QUEUE, [str(theirs.id)], ["a"],
                                             [theirs.attempt]) == []
        result = tq.ack(QUEUE, mine)
        assert len(result.acked) == 2
        assert pg.execute(f"SELECT tenant FROM {EVERY_TASK}").fetchall() == [("b",)]
        assert tq.ctx.store.routines_in_use == ALL
    finally:
        tq.close()


def test_an_engine_as_on_aws_keeps_batch_rows_with_their_functions(
        app_database_url: str, valkey_url: str, valkey_cluster: bool,
        clean_stores: None, pg: psycopg.Connection[Any]) -> None:
    """Batch rows (migrations 0030 to 0032) through the functions alone: an enqueue with
    and without keys, a nack that moves a member out, acks of members and of rows."""
    settings = Settings(database_url=app_database_url, valkey_url=valkey_url,
                        settings_cache_seconds=0.0, valkey_cluster=valkey_cluster,
                        batch_rows=True)
    db = Database(app_database_url, max_size=2, prepare=False, session_settings=False)
    tq = Tierq(settings=settings, db=db, clock=OffsetClock())
    try:
        keyless = tq.enqueue(QUEUE, [{"payload": n} for n in range(3)], tenant="a")
        keyed = tq.enqueue(QUEUE, [{"payload": 3}, {"payload": 4, "key": "k"}], tenant="b")
        assert [c for (c,) in pg.execute("SELECT tasks FROM tierq_batches ORDER BY id")] \
            == [3, 1]
        assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (1,)
        claimed = {str(t.id): t for t in tq.claim(QUEUE, max=5)}
        assert set(claimed) == {str(t.id) for t in [*keyless, *keyed]}
        first = claimed[str(keyless[0].id)]
        out = tq.nack(QUEUE, [{"id": first.id, "lease_token": first.lease_token,
                               "error": "boom", "retry_in_seconds": 0}])
        assert [str(i) for i in out.retried] == [str(first.id)]
        assert pg.execute("SELECT state, attempts FROM tierq_tasks WHERE id = %s",
                          (first.id,)).fetchone() == ("warm", 1)
        rest = [t for i, t in claimed.items() if i != str(first.id)]
        assert len(tq.ack(QUEUE, rest).acked) == 4
        [again] = tq.claim(QUEUE, max=1)
        assert (again.id, again.attempt) == (first.id, 2)
        assert len(tq.ack(QUEUE, [again]).acked) == 1
        assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (0,)
        store = tq.ctx.store
        assert {"insert_batch", "insert_batch_keyed", "lock_batches",
                "move_out_of_batches"} <= store.routines_in_use
    finally:
        tq.close()
