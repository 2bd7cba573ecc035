"""The reaper's queue gauges follow work: only queues with tasks in a counted state are
gauged (with the same values as the queue's counts), a queue that emptied gets its zeros
once and then nothing, and a round cut by its budget goes on where it stopped. A queue is
gauged under its own name only once an admin configured it; the others are summed as
``~other`` (tests/maintenance/test_gauge_series.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.maintenance.helpers import TINY_BUDGET, seed_idle_pairs, sweep_ended_batches
from tierq.core.ordering import SEQ_MAX
from tierq.maintenance import gauges
from tierq.maintenance.gauges import GaugeRound

EVERY = 60.0


class Emitted:
    """What a pass emitted, queue by queue, in order."""

    def __init__(self) -> None:
        self.blobs: list[tuple[str, dict[str, float]]] = []

    def __call__(self, queue: str, values: Mapping[str, float]) -> None:
        self.blobs.append((queue, dict(values)))

    def take(self) -> dict[str, dict[str, float]]:
        out = dict(self.blobs)
        assert len(out) == len(self.blobs), f"a queue was emitted twice: {self.blobs}"
        self.blobs = []
        return out


def gauge(tq: Any, state: GaugeRound, emitted: Emitted, **kwargs: Any) -> gauges.GaugeSummary:
    return gauges.run(tq.ctx, state, emitted, now=tq.ctx.now(), **kwargs)


def counts_of(tq: Any, queue: str) -> dict[str, float]:
    return {k: float(v) for k, v in tq.get_queue(queue).counts.model_dump().items()}


def without_age(values: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in values.items() if k != gauges.OLDEST}


def busy_queue(tq: Any) -> None:
    """Queue 'busy' of two tenants: ready, leased, delayed, cold and dead tasks."""
    tq.put_queue("busy", {"warm_max": 4})
    tq.enqueue("busy", [{"payload": i, "tenant": "a"} for i in range(6)])  # 4 warm, 2 cold
    tq.enqueue("busy", [{"payload": i, "tenant": "b", "delay_seconds": 3600} for i in range(2)])
    tq.enqueue("busy", [{"payload": 9, "tenant": "b"}])
    [leased] = tq.claim("busy", max=1, tenant="a")
    [dying] = tq.claim("busy", max=1, tenant="b")
    tq.nack("busy", [{"id": dying.id, "lease_token": dying.lease_token, "dead": True}])
    assert leased.tenant == "a"


def test_held_tasks_are_gauged_with_the_other_states(make_tq):
    tq = make_tq()
    tq.put_queue("orders", {"warm_max": 100})  # configured: gauged under its own name
    tq.enqueue("orders", [{"payload": i, "group": g} for g in ("x", "y") for i in range(3)])
    emitted = Emitted()
    gauge(tq, GaugeRound(), emitted)
    got = emitted.take()
    assert without_age(got["orders"]) == counts_of(tq, "orders")
    assert (got["orders"]["held"], got["orders"]["warm"]) == (4.0, 2.0)


def test_only_queues_with_tasks_are_gauged_with_their_counts(make_tq, pg):
    tq = make_tq()
    seed_idle_pairs(pg, 300)
    busy_queue(tq)
    tq.enqueue("finished", [{"payload": 1}])  # acked with a result: done rows only
    [task] = tq.claim("finished", max=1)
    tq.ack("finished", [{"id": task.id, "lease_token": task.lease_token, "result": 1}])
    tq.enqueue("drained", [{"payload": 1}])  # acked: no row left
    tq.ack("drained", tq.claim("drained", max=1))
    sweep_ended_batches(tq)  # (the tick's reaper pass, before its gauges)
    tq.ctx.clock.advance(5)
    emitted = Emitted()
    summary = gauge(tq, GaugeRound(), emitted)
    got = emitted.take()
    assert list(got) == ["busy"]  # neither idle pairs nor the done-only or drained queue
    assert (summary.gauged, summary.zeroed, summary.pairs, summary.completed) == (1, 0, 2, True)
    expected = counts_of(tq, "busy")
    assert expected == {"warm": 3, "waiting": 0, "held": 0, "cold": 2, "delayed": 2, "leased": 1,
                        "dead": 1}
    assert without_age(got["busy"]) == expected
    assert 5 <= got["busy"][gauges.OLDEST] < 60  # ready since the enqueue, 5 s ago


def test_an_emptied_queue_gets_its_zeros_once_then_nothing(make_tq):
    tq = make_tq()
    for queue in ("stays", "empties"):
        tq.put_queue(queue, {})  # configured: gauged under its own name
        tq.enqueue(queue, [{"payload": 1}, {"payload": 2}])
    state, emitted = GaugeRound(), Emitted()
    assert state.due(tq.ctx.now(), EVERY)
    gauge(tq, state, emitted)
    assert sorted(emitted.take()) == ["empties", "stays"]
    assert not state.due(tq.ctx.now() + 1, EVERY)
    tq.ack("empties", tq.claim("empties", max=5))
    sweep_ended_batches(tq)  # (the tick's reaper pass, before its gauges)
    tq.ctx.clock.advance(EVERY)
    summary = gauge(tq, state, emitted)
    got = emitted.take()
    assert got["empties"] == gauges.zeros()  # every gauge, the oldest ready age too
    assert got["stays"]["warm"] == 2
    assert (summary.gauged, summary.zeroed) == (1, 1)
    # the next rounds: the emptied queue is idle like any other
    for _ in range(2):
        tq.ctx.clock.advance(EVERY)
        summary = gauge(tq, state, emitted)
        assert list(emitted.take()) == ["stays"] and summary.zeroed == 0
    # a queue that has tasks again is gauged again
    tq.enqueue("empties", [{"payload": 3}])
    gauge(tq, state, emitted)
    assert emitted.take()["empties"]["warm"] == 1
    # dead letters count as work until they are purged: then zeros once
    tq.ack("stays", tq.claim("stays", max=5))
    [task] = tq.claim("empties", max=1)
    tq.nack("empties", [{"id": task.id, "lease_token": task.lease_token, "dead": True}])
    sweep_ended_batches(tq)
    gauge(tq, state, emitted)
    got = emitted.take()
    assert got["stays"] == gauges.zeros() and got["empties"]["dead"] == 1
    tq.dlq_purge("empties", all_dead=True)
    gauge(tq, state, emitted)
    assert emitted.take() == {"empties": gauges.zeros()}
    gauge(tq, state, emitted)
    assert emitted.take() == {}


def test_a_round_cut_by_its_budget_goes_on_and_sums_a_queue_across_slices(make_tq):
    tq = make_tq()
    tq.put_queue("wide", {})
    tq.put_queue("zz", {})
    for tenant in ("t1", "t2", "t3"):
        tq.enqueue("wide", [{"payload": 1, "tenant": tenant}])
    tq.enqueue("wide", [{"payload": 2, "tenant": "t2"}])
    tq.enqueue("zz", [{"payload": 1}])
    state, emitted = GaugeRound(), Emitted()
    passes = []
    while True:
        summary = gauge(tq, state, emitted, budget_seconds=TINY_BUDGET, slice_size=1)
        passes.append((summary.pairs, summary.gauged, summary.completed))
        if summary.completed:
            break
        assert state.due(tq.ctx.now(), EVERY)  # a round under way goes on at every pass
    # one pair per pass; 'wide' is emitted once the walk is past its last tenant
    assert passes == [(1, 0, False), (1, 0, False), (1, 0, False), (1, 1, False),
                      (0, 1, True)]
    got = emitted.take()
    assert list(got) == ["wide", "zz"]
    assert got["wide"]["warm"] == 4 and got["zz"]["warm"] == 1
    assert not state.due(tq.ctx.now(), EVERY)


def test_a_pass_leaves_a_round_under_way_in_another_thread_alone(make_tq):
    tq = make_tq()
    tq.put_queue("q", {})
    tq.enqueue("q", [{"payload": 1}])
    state, emitted = GaugeRound(), Emitted()
    with state.busy:  # another invocation of this process is counting
        summary = gauge(tq, state, emitted)
    assert (summary.slices, summary.gauged) == (0, 0) and emitted.take() == {}
    assert gauge(tq, state, emitted).completed and list(emitted.take()) == ["q"]


def test_each_round_reports_once_how_much_of_the_task_sequence_is_used(make_tq, task_seq, pg):
    """TaskSeqUsedPercent (the alarm on the one limit of places in line): the sequence's
    last value against its maximum, sent once at the start of each round, not by the passes
    that go on with it."""
    tq = make_tq()
    task_seq(SEQ_MAX // 10 * 6 + 1)  # 60 %, as if after ~3,400 years of 100,000 a second
    for tenant in ("t1", "t2"):
        tq.enqueue("q", [{"payload": 1, "tenant": tenant}])
    [(last, top)] = pg.execute("SELECT last_value, max_value FROM pg_sequences"
                               " WHERE sequencename = 'tierq_task_seq'").fetchall()
    assert top == SEQ_MAX
    state, emitted, used = GaugeRound(), Emitted(), []
    while not gauge(tq, state, emitted, budget_seconds=TINY_BUDGET, slice_size=1,
                    emit_seq_used=used.append).completed:
        pass
    assert used == [100 * last / SEQ_MAX] and 60 < used[0] < 60.001
    tq.ctx.clock.advance(EVERY)
    gauge(tq, state, emitted, emit_seq_used=used.append)  # the next round
    assert len(used) == 2
