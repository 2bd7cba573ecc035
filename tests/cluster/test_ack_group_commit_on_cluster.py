"""Acks committed together on a three-master cluster
(tests/integration/ack_gathering_scenarios.py)."""

from __future__ import annotations

from tests.integration import ack_gathering_scenarios as scenarios


def test_acks_that_meet_are_one_commit_on_cluster(make_tq, valkey, pg):
    scenarios.many_acks_one_commit(make_tq, valkey, pg)


def test_acks_of_a_stopped_committer_commit_alone(make_tq, valkey, pg):
    scenarios.a_stopped_committer(make_tq, valkey, pg)


def test_a_failed_commit_fails_its_own_ack_only(make_tq, valkey, pg, monkeypatch):
    scenarios.a_failed_commit(make_tq, valkey, pg, monkeypatch)


def test_a_group_acked_by_another_s_commit_goes_on(make_tq, valkey):
    scenarios.groups_go_on(make_tq, valkey)


def test_one_tenant_s_committer_never_delays_another_s_ack(make_tq, valkey):
    scenarios.tenants_apart(make_tq, valkey)


def test_two_acks_of_one_task_answer_it_once(make_tq, valkey):
    scenarios.one_task_twice(make_tq, valkey)


def test_a_later_pass_that_fails_keeps_the_committer_s_answer(make_tq, valkey, pg, monkeypatch):
    scenarios.a_later_pass_fails(make_tq, valkey, pg, monkeypatch)
