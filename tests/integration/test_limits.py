"""Limits on claims on a single Valkey: max_leased across claimer processes, acks / nacks /
releases / heartbeats and capacity, rates on the server's clock, per-tenant limits, and a
claimer killed while holding capacity (scenarios: tests/integration/limits_scenarios.py)."""

from __future__ import annotations

import time

import pytest

from tests.integration import limits_scenarios as scenarios
from tierq.logic import limits

TENANTS = ["acme", "globex", "initech"]


@pytest.mark.slow
def test_eight_claimer_processes_never_hold_more_than_max_leased(make_tq, valkey, database_url,
                                                                 valkey_url):
    scenarios.run_eight_claimers(make_tq(), valkey, database_url, valkey_url, TENANTS, {})


def test_after_two_acks_exactly_two_more_are_claimable(make_tq):
    scenarios.acks_free_exactly_their_capacity(make_tq(), TENANTS)


def test_one_tenants_claim_tells_nothing_of_the_others(make_tq):
    scenarios.one_tenants_claim_tells_nothing_of_the_others(make_tq(), ["h", "i", "b"])


def test_rate_20_per_second_burst_5_for_5_seconds(make_tq):
    handed = scenarios.rate_flat_out(make_tq(), TENANTS)
    print(f"\nrate 20/s burst 5, 5 s flat out: {handed} handed out")
    assert 80 <= handed <= 105


def test_tenant_rate_applies_to_each_tenant(make_tq):
    handed = scenarios.rate_flat_out(make_tq(), ["a", "b"], tenant_rate=True)
    print(f"\ntenant_rate 20/s burst 5, 2 tenants, 5 s flat out: {handed} handed out")
    assert 160 <= handed <= 210


def test_tenant_max_leased_counts_each_tenant_alone(make_tq):
    tq = make_tq()
    tq.put_queue("t", {"tenant_max_leased": 2})
    tq.enqueue("t", [{"payload": i, "tenant": t} for t in ("a", "b") for i in range(5)])
    first = tq.claim_outcome("t", max=10)
    assert sorted(t.tenant for t in first.tasks) == ["a", "a", "b", "b"]
    assert first.retry_after_ms is not None
    assert tq.claim("t", max=10, tenant="a") == []
    tq.ack("t", [t for t in first.tasks if t.tenant == "a"][:1])
    again = tq.claim("t", max=10)
    assert [t.tenant for t in again] == ["a"]


def test_expired_leases_free_capacity_without_the_reaper(make_tq):
    tq = make_tq()
    tq.put_queue("e", {"max_leased": 2, "tenant_max_leased": 2})
    tq.enqueue("e", [{"payload": i} for i in range(5)])
    assert len(tq.claim("e", max=5, lease_seconds=1)) == 2
    assert tq.claim("e", max=5) == []
    time.sleep(1.1)
    assert len(tq.claim("e", max=5)) == 2


def test_a_long_poll_waits_for_capacity(make_tq):
    tq = make_tq()
    tq.put_queue("w", {"max_leased": 1})
    tq.enqueue("w", [{"payload": i} for i in range(3)])
    [held] = tq.claim("w", max=1, lease_seconds=1)
    started = time.monotonic()
    [next_one] = tq.claim("w", max=1, wait_seconds=5)
    waited = time.monotonic() - started
    assert 0.5 < waited < 2.5, waited  # about when the first lease ended
    assert next_one.id != held.id


def test_limits_hold_capacity_for_other_callers(make_tq):
    """The Python API the consumer dispatcher uses for max_concurrency (logic/limits.py)."""
    tq = make_tq()
    first = limits.take(tq.ctx, "c", "invocations", limit=2, want=3, hold_seconds=60)
    assert first.count == 2 and first.retry_after_ms > 0
    assert limits.take(tq.ctx, "c", "invocations", limit=2, hold_seconds=60).count == 0
    assert limits.in_use(tq.ctx, "c", "invocations") == 2
    assert limits.in_use(tq.ctx, "c", "leases") == 0  # another pool
    assert limits.give_back(tq.ctx, first, first.members[:1]) == 1
    again = limits.take(tq.ctx, "c", "invocations", limit=2, hold_seconds=0.5)
    assert again.count == 1
    kept = limits.extend(tq.ctx, again, 60)
    assert kept.members == again.members
    time.sleep(0.6)
    assert limits.in_use(tq.ctx, "c", "invocations") == 2  # extended, still held
    short = limits.take(tq.ctx, "d", "invocations", limit=1, hold_seconds=0.2)
    time.sleep(0.3)
    assert limits.take(tq.ctx, "d", "invocations", limit=1, hold_seconds=1).count == 1
    assert limits.extend(tq.ctx, short, 60).members == ()  # it had expired: not taken again
    with pytest.raises(ValueError, match="pool"):
        limits.take(tq.ctx, "c", "Bad Pool", limit=1, hold_seconds=1)


@pytest.mark.parametrize("want", [1, 9, 100, 2500])
def test_a_take_is_one_entry_and_each_unit_is_given_back_once(make_tq, valkey, want):
    """lua/capacity_pool.lua: a take of N units is one entry of the pool (not N members);
    its units <holder>1..<holder>N leave it one by one, each at most once (an ack racing
    the reaper on one lease gives it back twice); an empty pool leaves its count, 0."""
    tq = make_tq()
    held = limits.take(tq.ctx, "q", "invocations", limit=10_000, want=want, hold_seconds=60,
                       holder="h~")
    assert held.members == tuple(f"h~{k}" for k in range(1, want + 1))
    pool = "tq:{q}:held:invocations"
    assert valkey.zrange(pool, 0, -1, withscores=True) == [(b"h~", held.deadline_ms)]
    assert limits.in_use(tq.ctx, "q", "invocations") == want
    half = held.members[: (want + 1) // 2]
    assert limits.give_back(tq.ctx, held, half) == len(half)
    assert limits.give_back(tq.ctx, held, half) == 0  # once only
    assert limits.in_use(tq.ctx, "q", "invocations") == want - len(half)
    assert limits.give_back(tq.ctx, held) == want - len(half)
    assert limits.give_back(tq.ctx, held) == 0
    assert limits.in_use(tq.ctx, "q", "invocations") == 0
    assert not valkey.exists(pool)
    assert valkey.hgetall(f"{pool}:counts") == {b"~held": b"0"}


def test_extending_some_units_moves_them_to_entries_of_their_own(make_tq, valkey):
    tq = make_tq()
    pool = "tq:{e}:held:invocations"
    held = limits.take(tq.ctx, "e", "invocations", limit=10, want=4, hold_seconds=0.5,
                       holder="h~")
    some = limits.Held("e", "invocations", held.members[:1], held.deadline_ms, 0)
    assert limits.extend(tq.ctx, some, 60).members == ("h~1",)
    entries = dict(valkey.zrange(pool, 0, -1, withscores=True))
    assert set(entries) == {b"h~", b"h~1"} and entries[b"h~1"] > entries[b"h~"]
    assert limits.in_use(tq.ctx, "e", "invocations") == 4
    # the rest of the take still ends at its deadline
    time.sleep(0.6)
    assert limits.in_use(tq.ctx, "e", "invocations") == 1
    assert limits.extend(tq.ctx, held, 60).members == ("h~1",)  # the others had expired
    other = limits.take(tq.ctx, "e", "invocations", limit=10, hold_seconds=60)
    assert limits.give_back(tq.ctx, held) == 1  # (that take swept the expired ones)
    assert limits.give_back(tq.ctx, held) == 0
    assert limits.give_back(tq.ctx, other) == 1
    # a heartbeat of every unit still in a take moves the take's one entry
    whole = limits.take(tq.ctx, "e", "invocations", limit=10, want=3, hold_seconds=60,
                        holder="w~")
    assert limits.give_back(tq.ctx, whole, whole.members[:1]) == 1
    rest = limits.Held("e", "invocations", whole.members[1:], whole.deadline_ms, 0)
    longer = limits.extend(tq.ctx, rest, 120)
    assert longer.members == rest.members
    assert valkey.zrange(pool, 0, -1, withscores=True) == [(b"w~", longer.deadline_ms)]
    assert limits.in_use(tq.ctx, "e", "invocations") == 2


def test_a_pool_of_one_member_per_unit_is_recounted(make_tq, valkey):
    """Reservations written by an older tierq (one member per unit, no counts) are counted,
    taken into account by a take and given back by name."""
    tq = make_tq()
    pool = "tq:{o}:held:leases"
    deadline = int(time.time() * 1000) + 60_000
    valkey.zadd(pool, {"old~1": deadline, "old~2": deadline, "gone~1": deadline - 120_000})
    held = limits.take(tq.ctx, "o", "leases", limit=5, want=5, hold_seconds=60)
    assert held.count == 3  # the expired one was swept
    assert limits.in_use(tq.ctx, "o", "leases") == 5
    assert tq.ctx.warm.return_capacity("o", "leases", ["old~1", "old~1"]) == 1
    assert limits.in_use(tq.ctx, "o", "leases") == 4


@pytest.mark.slow
@pytest.mark.parametrize("where", ["leased", "reserved"])
def test_a_killed_claimer_frees_its_capacity_by_the_lease_expiry(make_tq, database_url,
                                                                 valkey_url, where):
    scenarios.killed_claimer_frees_by_lease_expiry(make_tq(), database_url, valkey_url,
                                                   where, {})


def test_the_queue_view_shows_each_limit_and_its_use(make_tq):
    tq = make_tq()
    tq.put_queue("v", {"max_leased": 10, "rate": {"per_second": 1, "burst": 8},
                       "tenant_max_leased": 5, "tenant_rate": {"per_second": 1, "burst": 6}})
    tq.enqueue("v", [{"payload": i, "tenant": t} for t in ("a", "b") for i in range(4)])
    tq.claim("v", max=3, tenant="a")
    tq.claim("v", max=1, tenant="b")
    view = tq.get_queue("v")
    use = view.limits_use
    assert use is not None
    assert use.leased == 4
    assert use.rate_tokens is not None and 4 <= use.rate_tokens < 5  # 8 - 4, refilling 1/s
    assert use.tenant_leased_max == 3
    assert use.tenant_rate_tokens_min is not None and 3 <= use.tenant_rate_tokens_min < 4
    tq.put_queue("v", {"max_leased": None, "rate": None, "tenant_max_leased": None,
                       "tenant_rate": None})
    assert tq.get_queue("v").limits_use is None


def test_a_heartbeat_naming_another_tasks_token_leaves_its_reservation(make_tq):
    # a heartbeat whose id does not go with its token (a client's mix-up, or on purpose)
    # is rejected, and must not give back the reservation of the lease the token is of:
    # that lease still runs, and max_leased would be exceeded by one per such heartbeat
    import uuid

    tq = make_tq()
    tq.put_queue("h", {"max_leased": 2})
    tq.enqueue("h", [{"payload": i} for i in range(5)])
    held = tq.claim("h", max=5)
    assert len(held) == 2
    answer = tq.heartbeat("h", [{"id": uuid.uuid4(), "lease_token": t.lease_token}
                                for t in held])
    assert len(answer.rejected) == 2
    assert limits.in_use(tq.ctx, "h", limits.LEASES_POOL) == 2
    assert tq.claim("h", max=5) == []
    # a heartbeat of a lease that ended (acked) is rejected and holds nothing
    tq.ack("h", held[:1])
    assert len(tq.heartbeat("h", [{"id": held[0].id, "lease_token": held[0].lease_token}])
               .rejected) == 1
    assert limits.in_use(tq.ctx, "h", limits.LEASES_POOL) == 1
    assert len(tq.claim("h", max=5)) == 1


def test_a_lease_given_back_twice_frees_its_reservation_once(make_tq):
    """An ack racing the reaper on one lease (both drop it and give its reservation back,
    one of them finding the lease gone) must not free the claim's capacity twice."""
    from tierq.logic import leases

    tq = make_tq()
    tq.put_queue("twice", {"max_leased": 3})
    tq.enqueue("twice", [{"payload": i} for i in range(6)])
    held = tq.claim("twice", max=5)
    assert len(held) == 3
    assert len(tq.ack("twice", held[:1]).acked) == 1
    leases.free_reservations(tq.ctx, "twice", [held[0].lease_token])  # the late second
    assert limits.in_use(tq.ctx, "twice", limits.LEASES_POOL) == 2
    assert len(tq.claim("twice", max=5)) == 1
    assert tq.claim("twice", max=5) == []


def test_a_unit_named_twice_in_one_give_back_is_given_back_once(make_tq):
    """(Lease tokens are grouped as they come: a take named by as many units as it holds,
    one of them twice, is not a whole take given back.)"""
    tq = make_tq()
    held = limits.take(tq.ctx, "d", "leases", limit=5, want=2, hold_seconds=60, holder="d~")
    assert held.count == 2
    token = "tenant~d~1~1"  # a lease token of the claim "d", attempt 1, its first unit
    assert tq.ctx.warm.return_capacity("d", "leases", [token, token], tokens=True) == 1
    assert limits.in_use(tq.ctx, "d", "leases") == 1
