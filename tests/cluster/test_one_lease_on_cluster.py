"""One live lease per task on a three-master cluster: a push stalled past the grace, and a
failover that loses a claim (tests/integration/one_lease_scenarios.py)."""

from __future__ import annotations

import pytest

from tests.integration import one_lease_scenarios as scenarios
from tests.support.cluster import node_of


@pytest.mark.parametrize("path", sorted(scenarios.PATHS))
def test_a_push_stalled_past_the_grace_leaves_one_lease(make_tq, valkey, path):
    scenarios.push_stalled_past_the_grace(make_tq, valkey, path, ack_first=False)


def test_a_push_stalled_past_the_grace_does_not_bring_back_an_acked_task(make_tq, valkey):
    scenarios.push_stalled_past_the_grace(make_tq, valkey, "enqueue", ack_first=True)


def test_the_reconciler_leaves_a_recent_release_to_it(make_tq, valkey):
    scenarios.release_within_the_grace_is_left_to_it(make_tq, valkey)


def test_an_ack_from_a_lease_a_failover_lost_is_refused(tq, valkey, cluster):
    # DUMP and RESTORE are the admin user's: on the master of the pair's keys
    master = cluster.admin_client(int(node_of(valkey, "failover", "_").split(":")[1]))
    try:
        scenarios.failover_loses_a_claim(tq, master)
    finally:
        master.close()
