"""A task's progress on one Valkey and PostgreSQL (tests/integration/progress_scenarios.py)."""

from __future__ import annotations

import logging

import pytest

from tests.integration import progress_scenarios as scenarios
from tierq.dal.warm_tier import MARKER_CHARGE


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


def test_at_maxmemory_the_heartbeat_extends_and_drops_the_progress(tq, valkey, valkey_private,
                                                                    caplog):
    """lease_progress.lua grows the data, so Valkey refuses it at maxmemory (noeviction):
    the lease is still extended (lease_extend.lua may run there) and the progress dropped,
    logged."""
    if not valkey_private:
        pytest.skip("sets maxmemory: only on this session's own Valkey")
    [made] = tq.enqueue("pm", [{"payload": 1}])
    [task] = tq.claim("pm", max=1)
    before = valkey.config_get("maxmemory*")
    valkey.config_set("maxmemory-policy", "noeviction")
    valkey.config_set("maxmemory", 1)
    try:
        with caplog.at_level(logging.WARNING, logger="tierq"):
            out = tq.heartbeat("pm", [{"id": task.id, "lease_token": task.lease_token,
                                       "extend_seconds": 900, "progress": "half"}])
    finally:
        valkey.config_set("maxmemory", before["maxmemory"])
        valkey.config_set("maxmemory-policy", before["maxmemory-policy"])
    [extended] = out.extended
    assert extended.lease_expires_at > task.lease_expires_at
    assert any("not kept" in r.getMessage() for r in caplog.records)
    assert tq.get_task("pm", made.id).progress is None
    assert scenarios.kept_bytes(valkey, "pm") == 0


def test_the_pairs_usage_of_its_tenants_share_counts_the_progress(tq, valkey):
    tq.enqueue("pu", [{"payload": 1}])
    [task] = tq.claim("pu", max=1)
    assert tq.ctx.warm.pair_usage("pu", "_", charge=0)[0] == 0  # (nothing waits)
    scenarios.beat(tq, "pu", task, {"k": "v" * 50})
    kept = scenarios.kept_bytes(valkey, "pu")
    assert kept > 50 and tq.ctx.warm.pair_usage("pu", "_", charge=0)[0] == kept
    tq.ack("pu", [task])  # (what is left: the ack's completion marker)
    assert tq.ctx.warm.pair_usage("pu", "_", charge=0)[0] == MARKER_CHARGE


def test_held_to_the_tenants_share(make_tq, valkey):
    scenarios.held_to_the_tenants_share(
        make_tq(tenant_warm_max_bytes=scenarios.SHARE), valkey)


def test_kept_with_a_grant_when_the_share_has_room(make_tq, valkey):
    scenarios.kept_with_a_grant_when_the_share_has_room(
        make_tq(tenant_warm_max_bytes=scenarios.SHARE), valkey)


def test_a_grant_refused_at_its_pair_goes_back_to_the_ledger(make_tq, valkey, monkeypatch):
    scenarios.a_grant_refused_at_its_pair_goes_back_to_the_ledger(
        make_tq(tenant_warm_max_bytes=scenarios.SHARE), valkey, monkeypatch)
