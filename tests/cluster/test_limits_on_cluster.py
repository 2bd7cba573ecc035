"""Limits on claims on a three-master cluster: the queue's tenants lie on every master (each
pair its own slot), the queue-wide reservations on the queue's own slot
(tests/integration/limits_scenarios.py)."""

from __future__ import annotations

import pytest

from tests.integration import limits_scenarios as scenarios
from tests.support.cluster import node_of, tenants_on_every_node
from tierq.dal.warm_tier import QueueKeys

CLUSTER = {"valkey_cluster": True}


def spread_tenants(valkey, queue: str) -> list[str]:
    tenants = tenants_on_every_node(valkey, queue, per_node=1)
    assert len({node_of(valkey, queue, t) for t in tenants}) == 3
    return tenants


@pytest.mark.slow
def test_eight_claimer_processes_never_hold_more_than_max_leased(make_tq, valkey, database_url,
                                                                 valkey_url):
    tenants = spread_tenants(valkey, "limited")
    scenarios.run_eight_claimers(make_tq(), valkey, database_url, valkey_url, tenants, CLUSTER)


def test_after_two_acks_exactly_two_more_are_claimable(make_tq, valkey):
    tenants = spread_tenants(valkey, "acks")
    # the reservations live on a slot of their own, not the pairs'
    held = valkey.keyslot(QueueKeys.held("acks", "leases"))
    assert held not in {valkey.keyslot(f"tq:{{acks|{t}}}:leased") for t in tenants}
    scenarios.acks_free_exactly_their_capacity(make_tq(), tenants)


def test_one_tenants_claim_tells_nothing_of_the_others(make_tq, valkey):
    # the queue-wide take is a call of its own here, made before any pop
    scenarios.one_tenants_claim_tells_nothing_of_the_others(
        make_tq(), spread_tenants(valkey, "shared-limit"))


def test_rate_20_per_second_burst_5_for_5_seconds(make_tq, valkey):
    handed = scenarios.rate_flat_out(make_tq(), spread_tenants(valkey, "rated"))
    print(f"\nrate 20/s burst 5 on a cluster, 5 s flat out: {handed} handed out")
    assert 80 <= handed <= 105


@pytest.mark.parametrize("where", ["leased", "reserved"])
def test_a_killed_claimer_frees_its_capacity_by_the_lease_expiry(make_tq, database_url,
                                                                 valkey_url, where):
    scenarios.killed_claimer_frees_by_lease_expiry(make_tq(), database_url, valkey_url,
                                                   where, CLUSTER)
