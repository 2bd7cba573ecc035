"""A task's progress over three shards (tests/integration/progress_scenarios.py): the
heartbeat, the views and the outcomes go to the home of the task's pair, and the sharded
engine answers as the single one does."""

from __future__ import annotations

from tests.integration import progress_scenarios as scenarios
from tests.shards.conftest import ShardedFactory
from tierq.logic.context import OffsetClock


def test_seen_while_running_and_after_a_nack(make_sharded: ShardedFactory, valkey) -> None:
    scenarios.seen_while_running_and_after_a_nack(make_sharded(), valkey)


def test_kept_by_an_ack_with_a_result(make_sharded: ShardedFactory, valkey) -> None:
    scenarios.kept_by_an_ack_with_a_result(make_sharded(), valkey)


def test_kept_by_an_expiry(make_sharded: ShardedFactory, valkey) -> None:
    clock = OffsetClock()
    tq = make_sharded(clock=clock, lease_seconds=30)
    scenarios.kept_by_an_expiry_and_shown_until_the_next_attempt_sends_its_own(
        tq, valkey, clock.advance)


def test_given_back_by_a_release_and_a_plain_ack(make_sharded: ShardedFactory,
                                                 valkey) -> None:
    scenarios.given_back_by_a_release_and_a_plain_ack(make_sharded(), valkey)


def test_larger_than_4_kib_is_refused_naming_it(make_sharded: ShardedFactory,
                                                valkey) -> None:
    scenarios.larger_than_4_kib_is_refused_naming_it(make_sharded(), valkey)


def test_held_to_the_tenants_share(make_sharded: ShardedFactory, valkey) -> None:
    scenarios.held_to_the_tenants_share(
        make_sharded(tenant_warm_max_bytes=scenarios.SHARE), valkey)


def test_kept_with_a_grant_when_the_share_has_room(make_sharded: ShardedFactory,
                                                   valkey) -> None:
    scenarios.kept_with_a_grant_when_the_share_has_room(
        make_sharded(tenant_warm_max_bytes=scenarios.SHARE), valkey)
