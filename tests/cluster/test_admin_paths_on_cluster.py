"""The warm tier's calls that are not scripts, on a cluster with tenants on every master:
pipelines (running leases, queue counts), a lookup by id (a task's lease, in its pair's
``lease_of``), multi-key deletes (a purge drops every pair's keys) and the lease scripts
that settle several tenants' tasks in one call (one script per pair)."""

from __future__ import annotations

from tests.integration.helpers import count_rows
from tests.support.cluster import keys_per_master, node_of, tenants_on_every_node
from tierq.dal.warm_tier import LAPSES_KEY

QUEUE = "admin"


def test_leases_counts_cancel_and_purge_across_masters(make_tq, valkey, pg, cluster):
    tq = make_tq(warm_max=4)
    tenants = tenants_on_every_node(valkey, QUEUE)
    tq.enqueue(QUEUE, [{"payload": [t, i], "tenant": t} for i in range(6) for t in tenants])
    leased = tq.claim(QUEUE, max=len(tenants) * 2, worker="w-1")  # rotates: 2 per tenant
    assert sorted(t.tenant for t in leased) == sorted(tenants * 2)

    running = tq.running(QUEUE)  # a pipeline per pair
    assert sorted(r.id for r in running) == sorted(t.id for t in leased)
    assert {r.worker for r in running} == {"w-1"}
    view = tq.get_queue(QUEUE)
    assert view.counts.leased == len(leased) and view.counts.cold == len(tenants) * 2

    first = leased[0]
    for node in valkey.get_primaries():  # (INFO and CONFIG: the admin user's)
        with cluster.admin_client(node.port) as admin:
            admin.config_resetstat()
    seen = tq.get_task(QUEUE, first.id)  # the lease found by its id, no set read whole
    assert seen.state == "leased" and seen.worker == "w-1"
    whole_reads = {"cmdstat_zscan", "cmdstat_zrange", "cmdstat_hgetall", "cmdstat_hscan",
                   "cmdstat_zrangebyscore", "cmdstat_hkeys", "cmdstat_hvals"}
    for node in valkey.get_primaries():
        with cluster.admin_client(node.port) as admin:
            stats = admin.info("commandstats")
        assert not whole_reads & set(stats), (node, sorted(stats))
        if f"{node.host}:{node.port}" == node_of(valkey, QUEUE, first.tenant):
            assert {"cmdstat_hget", "cmdstat_hmget", "cmdstat_evalsha"} & set(stats)
    assert tq.cancel_task(QUEUE, leased[1].id).id == leased[1].id

    # one call settling tasks of every tenant: one script per pair, on its own master
    beat = tq.heartbeat(QUEUE, [{"id": t.id, "lease_token": t.lease_token,
                                 "extend_seconds": 60} for t in leased[2:]])
    assert len(beat.extended) == len(leased) - 2
    acked = tq.ack(QUEUE, [first, *leased[2:]])
    assert sorted(acked.acked) == sorted(t.id for t in [first, *leased[2:]])

    assert all(n > 0 for n in keys_per_master(valkey).values())
    purged = tq.purge_queue(QUEUE)  # every pair's keys deleted on its master
    assert purged == len(tenants) * 6 - len(leased)
    assert count_rows(pg, QUEUE) == 0
    # all but each pair's meta, which keeps only the purge's fence (a late push is refused),
    # and the index of lapses every tenant shares (the cancel's tombstone noted a pair in
    # it; the reaper's sweep drops the entry of a pair with nothing left)
    left = [key for node in valkey.get_primaries()
            for key in node.redis_connection.scan_iter(count=1000)
            if not key.endswith((b":rate", b":rate_tenants")) and key != LAPSES_KEY.encode()]
    assert len(left) == len(tenants) and all(key.endswith(b":meta") for key in left)
    assert all(set(valkey.hgetall(key)) == {b"fence"} for key in left)
