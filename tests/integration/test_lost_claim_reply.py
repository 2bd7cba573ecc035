"""A claim's reply lost after Valkey ran it leaves no lease held by nobody, on a single
Valkey (tests/integration/lost_claim_reply_scenarios.py; on a cluster:
tests/cluster/test_lost_claim_reply_on_cluster.py)."""

from __future__ import annotations

from tests.integration import lost_claim_reply_scenarios as scenarios


def test_a_lost_reply_of_one_tenants_pop_gives_its_leases_back(tq, valkey, pg, monkeypatch):
    scenarios.one_tenant(tq, valkey, pg, monkeypatch)


def test_a_lost_reply_of_a_pipeline_of_pops_gives_every_pairs_leases_back(
        tq, valkey, pg, monkeypatch):
    scenarios.several_tenants(tq, valkey, pg, monkeypatch)


def test_a_lost_reply_under_max_leased_frees_its_capacity_too(make_tq, valkey, pg,
                                                              monkeypatch):
    scenarios.under_max_leased(make_tq, valkey, pg, monkeypatch)


def test_a_lost_reply_under_a_bigger_grant_holds_the_leases_units_alone(
        make_tq, valkey, pg, monkeypatch):
    scenarios.grant_past_the_leases(make_tq, valkey, pg, monkeypatch)


def test_a_lost_reply_of_a_later_pair_holds_the_leases_units_alone(make_tq, valkey, pg,
                                                                   monkeypatch):
    scenarios.later_pair_lost(make_tq, valkey, pg, monkeypatch)


def test_a_lost_reply_pops_no_more_once_the_claims_time_is_up(tq, valkey, pg, monkeypatch):
    scenarios.past_answer_by(tq, valkey, pg, monkeypatch)


def test_a_reply_lost_twice_leaves_the_tasks_in_line(tq, valkey, pg, monkeypatch):
    scenarios.lost_twice(tq, valkey, pg, monkeypatch)


def test_a_pipelined_pairs_reply_lost_twice_leaves_its_tasks_in_line(tq, valkey, pg,
                                                                     monkeypatch):
    scenarios.pipelined_lost_twice(tq, valkey, pg, monkeypatch)
