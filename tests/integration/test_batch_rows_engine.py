"""Batch rows through the engine (``TIERQ_BATCH_ROWS``, logic/batch_rows.py), on the real
PostgreSQL and Valkey: which enqueued batches become one batch row, a plain ack ends its
members, and every other transition moves a member out into ``tierq_tasks`` first, so
each gives the outcome it gives a task with a row of its own."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.stores import TierqFactory
from tierq.core.batch_ids import batch_member, batch_of
from tierq.engine import Tierq
from tierq.maintenance import reaper

QUEUE = "q"


@pytest.fixture
def tq(make_tq: TierqFactory) -> Tierq:
    return make_tq(batch_rows=True)


def stored(pg: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """(Batch rows, their tasks, rows of tierq_tasks)."""
    [(batches, members, rows)] = pg.execute(
        "SELECT (SELECT count(*) FROM tierq_batches),"
        " (SELECT coalesce(sum(tasks), 0) FROM tierq_batches),"
        " (SELECT count(*) FROM tierq_tasks)").fetchall()
    return batches, members, rows


def test_a_plain_batch_is_one_batch_row_and_its_acks_end_it(tq: Tierq,
                                                            pg: psycopg.Connection[Any]) -> None:
    enqueued = tq.enqueue(QUEUE, [{"payload": {"n": n}, "priority": n % 3} for n in range(6)])
    ids = [str(t.id) for t in enqueued]
    assert all(batch_member(i) for i in ids)
    assert {batch_of(i)[0] for i in ids} == {ids[0]}  # type: ignore[index]
    assert stored(pg) == (1, 6, 0)
    claimed = tq.claim(QUEUE, max=6)
    assert sorted(str(t.id) for t in claimed) == sorted(ids)
    assert {(str(t.id), t.payload["n"]) for t in claimed} == {(ids[n], n) for n in range(6)}
    acked = tq.ack(QUEUE, claimed[:4])
    assert sorted(map(str, acked.acked)) == sorted(str(t.id) for t in claimed[:4])
    assert reaper.run(tq.ctx).batches_swept == 0
    tq.ack(QUEUE, claimed[4:])
    summary = reaper.run(tq.ctx)
    assert (summary.batches_swept, summary.batch_tasks_swept) == (1, 6)
    assert stored(pg) == (0, 0, 0)


@pytest.mark.parametrize("task", [
    {"payload": 1, "group": "g"},
    {"payload": 1, "delay_seconds": 30},
    {"payload": 1, "max_attempts": 2},
])
def test_a_batch_with_a_task_of_its_own_kind_keeps_a_row_per_task(
        tq: Tierq, pg: psycopg.Connection[Any], task: dict[str, Any]) -> None:
    tq.enqueue(QUEUE, [{"payload": 0}, task])
    assert stored(pg) == (0, 0, 2)


def test_an_enqueue_of_fewer_keyless_tasks_than_the_floor_writes_rows(
        make_tq: TierqFactory, pg: psycopg.Connection[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``TIERQ_BATCH_ROWS_MIN``, 16 by default (the tests' environment sets 1): fewer
    keyless tasks, keyed ones beside them not counted, are a row each; that many are one
    batch row."""
    monkeypatch.delenv("TIERQ_BATCH_ROWS_MIN")
    tq = make_tq(batch_rows=True)
    assert tq.settings.batch_rows_min == 16
    few = tq.enqueue(QUEUE, [{"payload": n} for n in range(15)]
                     + [{"payload": "k", "key": "k1"}])
    assert not any(batch_member(str(t.id)) for t in few)
    assert stored(pg) == (0, 0, 16)
    enough = tq.enqueue(QUEUE, [{"payload": n} for n in range(16)])
    assert all(batch_member(str(t.id)) for t in enough)
    assert stored(pg) == (1, 16, 16)


def test_without_the_setting_every_task_has_its_row(make_tq: TierqFactory,
                                                    pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(batch_rows=False)
    enqueued = tq.enqueue(QUEUE, [{"payload": n} for n in range(3)])
    assert not any(batch_member(str(t.id)) for t in enqueued)
    assert stored(pg) == (0, 0, 3)


def test_a_schema_before_the_acks_function_gets_a_row_per_task_until_it_has_it(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """Code deployed before migration 0033: the setting on, the enqueue writes rows (a
    member is written only where its ack's function is), and batch rows once the function
    is found at the next look."""
    pg.execute("ALTER FUNCTION tierq_end_batch_members_v3 RENAME TO tierq_gone")
    try:
        before = tq.enqueue(QUEUE, [{"payload": n} for n in range(3)])
        assert not any(batch_member(str(t.id)) for t in before)
        assert stored(pg) == (0, 0, 3)
    finally:
        pg.execute("ALTER FUNCTION tierq_gone RENAME TO tierq_end_batch_members_v3")
    tq.enqueue(QUEUE, [{"payload": 3}])  # (looked for again only after a while)
    assert stored(pg) == (0, 0, 4)
    tq.ctx.store._batch_rows_due = 0.0  # (that while past)
    after = tq.enqueue(QUEUE, [{"payload": n} for n in range(2)])
    assert all(batch_member(str(t.id)) for t in after)
    assert stored(pg) == (1, 2, 4)
    acked = tq.ack(QUEUE, tq.claim(QUEUE, max=10))
    assert len(acked.acked) == 6


def one_member(tq: Tierq, n: int = 2) -> list[str]:
    """A batch row of ``n`` tasks (payloads 0, 1, …); their ids."""
    ids = [str(t.id) for t in tq.enqueue(QUEUE, [{"payload": i} for i in range(n)])]
    assert all(batch_member(i) for i in ids)
    return ids


def row(pg: psycopg.Connection[Any], task_id: str) -> tuple[Any, ...] | None:
    return pg.execute("SELECT state, attempts, last_error, result, progress, payload"
                      " FROM tierq_tasks WHERE id = %s", (task_id,)).fetchone()


def claimed(tq: Tierq, ids: list[str]) -> dict[str, Any]:
    tasks = {str(t.id): t for t in tq.claim(QUEUE, max=len(ids))}
    assert set(tasks) == set(ids)
    return tasks


def test_a_nack_moves_the_member_out_and_its_retry_acks_its_row(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    ids = one_member(tq)
    tasks = claimed(tq, ids)
    out = tq.nack(QUEUE, [{"id": ids[0], "lease_token": tasks[ids[0]].lease_token,
                           "error": "boom", "retry_in_seconds": 0}])
    assert [str(i) for i in out.retried] == [ids[0]]
    assert row(pg, ids[0]) == ("warm", 1, "boom", None, None, 0)  # (due now: back in line)
    tq.ack(QUEUE, [tasks[ids[1]]])
    [again] = tq.claim(QUEUE, max=1)
    assert (str(again.id), again.attempt, again.payload) == (ids[0], 2, 0)
    assert [str(i) for i in tq.ack(QUEUE, [again]).acked] == [ids[0]]
    assert row(pg, ids[0]) is None
    assert reaper.run(tq.ctx).batches_swept == 1
    assert stored(pg) == (0, 0, 0)


def test_the_last_attempts_nack_makes_a_dead_letter(tq: Tierq,
                                                    pg: psycopg.Connection[Any]) -> None:
    tq.put_queue(QUEUE, {"max_attempts": 1})
    ids = one_member(tq, 1)
    [task] = tq.claim(QUEUE, max=1)
    out = tq.nack(QUEUE, [{"id": task.id, "lease_token": task.lease_token, "error": "x"}])
    assert [str(i) for i in out.dead] == ids
    assert row(pg, ids[0]) == ("dead", 1, "x", None, None, 0)
    assert [str(d.id) for d in tq.dlq_list(QUEUE)] == ids


def test_an_expired_lease_of_a_member_is_reaped_from_its_row(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    ids = one_member(tq, 1)
    tq.claim(QUEUE, max=1, lease_seconds=1)
    tq.ctx.clock.advance(5)
    assert reaper.run(tq.ctx).expired == 1
    state, attempts, *_ = row(pg, ids[0])  # type: ignore[misc]
    assert (state, attempts) == ("warm", 1)  # (no backoff: back in line at once)


def test_a_release_puts_the_member_back_in_line_from_its_row(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    ids = one_member(tq)
    tasks = claimed(tq, ids)
    tq.release(QUEUE, [tasks[ids[1]]])
    assert row(pg, ids[1]) == ("warm", 0, None, None, None, 1)
    [again] = tq.claim(QUEUE, max=1)
    assert str(again.id) == ids[1]
    tq.ack(QUEUE, [again, tasks[ids[0]]])
    assert row(pg, ids[1]) is None
    assert reaper.run(tq.ctx).batches_swept == 1


def test_an_ack_with_a_result_keeps_the_member_done_with_its_progress(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    ids = one_member(tq)
    tasks = claimed(tq, ids)
    tq.heartbeat(QUEUE, [{"id": ids[0], "lease_token": tasks[ids[0]].lease_token,
                          "progress": {"step": 1}}])
    out = tq.ack(QUEUE, [{"id": ids[0], "lease_token": tasks[ids[0]].lease_token,
                          "result": {"ok": True}}])
    assert [str(i) for i in out.acked] == [ids[0]]
    assert row(pg, ids[0]) == ("done", 1, None, {"ok": True}, {"step": 1}, 0)
    view = tq.get_task(QUEUE, ids[0])
    assert (view.state, view.result) == ("done", {"ok": True})


def test_a_member_reads_as_a_task_until_its_ack(tq: Tierq) -> None:
    ids = one_member(tq)
    view = tq.get_task(QUEUE, ids[1])
    assert (view.state, view.payload, view.attempts) == ("warm", 1, 0)
    tasks = claimed(tq, ids)
    assert tq.get_task(QUEUE, ids[1]).state == "leased"
    tq.ack(QUEUE, [tasks[ids[1]]])
    with pytest.raises(Exception, match="no task"):
        tq.get_task(QUEUE, ids[1])


def test_a_cancel_or_a_delete_of_a_member_acts_on_its_row(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    ids = one_member(tq, 3)
    assert tq.cancel(QUEUE, ids[0]).state == "cancelled"
    assert row(pg, ids[0])[0] == "cancelled"  # type: ignore[index]
    tq.cancel_task(QUEUE, ids[1])
    assert row(pg, ids[1]) is None
    [left] = tq.claim(QUEUE, max=3)
    assert str(left.id) == ids[2]
    tq.ack(QUEUE, [left])
    assert reaper.run(tq.ctx).batches_swept == 1


def test_a_child_waits_on_a_member_through_its_row(tq: Tierq,
                                                   pg: psycopg.Connection[Any]) -> None:
    [parent] = one_member(tq, 1)
    [child] = tq.enqueue(QUEUE, [{"payload": "child", "after": [parent]}])
    assert row(pg, parent)[0] == "warm"  # type: ignore[index]
    assert child.state == "waiting"
    [task] = tq.claim(QUEUE, max=1)
    assert str(task.id) == parent
    tq.ack(QUEUE, [task])
    [next_task] = tq.claim(QUEUE, max=1)
    assert next_task.id == child.id


def test_a_purge_counts_and_deletes_the_members(tq: Tierq,
                                                pg: psycopg.Connection[Any]) -> None:
    ids = one_member(tq, 4)
    tasks = claimed(tq, ids)
    tq.ack(QUEUE, [tasks[ids[0]]])
    tq.release(QUEUE, [tasks[ids[1]]])
    assert tq.purge_queue(QUEUE) == 3
    assert stored(pg) == (0, 0, 0)
    assert pg.execute("SELECT (SELECT count(*) FROM tierq_batch_ends),"
                      " (SELECT count(*) FROM tierq_batch_pairs)").fetchone() == (0, 0)


def test_a_replayed_claim_rebuilds_members_from_their_row(tq: Tierq) -> None:
    ids = one_member(tq)
    first = tq.claim(QUEUE, max=2, idempotency_key="k1")
    again = tq.claim(QUEUE, max=2, idempotency_key="k1")
    assert sorted((str(t.id), t.payload, t.lease_token) for t in again) == sorted(
        (str(t.id), t.payload, t.lease_token) for t in first)
    assert sorted(str(t.id) for t in again) == sorted(ids)


def test_a_keyed_batch_keeps_its_order_with_its_keyless_tasks_in_a_batch_row(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """The keyless tasks are one batch row, the keyed ones rows, their seqs in batch order
    either way: claims take them in the order they were enqueued. A key that meets a live
    task's is answered as without batch rows."""
    [live] = tq.enqueue(QUEUE, [{"payload": "first", "key": "k1"}])
    out = tq.enqueue(QUEUE, [{"payload": n, "key": None if n % 3 else f"k{n}"}
                             for n in range(9)] + [{"payload": "again", "key": "k1"}])
    assert [o.outcome for o in out] == ["created"] * 9 + ["ignored"]
    assert out[9].id == live.id
    ids = [str(o.id) for o in out[:9]]
    assert [batch_member(i) for i in ids] == [n % 3 != 0 for n in range(9)]
    assert stored(pg) == (1, 6, 4)  # (the batch row's 6, the 3 keyed rows and k1's first)
    tasks = tq.claim(QUEUE, max=20)
    assert [t.payload for t in tasks] == ["first", *range(9)]
    views = [tq.get_task(QUEUE, i) for i in ids]
    assert [v.payload for v in views] == list(range(9))
    assert [str(v.id) for v in views] == ids
    seqs = [pg.execute("SELECT seq FROM tierq_tasks WHERE id = %s", (i,)).fetchone()
            for i in ids[::3]]
    assert seqs == sorted(seqs)
    tq.ack(QUEUE, tasks)
    assert stored(pg)[2] == 0
    assert reaper.run(tq.ctx).batches_swept == 1


def test_the_oldest_ready_age_counts_members_of_their_own_tenant_only(tq: Tierq) -> None:
    """A head of a pair's line still in a batch row is ready since its batch was made; a
    batch holding two tenants' tasks gives that age to each tenant's own heads only."""
    [a, b] = tq.enqueue(QUEUE, [{"payload": 0, "tenant": "a"}, {"payload": 1, "tenant": "b"}])
    assert batch_member(str(a.id)) and batch_member(str(b.id))
    tq.ctx.clock.advance(30)
    rows = {r.tenant: r for r in tq.detailed_counts()}
    assert rows["a"].oldest_ready_at is not None and rows["b"].oldest_ready_at is not None
    assert rows["a"].oldest_ready_age_seconds >= 29  # type: ignore[operator]
    [claimed] = tq.claim(QUEUE, max=1, tenant="a")
    tq.ack(QUEUE, [claimed])
    rows = {r.tenant: r for r in tq.detailed_counts()}
    assert rows["a"].oldest_ready_at is None and rows["b"].oldest_ready_at is not None
