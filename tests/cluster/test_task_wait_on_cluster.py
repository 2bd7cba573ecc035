"""Waiting for a task's end on a three-master cluster (tests/integration/task_wait_scenarios.py):
the marker and SPUBLISH run in the pair's slot and the wait's SSUBSCRIBE goes to that slot's
master, so a wait answers moments after the ack, ``done`` for a task acked without a result,
after N seconds when nothing happens, and runs no PostgreSQL statement while it waits."""

from __future__ import annotations

from tests.integration import task_wait_scenarios as scenarios


def test_a_wait_answers_moments_after_the_ack(tq, valkey):
    assert scenarios.wakes_within_ms_of_the_ack(tq, valkey) < 1000


def test_a_task_acked_without_a_result_answers_done(tq):
    scenarios.acked_before_the_wait_answers_done(tq)


def test_with_nothing_happening_it_answers_after_n_seconds(tq):
    scenarios.nothing_happens_for_n_seconds(tq)


def test_a_nack_an_expiry_and_a_delete_wake_it(make_tq, valkey):
    scenarios.the_other_ends_wake_it(make_tq(lease_seconds=30), valkey)


def test_a_finish_before_the_subscription_is_not_missed(tq, monkeypatch):
    scenarios.a_finish_before_the_subscription_is_not_missed(tq, monkeypatch)


def test_no_postgresql_statement_while_it_waits(tq, valkey, monkeypatch):
    scenarios.no_statement_while_it_waits(tq, valkey, monkeypatch)


def test_another_tenants_task_is_404_without_waiting(tq):
    scenarios.another_tenants_task_is_404_at_once(tq)


def test_an_ack_tells_only_a_registered_wait(tq, valkey):
    scenarios.only_a_registered_wait_is_told(tq, valkey)


def test_a_finish_before_the_registration_is_not_missed(tq, monkeypatch):
    scenarios.a_finish_before_the_registration_is_not_missed(tq, monkeypatch)


def test_a_marker_outlives_a_rotation_by_its_ttl(tq, valkey, monkeypatch):
    scenarios.a_marker_outlives_a_rotation_by_its_ttl(tq, valkey, monkeypatch)


def test_markers_are_capped_per_pair(tq, valkey, monkeypatch):
    scenarios.markers_are_capped_per_pair(tq, valkey, monkeypatch)


def test_a_woken_wait_answers_from_its_message(tq, valkey, monkeypatch):
    scenarios.a_woken_wait_answers_from_its_message(tq, valkey, monkeypatch)


def test_markers_gone_by_cancels_do_not_leave_a_wait_asleep(make_tq, valkey, monkeypatch):
    scenarios.markers_gone_by_cancels_do_not_leave_a_wait_asleep(
        make_tq(tenant_warm_max_bytes=1 << 20), valkey, monkeypatch)
