"""Invariant 1: an acknowledged enqueue is in Postgres; losing Valkey entirely loses no task —
the reaper's reconciler re-dispatches every unfinished task."""

from __future__ import annotations

from tests.integration.helpers import count_rows, drain
from tests.support.stores import flush_valkey


def test_flushall_mid_run_then_reaper_delivers_every_unacked_task(make_tq, valkey_url,
                                                                  valkey_private, pg):
    tq = make_tq(warm_max=100, reconcile_grace_seconds=30)
    created = tq.enqueue("v", [{"payload": i} for i in range(300)])  # 100 warm, 200 cold
    assert sum(o.state == "warm" for o in created) == 100
    acked: set[int] = set()
    for _ in range(3):
        got = tq.claim("v", max=20)
        tq.ack("v", [{"id": t.id, "lease_token": t.lease_token} for t in got])
        acked.update(t.payload for t in got)
    in_flight = tq.claim("v", max=15)  # leased, never acked: their worker lost its lease too
    tq.enqueue_one("v", "delayed", delay_seconds=20)

    flush_valkey(valkey_url, valkey_private)  # the whole warm tier is gone

    late = tq.ack("v", [{"id": t.id, "lease_token": t.lease_token} for t in in_flight])
    assert not late.acked  # leases died with Valkey: the tasks will be delivered again
    tq.ctx.clock.advance(31)  # past the reconcile grace period
    summary = tq.run_reaper()
    assert summary.restored == 40  # 25 still waiting + 15 leased (60 of 100 warm were acked)
    tq.run_delayed_mover()
    rest = drain(tq, "v")
    delivered = acked | {t.payload for t in rest}
    assert delivered == set(range(300)) | {"delayed"}
    assert {t.payload for t in in_flight} <= {t.payload for t in rest}
    assert count_rows(pg) == 0


def test_a_lost_meta_reads_as_cold_and_returns_to_warm(make_tq, valkey_url, valkey_private):
    tq = make_tq(warm_max=10)
    tq.enqueue("m", [{"payload": i} for i in range(5)])
    flush_valkey(valkey_url, valkey_private)
    # Valkey lost everything: new work goes cold (cold rows may exist), nothing jumps the line
    assert tq.enqueue_one("m", 5).state == "cold"
    tq.ctx.clock.advance(120)
    tq.run_reaper()  # re-pushes the 5 lost warm rows in their original places
    assert [t.payload for t in drain(tq, "m", batch=1)] == [0, 1, 2, 3, 4, 5]
    tq.run_cold_to_warm()
    assert tq.enqueue_one("m", 6).state == "warm"


def test_reconciler_waits_for_the_grace_period(make_tq, valkey_url, valkey_private):
    tq = make_tq(reconcile_grace_seconds=60)
    tq.enqueue("g", [{"payload": i} for i in range(3)])
    flush_valkey(valkey_url, valkey_private)
    tq.ctx.clock.advance(30)
    assert tq.run_reaper().restored == 0  # maybe just being pushed: leave it alone
    tq.ctx.clock.advance(31)
    assert tq.run_reaper().restored == 3
    assert tq.run_reaper().restored == 0  # idempotent
    assert len(drain(tq, "g")) == 3


def test_reconciler_never_resurrects_an_acked_task(make_tq, pg):
    tq = make_tq(reconcile_grace_seconds=0)
    tq.enqueue("a", [{"payload": i} for i in range(50)])
    tq.ctx.clock.advance(1)
    for _ in range(5):
        got = tq.claim("a", max=10)
        tq.run_reaper()  # leased rows are known to Valkey: not restored
        tq.ack("a", [{"id": t.id, "lease_token": t.lease_token} for t in got])
        tq.run_reaper()
    assert tq.claim("a", max=10) == []
    assert count_rows(pg) == 0


def test_a_lease_left_by_an_older_tierq_is_dropped_and_its_task_dispatched_again(
        make_tq, valkey, pg):
    """Leases used to be bare ids in the leased set; one left by an older version expires
    like any other, and its task comes back through the reconciler (nothing spins on it)."""
    from tierq.dal.warm_tier import PairKeys

    tq = make_tq(lease_seconds=5, reconcile_grace_seconds=0.0)
    created = tq.enqueue_one("old", "x")
    [task] = tq.claim("old", max=1)
    keys = PairKeys.of("old", "_")
    valkey.delete(keys.leased)
    valkey.zadd(keys.leased, {str(task.id): 0})  # as an older tierq wrote it, long expired
    tq.run_reaper()
    assert valkey.zcard(keys.leased) == 0
    tq.run_reaper()  # the reconciler finds the warm row that Valkey no longer holds
    [again] = tq.claim("old", max=1)
    assert again.id == created.id
    assert tq.ack("old", [again]).acked == [again.id]
