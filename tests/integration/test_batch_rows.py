"""Batch rows (migration 0030, tierq.dal.store.batches) on the real PostgreSQL, logged in as
the application: a member is read as its row holds it, moved out into ``tierq_tasks`` as it
stood, or ended by a plain ack; a move and an ack of one batch never overlap, so no member
is both acked and made a row again; the sweep deletes a batch only once every member has
ended, passes over one in use, and leaves no end behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
import pytest

from tests.support.stores import TierqFactory
from tierq.core.batch_ids import batch_ids
from tierq.core.ids import uuid7_strings
from tierq.dal.postgres import int_array, text_array
from tierq.dal.store.batches import FIRST_KEY, GROUP_MIN, BatchColumns
from tierq.dal.task_store import TaskStore
from tierq.engine import Tierq
from tierq.logic import ack_gathering, batch_rows

QUEUE = "q"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TENANTS = ["a", "b", "a", "a", "b"]
PAYLOADS = [{"n": n} for n in range(len(TENANTS))]


@pytest.fixture
def store(tq: Tierq) -> TaskStore:
    return tq.ctx.store


def insert(store: TaskStore, tenants: list[str] = TENANTS, queue: str = QUEUE,
           timeout: int | None = 30) -> tuple[list[str], int]:
    """A batch row of ``tenants``' tasks (priorities 0, 1, … 9, 0, …); (its ids, first seq)."""
    ids = batch_ids(len(tenants))
    first, keyed = store.insert_batch(queue, NOW, columns(
        ids[0], tenants, [n % 10 for n in range(len(tenants))],
        [{"n": n} for n in range(len(tenants))],
        timeout=timeout))
    assert keyed == {}
    return ids, first


def columns(key: str, tenants: list[str], priorities: list[int], payloads: list[Any],
            max_attempts: int = 5, timeout: int | None = None) -> BatchColumns:
    """A batch row's parameters, as logic/batch_rows.take makes them."""
    names = list(dict.fromkeys(tenants))
    return {"batch": key, "tenant_names": text_array(names),
            "tenant_of": bytes(names.index(t) for t in tenants) if len(names) > 1 else None,
            "priorities": int_array(priorities), "payloads": orjson.dumps(payloads).decode(),
            "max_attempts": max_attempts, "timeout": timeout}


def end(store: TaskStore, queue: str, ids: list[str], tenants: list[str],
        conn: Any = None) -> list[str]:
    """A plain ack's end of ``ids`` (attempt 1 each); the ids finished."""
    return [r.id for r in store.end_batch_members(queue, ids, tenants, [1] * len(ids),
                                                  conn=conn)]


def rows_of(pg: psycopg.Connection[Any], ids: list[str]) -> dict[str, tuple[Any, ...]]:
    found = pg.execute(
        "SELECT id::text, queue, tenant, priority, payload, state, attempts, max_attempts, seq,"
        " timeout_seconds, created_at, ready_since, state_since FROM tierq_tasks"
        " WHERE id = ANY(%s::uuid[])", (ids,)).fetchall()
    return {row[0]: row[1:] for row in found}


def test_a_batch_row_reads_as_its_members(store: TaskStore) -> None:
    ids, first = insert(store)
    members = {m.id: m for m in store.batch_members(ids, None)}
    assert set(members) == set(ids)
    for place, task_id in enumerate(ids):
        m = members[task_id]
        assert (m.queue, m.tenant, m.priority, orjson.loads(m.payload), m.seq, m.max_attempts,
                m.timeout_seconds, m.created_at, m.ended) == (
            QUEUE, TENANTS[place], place, PAYLOADS[place], first + place, 5, 30, NOW, None)
    # a tenant named reads only its own; ids without the mark, or of no batch, read nothing
    assert {m.id for m in store.batch_members(ids, ["b"])} == {ids[1], ids[4]}
    assert store.batch_members(uuid7_strings(3), None) == []
    assert store.batch_members(batch_ids(2), None) == []
    assert store.batch_members(ids, []) == []  # (no tenant named: none of them)


def test_a_move_makes_rows_as_the_members_stood(store: TaskStore,
                                                pg: psycopg.Connection[Any]) -> None:
    ids, first = insert(store)
    moved = store.move_out_of_batches(QUEUE, [ids[0], ids[1], uuid7_strings(1)[0]],
                                      ["a", "b", "a"])
    assert sorted(moved) == sorted(ids[:2])
    rows = rows_of(pg, ids)
    assert set(rows) == set(ids[:2])
    for place in (0, 1):
        assert rows[ids[place]] == (QUEUE, TENANTS[place], place, PAYLOADS[place], "warm", 0,
                                    5, first + place, 30, NOW, NOW, NOW)
    ended = {m.id: m.ended for m in store.batch_members(ids, None)}
    assert ended == {ids[0]: "moved", ids[1]: "moved", ids[2]: None, ids[3]: None,
                     ids[4]: None}
    # moved once only; an ack of a moved member finds its row and deletes it
    assert store.move_out_of_batches(QUEUE, ids[:2], ["a", "b"]) == []
    assert len(rows_of(pg, ids)) == 2
    assert sorted(end(store, QUEUE, ids[:2], ["a", "b"])) == sorted(ids[:2])
    assert rows_of(pg, ids) == {}


def test_a_move_or_an_ack_names_the_members_queue_and_tenant(
        store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    ids, _ = insert(store)
    assert store.move_out_of_batches(QUEUE, ids[:2], ["b", "a"]) == []
    assert store.move_out_of_batches("other", ids[:2], ["a", "b"]) == []
    assert end(store, QUEUE, ids[:2], ["b", "a"]) == []
    assert end(store, "other", ids[:2], ["a", "b"]) == []
    assert rows_of(pg, ids) == {}
    assert {m.ended for m in store.batch_members(ids, None)} == {None}


def test_an_ack_over_batches_tenants_and_rows_answers_each_task_once(
        make_tq: TierqFactory, store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    ids, _ = insert(store)  # tenants a b a a b
    others, _ = insert(store, ["b", "c"])
    assert store.move_out_of_batches(QUEUE, [ids[3]], ["a"]) == [ids[3]]
    rows = make_tq(batch_rows=False).enqueue(QUEUE, [{"payload": 0}, {"payload": 1}],
                                             tenant="a")
    [row, kept] = [str(t.id) for t in rows]
    stray = batch_ids(1)[0]  # (marked, of no batch row)
    acked = end(store, QUEUE, [others[1], ids[0], row, ids[0], ids[3], others[0], ids[1],
                               stray, kept, row],
                ["c", "a", "a", "a", "a", "b", "a", "a", "b", "a"])
    # b's task named as a's is not ended, a's row named as b's is kept; a repeated id is
    # answered once
    assert sorted(acked) == sorted([others[1], ids[0], row, ids[3], others[0]])
    assert len(acked) == 5
    assert set(rows_of(pg, [row, kept])) == {kept}
    ended = {m.id: m.ended for m in store.batch_members(ids + others, None)}
    assert ended == {ids[0]: "acked", ids[1]: None, ids[2]: None, ids[3]: "moved",
                     ids[4]: None, others[0]: "acked", others[1]: "acked"}
    assert rows_of(pg, ids) == {}


def test_an_ack_ends_long_runs_whole_the_rest_alone_in_one_end_row_a_batch(
        store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    """Migration 0033: the places of a run of one batch, tenant and attempt of at least
    ``GROUP_MIN`` are checked together (in a batch row of several tenants too), shorter
    runs alone; one end row a batch, its places in order, however the ack named them."""
    assert GROUP_MIN == 8
    mixed, _ = insert(store, ["a", "b"] * 12)
    single, _ = insert(store, ["c"] * 10)
    assert sorted(end(store, QUEUE, single[::-1], ["c"] * 10)) == sorted(single)
    a, b = mixed[::2], mixed[1::2]
    done = store.end_batch_members(QUEUE, a + b, ["a"] * 12 + ["b"] * 12,
                                   [1] * 12 + [1] * 10 + [3] * 2)
    assert sorted(r.id for r in done) == sorted(mixed)
    ends = pg.execute("SELECT batch::text, places FROM tierq_batch_ends").fetchall()
    assert sorted(ends) == sorted([(mixed[0], list(range(24))), (single[0], list(range(10)))])


def test_a_long_run_that_does_not_hold_whole_is_checked_place_by_place(
        store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    """A run with a place moved out, or a place of another tenant, is checked place by
    place: its other places are ended, the moved one's row deleted, the other tenant's
    left."""
    ids, _ = insert(store, ["a"] * 9 + ["b"] + ["a"] * 2)
    assert store.move_out_of_batches(QUEUE, [ids[3]], ["a"]) == [ids[3]]
    done = end(store, QUEUE, ids, ["a"] * 12)  # (ids[9] is b's)
    assert sorted(done) == sorted(ids[:9] + ids[10:])
    assert rows_of(pg, ids) == {}
    ended = {m.id: m.ended for m in store.batch_members(ids, None)}
    assert ended == {**dict.fromkeys(ids, "acked"), ids[3]: "moved", ids[9]: None}


def test_a_second_group_that_does_not_hold_whole_answers_exactly_its_places_left(
        store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    """Two groups (the second numbered past the first's places): the first holds whole;
    the second has a place moved out and a place of another tenant, so only those two are
    not ended, the moved one's row deleted as a row and the other tenant's left."""
    one, _ = insert(store, ["a"] * 10)
    two, _ = insert(store, ["a"] * 5 + ["b"] + ["a"] * 4)
    assert store.move_out_of_batches(QUEUE, [two[2]], ["a"]) == [two[2]]
    done = end(store, QUEUE, one + two, ["a"] * 20)
    assert sorted(done) == sorted(one + two[:5] + two[6:])
    ended = {m.id: m.ended for m in store.batch_members(one + two, None)}
    assert ended == {**dict.fromkeys(one + two, "acked"), two[2]: "moved", two[5]: None}
    assert rows_of(pg, one + two) == {}


def test_a_group_of_the_wrong_tenant_ends_nothing(store: TaskStore,
                                                  pg: psycopg.Connection[Any]) -> None:
    """A long run named with another tenant than its batch row's, in a batch row of one
    tenant and in one of several: no place of it is ended."""
    single, _ = insert(store, ["a"] * 10)
    mixed, _ = insert(store, ["a", "b"] * 10)
    assert end(store, QUEUE, single, ["b"] * 10) == []
    assert end(store, QUEUE, mixed[::2], ["b"] * 10) == []
    assert {m.ended for m in store.batch_members(single + mixed, None)} == {None}
    assert pg.execute("SELECT count(*) FROM tierq_batch_ends").fetchone() == (0,)


def test_an_ack_of_a_moved_member_checks_its_attempt(
        store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    ids, _ = insert(store)
    assert store.move_out_of_batches(QUEUE, [ids[0]], ["a"]) == [ids[0]]
    pg.execute("UPDATE tierq_tasks SET attempts = 2 WHERE id = %s", (ids[0],))
    # (an ack of an attempt its row has counted already is stale)
    assert store.end_batch_members(QUEUE, [ids[0]], ["a"], [2]) == []
    assert set(rows_of(pg, ids)) == {ids[0]}
    assert [r.id for r in store.end_batch_members(QUEUE, [ids[0]], ["a"], [3])] == [ids[0]]
    assert rows_of(pg, ids) == {}


def test_an_ack_before_migration_0031_deletes_rows_while_no_batch_row_exists(
        tq: Tierq, store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    """Code deployed before its migration: ids marked by chance (an older tierq's) are
    rows, deleted as any row while no batch row exists; once one exists, the ack fails
    rather than leave a member unended."""
    ids = batch_ids(2)
    pg.execute(
        "INSERT INTO tierq_tasks (id, queue, tenant, payload, state, run_at, run_at_initially,"
        " max_attempts, seq, created_at, state_since)"
        " SELECT v.id, %s, 'a', '1', 'warm', now(), now(), 5, nextval('tierq_task_seq'),"
        " now(), now() FROM unnest(%s::uuid[]) AS v(id)", (QUEUE, ids))
    pg.execute("ALTER FUNCTION tierq_end_batch_members_v3 RENAME TO tierq_gone_v3")
    pg.execute("ALTER FUNCTION tierq_end_batch_members_v2 RENAME TO tierq_gone")
    try:
        assert store.end_batch_members(QUEUE, ids, ["a", "a"], [1, 1]) is None
        assert rows_of(pg, ids).keys() == set(ids)
        finished = batch_rows.finish_plain(tq.ctx, QUEUE, ids, ["a", "a"], [1, 1])
        assert sorted(r.id for r in finished) == sorted(ids)
        assert rows_of(pg, ids) == {}
        members, _ = insert(store)
        with pytest.raises(psycopg.errors.UndefinedFunction):
            store.end_batch_members(QUEUE, members[:1], ["a"], [1])
    finally:
        pg.execute("ALTER FUNCTION tierq_gone RENAME TO tierq_end_batch_members_v2")
        pg.execute("ALTER FUNCTION tierq_gone_v3 RENAME TO tierq_end_batch_members_v3")


def test_an_ack_before_migration_0033_ends_members_by_the_function_before_it(
        store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    """Code deployed before migration 0033, batch rows written: an ack with a long run
    ends its members (and leaves out a member of another tenant) by migration 0031's
    function, as the grouped one does, and the next minute's acks go to it at once."""
    ids, _ = insert(store, ["a"] * 10 + ["b"])
    pg.execute("ALTER FUNCTION tierq_end_batch_members_v3 RENAME TO tierq_gone_v3")
    try:
        done = end(store, QUEUE, ids[:10] + ids[10:], ["a"] * 9 + ["b", "a"])
        assert store._ack_v2_until > time.monotonic()
    finally:
        pg.execute("ALTER FUNCTION tierq_gone_v3 RENAME TO tierq_end_batch_members_v3")
    assert sorted(done) == sorted(ids[:9])
    assert {m.id: m.ended for m in store.batch_members(ids, None)} == {
        **dict.fromkeys(ids[:9], "acked"), ids[9]: None, ids[10]: None}


def test_a_function_missing_inside_the_ack_is_raised_not_taken_for_an_old_schema(
        store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    """An UndefinedFunction raised inside ``_v3`` (something its body calls is gone) is
    raised, not mistaken for a schema before migration 0033."""
    ids, _ = insert(store, ["a"] * 10)
    pg.execute("ALTER FUNCTION tierq_batch_tenant RENAME TO tierq_batch_tenant_gone")
    try:
        with pytest.raises(psycopg.errors.UndefinedFunction, match="tierq_batch_tenant"):
            end(store, QUEUE, ids, ["a"] * 10)
    finally:
        pg.execute("ALTER FUNCTION tierq_batch_tenant_gone RENAME TO tierq_batch_tenant")
    assert store._ack_v2_until == 0.0
    assert sorted(end(store, QUEUE, ids, ["a"] * 10)) == sorted(ids)


def test_the_ack_function_refuses_tasks_not_packed_as_it_reads_them(
        pg: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.RaiseException, match="not eight per element"):
        pg.execute("SELECT * FROM tierq_end_batch_members_v3('q', '{}', '{}', %s::bytea,"
                   " '{}', '', '{}', '')", (bytes(9),))
    with pytest.raises(psycopg.errors.RaiseException, match="not ten per member"):
        pg.execute("SELECT * FROM tierq_end_batch_members_v3('q', '{}', '{}', '', '{}',"
                   " %s::bytea, '{}', '')", (bytes(9),))
    with pytest.raises(psycopg.errors.RaiseException, match="not six per id"):
        pg.execute("SELECT * FROM tierq_end_batch_members_v3('q', '{}', '{}', '', '{}', '',"
                   " %s::uuid[], %s::bytea)", (uuid7_strings(1), bytes(5)))
    with pytest.raises(psycopg.errors.RaiseException, match="not ten per member"):
        pg.execute("SELECT * FROM tierq_end_batch_members_v2('q', '{}', '{}', %s::bytea,"
                   " '{}', '')", (bytes(9),))
    with pytest.raises(psycopg.errors.RaiseException, match="not six per id"):
        pg.execute("SELECT * FROM tierq_end_batch_members_v2('q', '{}', '{}', '', %s::uuid[],"
                   " %s::bytea)", (uuid7_strings(1), bytes(5)))


def test_an_acked_member_is_never_moved(store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    ids, _ = insert(store)
    assert sorted(end(store, QUEUE, ids[2:4], ["a", "a"])) == sorted(ids[2:4])
    moved = store.move_out_of_batches(QUEUE, ids, TENANTS)
    assert sorted(moved) == sorted([ids[0], ids[1], ids[4]])
    assert set(rows_of(pg, ids)) == {ids[0], ids[1], ids[4]}
    ended = {m.id: m.ended for m in store.batch_members(ids, None)}
    assert ended == {ids[0]: "moved", ids[1]: "moved", ids[2]: "acked", ids[3]: "acked",
                     ids[4]: "moved"}


def waiting_on_a_lock(pg: psycopg.Connection[Any], started: threading.Thread) -> None:
    """Until a backend other than ``pg``'s waits on an advisory lock (10 s at most)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and started.is_alive():
        [(waiting,)] = pg.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchall()
        if waiting:
            return
        time.sleep(0.02)
    raise AssertionError("no backend came to wait on the batch's lock")


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(work()), daemon=True)
    thread.start()
    return thread, out


def test_a_move_waits_for_an_ack_of_its_batch_and_then_leaves_the_acked(
        tq: Tierq, store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    ids, _ = insert(store)
    with tq.ctx.db.transaction() as conn:
        assert end(store, QUEUE, ids[:1], ["a"], conn=conn) == ids[:1]
        thread, moved = in_thread(
            lambda: store.move_out_of_batches(QUEUE, ids[:2], ["a", "b"]))
        waiting_on_a_lock(pg, thread)
    thread.join(10)
    assert moved == [[ids[1]]]
    assert set(rows_of(pg, ids)) == {ids[1]}


def test_an_ack_waits_for_a_move_of_its_batch_and_then_finds_the_moved_row(
        tq: Tierq, store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    ids, _ = insert(store)
    with tq.ctx.db.transaction() as conn:
        assert store.move_out_of_batches(QUEUE, ids[:1], ["a"], conn=conn) == ids[:1]
        thread, ended = in_thread(lambda: end(store, QUEUE, ids[:3],
                                                                  ["a", "b", "a"]))
        waiting_on_a_lock(pg, thread)
    thread.join(10)
    # (the moved member's row deleted, the others' places appended: none left warm twice)
    assert sorted(ended[0]) == sorted(ids[:3])
    assert rows_of(pg, ids) == {}
    assert {m.id: m.ended for m in store.batch_members(ids[:3], None)} == {
        ids[0]: "moved", ids[1]: "acked", ids[2]: "acked"}


def test_acks_of_one_batch_do_not_wait_on_each_other(tq: Tierq, store: TaskStore) -> None:
    ids, _ = insert(store)
    with tq.ctx.db.transaction() as conn:
        assert end(store, QUEUE, ids[:1], ["a"], conn=conn) == ids[:1]
        # (another connection's ack of the same batch runs while this one is open)
        assert end(store, QUEUE, ids[1:2], ["b"]) == ids[1:2]


def batch_count(pg: psycopg.Connection[Any]) -> tuple[int, int]:
    """(Batch rows, ends); their pairs' rows checked against the batch rows."""
    [(batches, ends)] = pg.execute("SELECT (SELECT count(*) FROM tierq_batches),"
                                   " (SELECT count(*) FROM tierq_batch_ends)").fetchall()
    held = pg.execute("SELECT queue, tenant, batch::text FROM tierq_batch_pairs").fetchall()
    expected = pg.execute("SELECT DISTINCT queue, t, id::text FROM tierq_batches,"
                          " unnest(tenant_names) AS t").fetchall()
    assert sorted(held) == sorted(expected)
    return batches, ends


def sweep_all(store: TaskStore, budget: int = 2) -> tuple[int, int, int]:
    """Passes from the first key until none is left: (passes, batches, tasks) deleted."""
    after, passes, batches, tasks = FIRST_KEY, 0, 0, 0
    while True:
        last, gone = store.sweep_batches(after, budget)
        passes += 1
        batches, tasks = batches + gone.batches, tasks + gone.tasks
        if last is None:
            return passes, batches, tasks
        after = last


def test_the_sweep_deletes_only_batches_whose_members_all_ended(
        store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    done, _ = insert(store)
    partly, _ = insert(store)
    fresh, _ = insert(store, ["a"])
    end(store, QUEUE, done[:3], TENANTS[:3])
    end(store, QUEUE, done[:1], TENANTS[:1])  # (an end appended twice)
    store.move_out_of_batches(QUEUE, done[3:], TENANTS[3:])
    end(store, QUEUE, partly[:4], TENANTS[:4])
    assert batch_count(pg) == (3, 4)
    assert sweep_all(store) == (3, 1, 5)  # (budget 2: two passes with batches, one past)
    assert batch_count(pg) == (2, 1)
    assert {m.id for m in store.batch_members(done + partly + fresh, None)} == set(partly + fresh)
    # the moved members' rows stay; an ack of a member of a batch swept appends nothing
    assert set(rows_of(pg, done)) == set(done[3:])
    assert end(store, QUEUE, done[:1], TENANTS[:1]) == []
    end(store, QUEUE, partly[4:] + fresh, ["b", "a"])
    assert sweep_all(store, budget=10) == (2, 2, 6)
    assert batch_count(pg) == (0, 0)


def test_the_sweep_passes_over_a_batch_in_use(tq: Tierq, store: TaskStore,
                                              pg: psycopg.Connection[Any]) -> None:
    ids, _ = insert(store, ["a", "a"])
    end(store, QUEUE, ids[:1], ["a"])
    with tq.ctx.db.transaction() as conn:
        end(store, QUEUE, ids[1:], ["a"], conn=conn)
        last, gone = store.sweep_batches(FIRST_KEY, 10)
        assert (last, gone) == (ids[0], (0, 0))
    assert store.sweep_batches(FIRST_KEY, 10) == (ids[0], (1, 2))
    assert batch_count(pg) == (0, 0)


@pytest.mark.parametrize(("field", "value", "named"), [
    ("priorities", "{0,10}", "tierq_batches_by_place"),
    ("tenant_of", b"\x00", "tierq_batches_by_place"),
    ("tenant_names", "{}", "tierq_batches_by_place"),
    ("max_attempts", 0, "tierq_batches_max_attempts_check"),
])
def test_a_batch_row_that_does_not_hold_by_place_is_refused(
        store: TaskStore, pg: psycopg.Connection[Any], field: str, value: Any,
        named: str) -> None:
    given = columns(batch_ids(2)[0], ["a", "b"], [0, 1], [{}, {}])
    with pytest.raises(psycopg.errors.CheckViolation, match=named):
        store.insert_batch(QUEUE, NOW, {**given, field: value})  # type: ignore[misc]
    assert batch_count(pg) == (0, 0)


def waiting_on_a_row_lock(pg: psycopg.Connection[Any], started: threading.Thread) -> None:
    """Until a backend other than ``pg``'s waits on a row (10 s at most)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and started.is_alive():
        [(waiting,)] = pg.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND pid <> pg_backend_pid()").fetchall()
        if waiting:
            return
        time.sleep(0.02)
    raise AssertionError("no backend came to wait on the batch row")


def test_a_purge_waits_for_a_move_and_deletes_the_moved_row_too(
        tq: Tierq, store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    """A move in a caller's transaction and a purge of the queue: the purge waits for the
    move to commit, then deletes the moved member's row with the rest; none survives to
    run after the purge."""
    ids, _ = insert(store)
    with tq.ctx.db.transaction() as conn:
        assert store.move_out_of_batches(QUEUE, ids[:1], ["a"], conn=conn) == ids[:1]
        thread, purged = in_thread(lambda: store.purge_queue_tasks(QUEUE))
        waiting_on_a_row_lock(pg, thread)
    thread.join(10)
    assert purged == [len(ids)]
    assert rows_of(pg, ids) == {}
    assert batch_count(pg) == (0, 0)


def test_the_sweep_drops_the_ends_a_purge_left_once_it_comes_round(
        store: TaskStore, pg: psycopg.Connection[Any]) -> None:
    """An ack that appended while a purge deleted its batch row leaves an end with no batch
    row: the sweep deletes it once it has come round to the last batch row."""
    ids, _ = insert(store, ["a", "a"])
    orphan = batch_ids(1)[0]
    pg.execute("INSERT INTO tierq_batch_ends (batch, places, moved) VALUES (%s, '{0}', false)",
               (orphan,))
    assert store.sweep_batches(FIRST_KEY, 10) == (ids[0], (0, 0))
    assert pg.execute("SELECT count(*) FROM tierq_batch_ends").fetchone() == (1,)
    assert store.sweep_batches(ids[0], 10) == (None, (0, 0))
    assert pg.execute("SELECT count(*) FROM tierq_batch_ends").fetchone() == (0,)
    assert batch_count(pg) == (1, 0)


def test_an_ack_that_goes_alone_leaves_out_the_members_an_ack_ended(tq: Tierq,
                                                                     store: TaskStore) -> None:
    """A gathered ack set apart from an earlier one (a retry) goes alone after its commit:
    of its members, those already ended are answered not found, as rows an earlier ack
    deleted are, and the others are ended (logic/ack_gathering._already_ended)."""
    ids, _ = insert(store, ["a", "a", "a"])
    assert end(store, QUEUE, ids[:1], ["a"]) == ids[:1]
    entry = ack_gathering.Entry("r", ids[:2], [1, 1], "")
    finished = ack_gathering._alone(tq.ctx, QUEUE, "a", entry)
    assert [r.id for r in finished] == ids[1:2]
    assert store.members_acked(ids, "a") == set(ids[:2])
    assert store.members_acked(ids, "b") == set()  # (another tenant's read finds none)
    assert ack_gathering._alone(tq.ctx, QUEUE, "a", entry) == []
