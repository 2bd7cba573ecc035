"""An ack of several tenants' tasks, whose leases are dropped in one pipeline
(``WarmTier.release_pairs``): run on a single server (tests/integration/test_ack_round_trips.py)
and on a cluster with tenants on every master (tests/cluster/test_request_cost_on_cluster.py)."""

from __future__ import annotations

import time
from typing import Any

from tests.integration.task_wait_scenarios import Waiter, channel, subscribers
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.logic import limits
from tierq.logic.context import to_ms

QUEUE = "pairs"


def waiting(valkey: Any, tq: Tierq, task: Any) -> Waiter:
    """A wait for ``task``'s end, once it is subscribed to the task's channel."""
    waiter = Waiter(tq, QUEUE, task.id, 10, tenant=task.tenant)
    deadline = time.monotonic() + 10
    while subscribers(valkey, channel(QUEUE, task.id, task.tenant)) < 1:
        assert waiter.thread.is_alive() or waiter.error is None, waiter.error
        assert time.monotonic() < deadline, "the waiter never subscribed"
        time.sleep(0.005)
    return waiter


def an_ack_of_tenants_drops_every_lease(tq: Tierq, valkey: Any, tenants: list[str], *,
                                        scripts_lost: bool = False) -> None:
    """Each tenant has a group of two (one leased at a time) and a task of its own, claimed
    under max_leased: one ack of every tenant's two drops every lease, counts each pair's
    acks, gives back every reservation, wakes a waiter of each tenant and makes each group's
    next task claimable. ``scripts_lost``: Valkey forgot its scripts just before the ack."""
    tq.put_queue(QUEUE, {"max_leased": 1000, "group_max_leased": 1})
    for tenant in tenants:
        tq.enqueue(QUEUE, [{"payload": [tenant, "g", i], "group": "g", "tenant": tenant}
                           for i in range(2)])
        tq.enqueue(QUEUE, [{"payload": [tenant, "own"], "tenant": tenant}])
    got = tq.claim(QUEUE, max=10 * len(tenants))
    assert len(got) == 2 * len(tenants) and {t.tenant for t in got} == set(tenants)
    now_ms = to_ms(tq.ctx.now())
    assert tq.ctx.warm.capacity_use(QUEUE, limits.LEASES_POOL, now_ms=now_ms)[0] == len(got)
    waiters = {tenant: waiting(valkey, tq, next(t for t in got if t.tenant == tenant))
               for tenant in tenants}
    if scripts_lost:
        valkey.script_flush()
    result = tq.ack(QUEUE, got)
    assert sorted(map(str, result.acked)) == sorted(str(t.id) for t in got)
    assert not result.rejected
    for tenant in tenants:
        assert valkey.zcard(PairKeys.of(QUEUE, tenant).leased) == 0, tenant
        assert tq.throughput(QUEUE, tenant=tenant).acked_total == 2, tenant
        assert waiters[tenant].result().state == "done", tenant
    assert tq.ctx.warm.capacity_use(QUEUE, limits.LEASES_POOL, now_ms=now_ms)[0] == 0
    following = tq.claim(QUEUE, max=10 * len(tenants))  # each group's second task
    assert sorted(t.payload[0] for t in following) == sorted(tenants)
    assert {t.payload[2] for t in following} == {1}
    tq.ack(QUEUE, following)
    assert tq.ctx.warm.capacity_use(QUEUE, limits.LEASES_POOL, now_ms=now_ms)[0] == 0
