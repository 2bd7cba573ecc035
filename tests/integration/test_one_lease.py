"""One live lease per task, always (docs/architecture.md §8): a push, promotion, delayed
move, retry or release that lands after the reconciler took its rows over adds nothing,
and an ack from a lease a Valkey failover lost is refused (tests/integration/
one_lease_scenarios.py; the same on a cluster: tests/cluster/test_one_lease_on_cluster.py)."""

from __future__ import annotations

import pytest

from tests.integration import one_lease_scenarios as scenarios


@pytest.mark.parametrize("path", sorted(scenarios.PATHS))
def test_a_push_stalled_past_the_grace_leaves_one_lease(make_tq, valkey, path):
    scenarios.push_stalled_past_the_grace(make_tq, valkey, path, ack_first=False)


@pytest.mark.parametrize("path", ["enqueue", "release"])
def test_a_push_stalled_past_the_grace_does_not_bring_back_an_acked_task(make_tq, valkey,
                                                                        path):
    scenarios.push_stalled_past_the_grace(make_tq, valkey, path, ack_first=True)


def test_the_reconciler_leaves_a_recent_release_to_it(make_tq, valkey):
    scenarios.release_within_the_grace_is_left_to_it(make_tq, valkey)


def test_an_ack_from_a_lease_a_failover_lost_is_refused(tq, valkey):
    scenarios.failover_loses_a_claim(tq, valkey)
