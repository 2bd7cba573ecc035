"""The fair shares of push delivery's concurrency (tierq.logic.dispatch.shares)."""

from __future__ import annotations

from tierq.logic.dispatch.shares import queue_shares, tenant_share


def test_a_queue_alone_may_use_every_thread() -> None:
    assert queue_shares(64, {"q": 64}) == {"q": 64}
    assert queue_shares(64, {"q": 1}) == {"q": 64}


def test_busy_queues_split_the_threads_equally() -> None:
    assert queue_shares(64, {"a": 64, "b": 64}) == {"a": 32, "b": 32}
    assert queue_shares(4, {"a": 4, "b": 4, "c": 4}) == {"a": 2, "b": 2, "c": 2}


def test_a_queue_that_needs_less_leaves_the_rest_to_the_others() -> None:
    # "small" runs two (its max_concurrency): the other may hold the remaining 62
    assert queue_shares(64, {"big": 64, "small": 2}) == {"big": 62, "small": 32}
    assert queue_shares(10, {"a": 1, "b": 3, "c": 10}) == {"a": 4, "b": 5, "c": 6}


def test_every_queue_gets_at_least_one_thread() -> None:
    shares = queue_shares(2, {f"q{i}": 5 for i in range(5)})
    assert set(shares.values()) == {1}


def test_a_tenants_share_of_its_queues_limit() -> None:
    assert tenant_share(4, 1) == 4  # alone: all of it
    assert tenant_share(4, 2) == 2
    assert tenant_share(4, 3) == 2  # rounded up
    assert tenant_share(4, 10) == 1  # at least one
    assert tenant_share(4, 0) == 4
