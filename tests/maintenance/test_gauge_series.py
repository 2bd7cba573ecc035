"""Gauges of the queues an admin did not configure: summed over the round and emitted once
at its end as ``~other`` (never under a name a tenant chose), with its zeros once when they
all empty; a configured queue keeps its own name; past 500 configured queues, the later
ones count as ``~other`` too."""

from __future__ import annotations

from typing import Any

from tests.maintenance.helpers import sweep_ended_batches
from tests.maintenance.test_gauges import Emitted, gauge, without_age
from tierq.logic.metric_queues import MAX_QUEUE_SERIES, OTHER
from tierq.maintenance import gauges
from tierq.maintenance.gauges import GaugeRound

EVERY = 60.0


def test_queues_nobody_configured_are_one_series(make_tq: Any) -> None:
    tq = make_tq()
    tq.put_queue("orders", {})
    tq.enqueue("orders", [{"payload": 1}])
    tq.enqueue("tenant-made-up-1", [{"payload": i, "tenant": "acme"} for i in range(2)])
    tq.enqueue("tenant-made-up-2", [{"payload": 1, "tenant": "globex"}])
    [task] = tq.claim("tenant-made-up-2", max=1, tenant="globex")
    tq.ctx.clock.advance(7)
    state, emitted = GaugeRound(), Emitted()
    summary = gauge(tq, state, emitted)
    got = emitted.take()
    assert sorted(got) == sorted(["orders", OTHER])
    assert without_age(got[OTHER]) == {"warm": 2, "waiting": 0, "held": 0, "cold": 0, "delayed": 0,
                                       "leased": 1, "dead": 0}
    assert 7 <= got[OTHER][gauges.OLDEST] < 60  # the oldest of theirs
    assert got["orders"]["warm"] == 1
    assert summary.gauged == 2
    # they all empty: ~other gets its zeros once, like a queue
    tq.ack("tenant-made-up-1", tq.claim("tenant-made-up-1", max=5, tenant="acme"))
    tq.ack("tenant-made-up-2", [task])
    sweep_ended_batches(tq)  # (the tick's reaper pass, before its gauges)
    tq.ctx.clock.advance(EVERY)
    gauge(tq, state, emitted)
    got = emitted.take()
    assert sorted(got) == sorted(["orders", OTHER])
    assert got[OTHER] == gauges.zeros() and got["orders"]["warm"] == 1
    tq.ctx.clock.advance(EVERY)
    gauge(tq, state, emitted)
    assert list(emitted.take()) == ["orders"]


def test_past_the_series_limit_configured_queues_count_as_other(make_tq: Any, pg: Any
                                                                ) -> None:
    tq = make_tq()
    # MAX_QUEUE_SERIES configured queues before these two (settings stored earlier)
    pg.execute("INSERT INTO tierq_queues (queue, created_at) SELECT 'early-' || i, "
               "now() - interval '1 day' + i * interval '1 ms' "
               "FROM generate_series(1, %s) AS i", (MAX_QUEUE_SERIES - 1,))
    tq.put_queue("last-with-a-series", {})
    tq.put_queue("one-too-many", {})
    for queue in ("last-with-a-series", "one-too-many"):
        tq.enqueue(queue, [{"payload": 1}])
    assert len(tq.ctx.metric_queues.configured(tq.ctx.store)) == MAX_QUEUE_SERIES
    emitted = Emitted()
    gauge(tq, GaugeRound(), emitted)
    assert sorted(emitted.take()) == sorted(["last-with-a-series", OTHER])
