"""FIFO across tiers and a bounded warm set, on a cluster: the single-pair tests of
tests/integration run here as they are, and tenants on every master share one queue with a
small warm set while claims rotate across them."""

from __future__ import annotations

import random
from collections import defaultdict

from tests.integration.helpers import count_state, drain, ready_size
from tests.integration.test_tiers_and_order import (  # noqa: F401  (run here on the cluster)
    test_a_claim_below_the_low_water_mark_refills_one_batch_before_the_set_runs_dry,
    test_a_claim_that_finds_the_set_dry_refills_and_takes_the_rest_of_its_batch,
    test_burst_above_warm_max_keeps_order_within_each_priority,
    test_claim_refills_inline_when_warm_is_empty_but_cold_work_waits,
    test_concurrent_enqueuers_never_overfill_the_warm_set,
    test_queue_goes_cold_at_100_percent_and_stays_cold_until_80_percent_and_drained,
)
from tests.support.cluster import node_of, tenants_on_every_node

QUEUE = "fifo"
WARM_MAX = 25
TASKS = 3000


def test_tenants_on_every_master_keep_their_order_and_their_bound(make_tq, valkey, pg):
    """Mixed batches over tenants on every master and three priorities: each pair's warm set
    stays within warm_max after every step, and within each (tenant, priority) claims follow
    enqueue order across both tiers."""
    tq = make_tq(warm_max=WARM_MAX)
    tenants = tenants_on_every_node(valkey, QUEUE, per_node=1)
    assert len({node_of(valkey, QUEUE, t) for t in tenants}) == 3
    rng = random.Random(11)
    enqueued: dict[tuple[str, int], list[int]] = defaultdict(list)
    claimed: dict[tuple[str, int], list[int]] = defaultdict(list)

    def within_bound() -> None:
        for tenant in tenants:
            assert ready_size(valkey, QUEUE, tenant) <= WARM_MAX, tenant

    def take(tasks: list) -> None:
        for t in tasks:
            claimed[(t.tenant, t.priority)].append(t.payload)
        tq.ack(QUEUE, tasks)

    n = 0
    while n < TASKS:
        batch = []
        for _ in range(90):
            tenant, priority = rng.choice(tenants), rng.choice([0, 4, 9])
            batch.append({"payload": n, "tenant": tenant, "priority": priority})
            enqueued[(tenant, priority)].append(n)
            n += 1
        tq.enqueue(QUEUE, batch)
        within_bound()
        take(tq.claim(QUEUE, max=rng.randint(1, 60)))  # rotates across the tenants
        within_bound()
        if rng.random() < 0.3:
            tq.run_cold_to_warm()
            within_bound()
    assert count_state(pg, QUEUE, "cold") > 0  # the cold tier was in play
    take(drain(tq, QUEUE, batch=40))
    assert claimed == enqueued
    assert count_state(pg, QUEUE, "cold") == 0


def test_ready_counts_of_tenants_on_every_master_in_one_call(make_tq, valkey):
    """(What the dispatcher's last look before it ends asks: one pipeline, not a round trip
    per tenant.)"""
    tq = make_tq(warm_max=WARM_MAX)
    tenants = tenants_on_every_node(valkey, "counted", per_node=2)
    for n, tenant in enumerate(tenants):
        tq.enqueue("counted", [{"payload": i, "tenant": tenant} for i in range(n)])
    assert tq.ctx.warm.ready_counts("counted", tenants) == list(range(len(tenants)))
    assert tq.ctx.warm.ready_counts("counted", ["nobody"]) == [0]
    assert tq.ctx.warm.ready_counts("counted", []) == []
