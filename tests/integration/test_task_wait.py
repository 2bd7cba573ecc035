"""Waiting for a task's end on a single Valkey (tests/integration/task_wait_scenarios.py):
woken within moments of the ack, after N seconds when nothing happens, ``done`` for a task
acked without a result, no PostgreSQL statement while it waits, another tenant's task 404
at once, and no finish missed between the first read and the subscription."""

from __future__ import annotations

import pytest

from tests.integration import task_wait_scenarios as scenarios


def test_a_wait_answers_moments_after_the_ack(tq, valkey):
    # (the strict figure, 100 ms, is bench/task_wait.py's: timing belongs to the bench)
    assert scenarios.wakes_within_ms_of_the_ack(tq, valkey) < 1000


def test_markers_gone_by_cancels_do_not_leave_a_wait_asleep(make_tq, valkey, monkeypatch):
    scenarios.markers_gone_by_cancels_do_not_leave_a_wait_asleep(
        make_tq(tenant_warm_max_bytes=1 << 20), valkey, monkeypatch)


def test_a_woken_wait_answers_from_its_message(tq, valkey, monkeypatch):
    scenarios.a_woken_wait_answers_from_its_message(tq, valkey, monkeypatch)


def test_a_kept_result_comes_with_the_answer(tq, valkey):
    scenarios.a_kept_result_answers_with_it(tq, valkey)


def test_with_nothing_happening_it_answers_after_n_seconds(tq):
    scenarios.nothing_happens_for_n_seconds(tq)


def test_a_task_acked_without_a_result_answers_done(tq):
    scenarios.acked_before_the_wait_answers_done(tq)


def test_a_nack_an_expiry_and_a_delete_wake_it(make_tq, valkey):
    scenarios.the_other_ends_wake_it(make_tq(lease_seconds=30), valkey)


def test_another_tenants_task_is_404_without_waiting(tq):
    scenarios.another_tenants_task_is_404_at_once(tq)


def test_a_finish_before_the_subscription_is_not_missed(tq, monkeypatch):
    scenarios.a_finish_before_the_subscription_is_not_missed(tq, monkeypatch)


def test_a_stale_marker_does_not_end_a_wait(tq):
    scenarios.a_stale_marker_does_not_end_the_wait(tq)


def test_a_broken_subscription_answers_early(tq, valkey):
    scenarios.a_broken_subscription_answers_early(tq, valkey)


def test_no_postgresql_statement_while_it_waits(tq, valkey, monkeypatch):
    scenarios.no_statement_while_it_waits(tq, valkey, monkeypatch)


@pytest.mark.parametrize("seconds", [-1, 20.5])
def test_a_wait_outside_0_to_20_seconds_is_refused(tq, seconds):
    with pytest.raises(ValueError, match="wait_seconds"):
        tq.get_task("q", "0190a000-0000-7000-8000-000000000000", wait_seconds=seconds)


def test_markers_are_capped_per_pair_and_expire(tq, valkey, monkeypatch):
    scenarios.markers_are_capped_per_pair(tq, valkey, monkeypatch)


def test_an_ack_tells_only_a_registered_wait(tq, valkey):
    scenarios.only_a_registered_wait_is_told(tq, valkey)


def test_a_finish_before_the_registration_is_not_missed(tq, monkeypatch):
    scenarios.a_finish_before_the_registration_is_not_missed(tq, monkeypatch)


def test_a_marker_outlives_a_rotation_by_its_ttl(tq, valkey, monkeypatch):
    scenarios.a_marker_outlives_a_rotation_by_its_ttl(tq, valkey, monkeypatch)
