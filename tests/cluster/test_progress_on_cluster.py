"""A task's progress on a three-master Valkey cluster (tests/integration/progress_scenarios.py):
lease_progress.lua and the drops that end it touch the keys of the pair's slot only."""

from __future__ import annotations

from tests.integration import progress_scenarios as scenarios


def test_seen_while_running_and_after_a_nack(tq, valkey):
    scenarios.seen_while_running_and_after_a_nack(tq, valkey)


def test_kept_by_an_ack_with_a_result(tq, valkey):
    scenarios.kept_by_an_ack_with_a_result(tq, valkey)


def test_kept_by_an_expiry(make_tq, valkey):
    tq = make_tq(lease_seconds=30)
    scenarios.kept_by_an_expiry_and_shown_until_the_next_attempt_sends_its_own(
        tq, valkey, tq.ctx.clock.advance)


def test_given_back_by_a_release_and_a_plain_ack(tq, valkey):
    scenarios.given_back_by_a_release_and_a_plain_ack(tq, valkey)


def test_larger_than_4_kib_is_refused_naming_it(tq, valkey):
    scenarios.larger_than_4_kib_is_refused_naming_it(tq, valkey)


def test_held_to_the_tenants_share(make_tq, valkey):
    scenarios.held_to_the_tenants_share(
        make_tq(tenant_warm_max_bytes=scenarios.SHARE), valkey)


def test_kept_with_a_grant_when_the_share_has_room(make_tq, valkey):
    scenarios.kept_with_a_grant_when_the_share_has_room(
        make_tq(tenant_warm_max_bytes=scenarios.SHARE), valkey)


def test_a_grant_refused_at_its_pair_goes_back_to_the_ledger(make_tq, valkey, monkeypatch):
    scenarios.a_grant_refused_at_its_pair_goes_back_to_the_ledger(
        make_tq(tenant_warm_max_bytes=scenarios.SHARE), valkey, monkeypatch)
