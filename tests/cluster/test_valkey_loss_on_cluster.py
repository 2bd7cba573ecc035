"""No loss on cache loss, on a cluster: FLUSHALL on every master (the whole cache gone) or
on one master (one shard replaced), then the reaper's reconciler dispatches every unfinished
task again, wherever its (queue, tenant) lives."""

from __future__ import annotations

from collections import Counter

from tests.integration.helpers import count_rows, drain
from tests.integration.test_valkey_loss import (  # noqa: F401  (run here on the cluster)
    test_a_lost_meta_reads_as_cold_and_returns_to_warm,
    test_flushall_mid_run_then_reaper_delivers_every_unacked_task,
    test_reconciler_waits_for_the_grace_period,
)
from tests.support.cluster import keys_per_master, node_of, tenants_on_every_node
from tests.support.stores import flush_valkey

QUEUE = "lost"
PER_TENANT = 50  # 20 warm, 30 cold with warm_max=20


def _enqueue_mixed(tq, tenants: list[str]) -> None:
    """One batch per round holding every tenant's tasks: one call touching every master."""
    for start in range(0, PER_TENANT, 25):
        tq.enqueue(QUEUE, [{"payload": [t, i], "tenant": t}
                           for i in range(start, start + 25) for t in tenants])


def test_every_master_flushed_every_tenant_gets_every_task(make_tq, valkey, valkey_url,
                                                           valkey_private, pg):
    tq = make_tq(warm_max=20, reconcile_grace_seconds=30)
    tenants = tenants_on_every_node(valkey, QUEUE, per_node=2)
    assert len({node_of(valkey, QUEUE, t) for t in tenants}) == 3
    _enqueue_mixed(tq, tenants)
    acked: list[tuple[str, int]] = []
    for _ in range(3):  # claims rotate across the tenants, so across the masters
        got = tq.claim(QUEUE, max=10)
        tq.ack(QUEUE, got)
        acked.extend(tuple(t.payload) for t in got)
    assert len({t for t, _ in acked}) > 1
    in_flight = tq.claim(QUEUE, max=12)  # leased, never acked: lost with the cache
    assert all(n > 0 for n in keys_per_master(valkey).values())

    flush_valkey(valkey_url, valkey_private)  # FLUSHALL on each master
    assert set(keys_per_master(valkey).values()) == {0}

    assert not tq.ack(QUEUE, in_flight).acked  # their leases died with the cache
    tq.ctx.clock.advance(31)  # past the reconcile grace period
    summary = tq.run_reaper()
    # every warm task not acked comes back: 20 per tenant, less the acked ones
    assert summary.restored == 20 * len(tenants) - len(acked)
    rest = drain(tq, QUEUE)
    delivered = Counter(acked) + Counter(tuple(t.payload) for t in rest)
    assert delivered == Counter((t, i) for t in tenants for i in range(PER_TENANT))
    assert {tuple(t.payload) for t in in_flight} <= {tuple(t.payload) for t in rest}
    for tenant in tenants:  # and in each tenant's order
        order = [t.payload[1] for t in rest if t.payload[0] == tenant]
        assert order == sorted(order)
    assert count_rows(pg) == 0


def test_one_master_flushed_only_its_tenants_are_reconciled(make_tq, valkey, pg, cluster):
    """One shard replaced empty: the tenants whose keys live there get their tasks back from
    PostgreSQL; the others keep their warm sets untouched."""
    tq = make_tq(warm_max=20, reconcile_grace_seconds=30)
    tenants = tenants_on_every_node(valkey, QUEUE, per_node=1)
    _enqueue_mixed(tq, tenants)
    lost_tenant = tenants[0]
    port = node_of(valkey, QUEUE, lost_tenant).split(":")[1]
    shard = cluster.admin_client(int(port))  # (FLUSHALL: the admin user's)
    try:
        shard.flushall()
    finally:
        shard.close()
    tq.ctx.clock.advance(31)
    assert tq.run_reaper().restored == 20  # the lost tenant's warm tasks only
    for tenant in tenants:
        order = [t.payload[1] for t in drain(tq, QUEUE, tenant=tenant, batch=7)]
        assert order == list(range(PER_TENANT)), tenant
    assert count_rows(pg) == 0
