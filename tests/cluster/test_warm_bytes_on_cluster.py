"""The byte bound of the warm tier on a cluster: the single-pair tests of
tests/integration/test_warm_bytes.py run here as they are, and tenants on every master share
one queue with a small warm_max_bytes while claims rotate across them."""

from __future__ import annotations

import random
from collections import defaultdict

from tests.integration.helpers import count_state, drain
from tests.integration.test_warm_bytes import (  # noqa: F401  (run here on the cluster)
    PAD,
    assert_exact,
    test_a_missing_or_drifted_counter_heals,
    test_a_small_warm_max_bytes_bounds_the_warm_set_and_fifo_holds_across_tiers,
    test_the_counter_stays_exact_on_every_path,
)
from tests.support.cluster import node_of, tenants_on_every_node

QUEUE = "bytes"
LIMIT = 3000


def test_tenants_on_every_master_keep_their_order_and_their_byte_bound(make_tq, valkey, pg):
    tq = make_tq(warm_max=1000, warm_max_bytes=LIMIT)
    tenants = tenants_on_every_node(valkey, QUEUE, per_node=1)
    assert len({node_of(valkey, QUEUE, t) for t in tenants}) == 3
    rng = random.Random(5)
    enqueued: dict[str, list[int]] = defaultdict(list)
    claimed: dict[str, list[int]] = defaultdict(list)

    def within_bound() -> None:
        for tenant in tenants:
            assert assert_exact(tq, valkey, QUEUE, tenant) <= LIMIT, tenant

    def take(tasks: list) -> None:
        for t in tasks:
            claimed[t.tenant].append(t.payload["n"])
        tq.ack(QUEUE, tasks)

    n = 0
    for _ in range(12):
        batch = []
        for _ in range(30):
            tenant = rng.choice(tenants)
            batch.append({"payload": {"n": n, "pad": PAD[: rng.randint(0, 300)]},
                          "tenant": tenant})
            enqueued[tenant].append(n)
            n += 1
        tq.enqueue(QUEUE, batch)
        within_bound()
        take(tq.claim(QUEUE, max=rng.randint(1, 20)))
        within_bound()
        if rng.random() < 0.4:
            tq.run_cold_to_warm()
            within_bound()
    assert count_state(pg, QUEUE, "cold") > 0
    take(drain(tq, QUEUE, batch=10))
    assert claimed == enqueued
    assert count_state(pg, QUEUE, "cold") == 0
