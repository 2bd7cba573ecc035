"""No double dispatch on a cluster: claimer processes rotate across tenants whose keys lie
on every master, while a small warm set makes them refill from the cold tier as they go;
no task is handed to two workers within a lease and each is acked exactly once."""

from __future__ import annotations

from tests.integration.helpers import assert_each_delivered_once, count_rows
from tests.support.claimers import run_claimers
from tests.support.cluster import node_of, tenants_on_every_node

QUEUE = "race"
PER_TENANT = 1000
PROCESSES = 4
WARM_MAX = 300  # most of each tenant's work starts cold


def test_claimer_processes_across_tenants_on_every_master(make_tq, valkey, database_url,
                                                          valkey_url, pg):
    tq = make_tq(warm_max=WARM_MAX)
    tenants = tenants_on_every_node(valkey, QUEUE, per_node=2)
    assert len({node_of(valkey, QUEUE, t) for t in tenants}) == 3
    ids: list[str] = []
    for start in range(0, PER_TENANT, 50):  # each batch spans every tenant, so every master
        out = tq.enqueue(QUEUE, [{"payload": [t, i], "tenant": t}
                                 for t in tenants for i in range(start, start + 50)])
        ids.extend(str(o.id) for o in out)
    cold = pg.execute("SELECT count(*) FROM tierq_tasks WHERE state = 'cold'").fetchone()[0]
    assert cold == len(tenants) * (PER_TENANT - WARM_MAX)
    deliveries, acked = run_claimers(database_url, valkey_url, QUEUE, PROCESSES,
                                     {"valkey_cluster": True, "warm_max": WARM_MAX})
    assert_each_delivered_once(deliveries, acked, ids)
    assert count_rows(pg) == 0
