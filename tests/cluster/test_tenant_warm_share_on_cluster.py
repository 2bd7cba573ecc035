"""A tenant's share of the warm tier on a cluster: its pairs sit in the slots of their own
hash tags, on every master, and its ledger in the tenant's slot, so the bound is kept by
allotments (logic/tenant_budget.py). The tests of tests/integration/test_tenant_warm_share.py
whose bound is a setting run here as they are."""

from __future__ import annotations

from collections.abc import Callable

from tests.integration.test_tenant_warm_share import (  # noqa: F401  (run here on the cluster)
    BIG,
    MiB,
    _reclaim_at_once,
    allotted,
    test_a_reclaim_between_a_push_and_its_report_leaves_the_ledger_exact,
    test_an_allotment_left_by_a_caller_that_stopped_is_recovered,
    test_completion_markers_stay_within_the_share_and_give_way_to_tasks,
    test_leases_count_against_the_bound,
    test_markers_of_tasks_that_were_never_warm_keep_to_the_floor,
    test_one_tenant_over_many_queues_stays_under_its_bound_and_others_are_admitted,
    test_replacements_grow_a_pair_only_within_its_tenants_bound,
    test_reports_in_either_order_count_once,
    test_the_largest_overshoot_is_one_stalled_grant,
    test_the_ledger_grants_up_to_the_bound_and_sets_entries_only_when_quiet,
    usage,
)
from tests.support.cluster import node_of
from tierq.dal.warm_tier import PairKeys, TenantKeys
from tierq.engine import Tierq


def queues_on_every_master(valkey, tenant: str, per_master: int) -> list[str]:
    """Queue names whose pairs of ``tenant`` lie on every master, ``per_master`` on each."""
    wanted = {f"{n.host}:{n.port}": per_master for n in valkey.get_primaries()}
    chosen: list[str] = []
    i = 0
    while any(wanted.values()):
        queue = f"spread-{i}"
        i += 1
        node = node_of(valkey, queue, tenant)
        if wanted[node]:
            wanted[node] -= 1
            chosen.append(queue)
    return chosen


def test_a_tenant_on_every_master_is_bounded_by_its_one_ledger(
        make_tq: Callable[..., Tierq], valkey) -> None:
    tq = make_tq(tenant_warm_max_bytes=MiB)
    queues = queues_on_every_master(valkey, "acme", per_master=3)
    assert len({node_of(valkey, q, "acme") for q in queues}) == 3
    for queue in queues:
        tq.enqueue(queue, [{"payload": BIG} for _ in range(2)], tenant="acme")
    assert usage(tq, queues, "acme") <= allotted(tq, queues, "acme") \
        == tq.ctx.warm.ledger_total("acme") <= MiB
    # the ledger is one key of the tenant's own slot
    assert valkey.exists(TenantKeys.of("acme").warm) == 1
    assert valkey.keyslot(TenantKeys.of("acme").warm) != valkey.keyslot(
        PairKeys.of(queues[0], "acme").meta)
