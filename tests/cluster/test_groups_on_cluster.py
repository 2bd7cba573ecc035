"""Groups on a cluster: the tests of tests/integration/test_groups.py run here as they are
(no new Valkey key: a group lives in its pair's rows), and groups of tenants whose pairs lie
on every master keep their order and their bound while claims rotate across the tenants."""

from __future__ import annotations

from collections import defaultdict

from tests.integration.test_groups import (  # noqa: F401  (run here on the cluster)
    test_a_busy_group_beside_a_hundred_quiet_ones_starves_none,
    test_a_dead_head_releases_the_next_and_its_replay_joins_the_back,
    test_a_purge_drops_the_groups_and_the_sweep_releases_a_stalled_group,
    test_a_retried_head_keeps_its_place_through_its_backoff,
    test_acks_release_the_next_task_and_the_group_row_goes_when_done,
    test_cancel_of_a_held_task_and_of_the_head,
    test_enqueue_racing_ack_on_one_group_never_stalls,
    test_group_max_leased_is_validated_and_three_run_at_once_in_order,
    test_strict_order_one_at_a_time_under_eight_claimers_with_failures,
)
from tests.support.cluster import node_of, tenants_on_every_node


def test_groups_of_tenants_on_every_master_keep_order_and_bound(make_tq, valkey, pg):
    tq = make_tq()
    tq.put_queue("q", {"group_max_leased": 2})
    tenants = tenants_on_every_node(valkey, "q", per_node=2)
    assert len({node_of(valkey, "q", t) for t in tenants}) == len(valkey.get_primaries())
    for tenant in tenants:
        tq.enqueue("q", [{"payload": [tenant, g, i], "group": f"g{g}", "tenant": tenant}
                         for g in range(3) for i in range(5)])
    order: dict[tuple[str, int], list[int]] = defaultdict(list)
    while True:
        got = tq.claim("q", max=20)  # no tenant: claims rotate across the tenants
        if not got:
            break
        per_group: dict[tuple[str, int], int] = defaultdict(int)
        for task in got:
            tenant, g, i = task.payload
            per_group[(tenant, g)] += 1
            order[(tenant, g)].append(i)
        assert max(per_group.values()) <= 2, per_group
        active = pg.execute(
            "SELECT max(n) FROM (SELECT count(*) AS n FROM tierq_tasks WHERE queue = 'q' "
            "AND state IN ('delayed', 'cold', 'warm') GROUP BY tenant, grp) AS c").fetchone()
        assert active[0] is None or active[0] <= 2
        tq.ack("q", got)
    assert len(order) == len(tenants) * 3
    for key, seen in order.items():
        assert seen == list(range(5)), (key, seen)
    assert pg.execute("SELECT count(*) FROM tierq_groups").fetchone()[0] == 0
