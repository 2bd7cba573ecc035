"""One round trip per typed script call (dal/lua_calls.py): each scenario sends its call
with values the script's effect shows (a worker's name in the claim's record, a lease's
deadline, a ledger's bound) and checks every field of the parsed reply. Run on a single
Valkey (tests/integration/test_lua_round_trip.py) and on a cluster
(tests/cluster/test_lua_round_trip_on_cluster.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from tierq.core.ordering import place
from tierq.dal.lua_calls import (
    CALLS,
    Claim,
    ClaimReply,
    ClaimTake,
    LeaseDrop,
    LeaseExpired,
    LeaseExtend,
    LeaseIndex,
    LedgerReply,
    LuaCall,
    Missing,
    PushReady,
    PushReply,
    ReleaseLeases,
    Remove,
    RunningLease,
    RunningPage,
    UpdateReady,
    WarmLedger,
    wire_float,
)
from tierq.dal.warm_tier import PairKeys, QueueKeys, TenantKeys, WarmTier, lease_member

R = TypeVar("R")
NOW = 1_000_000
LEASE = 5_000
TENANT = "t1"
PREFIX = "t1~abc~"


def run(warm: WarmTier, call: LuaCall[R]) -> R:
    """The call, after checking it has the shape its class declares."""
    keys, args = call.build()
    extra = call.extra() is not None
    assert len(keys) == len(call.KEYS) + (len(call.EXTRA_KEYS) if extra else 0)
    fixed = len(call.ARGS) + (len(call.EXTRA_ARGS) if extra else 0)
    assert len(args) == fixed + len(call.ITEM) * len(call.items)
    return warm.call(call)


def new_pair(valkey: Any) -> tuple[str, PairKeys]:
    """A pair of a new queue, in warm mode (as its first admission leaves it)."""
    queue = f"rt{uuid.uuid4().hex[:8]}"
    k = PairKeys.of(queue, TENANT)
    valkey.hset(k.meta, "mode", "warm")
    return queue, k


def indexed(warm: WarmTier, k: PairKeys) -> None:
    """The pair's lease index completed (a slice at a time)."""
    for _ in range(10):
        if run(warm, LeaseIndex(k, 10)):
            return
    raise AssertionError("the lease index did not complete in ten slices")


def ids(n: int) -> list[str]:
    return [str(uuid.UUID(int=i + 1)) for i in range(n)]


def push(warm: WarmTier, k: PairKeys, task_ids: list[str], **fixed: Any) -> PushReply:
    values: dict[str, Any] = dict(warm_max=100, kind="restore", now_ms=NOW, token="adm",
                                  warm_max_bytes=10**6, since_ms=NOW, bound="", grant=0,
                                  charge=0, keep=0)
    values.update(fixed)
    items = [(*place(0, i + 1, task_id), task_id, f'0|{{"e":0,"p":{i}}}')
             for i, task_id in enumerate(task_ids)]
    return run(warm, PushReady(k, items=items, **values))


def claim(warm: WarmTier, k: PairKeys, n: int, **more: Any) -> ClaimReply:
    return run(warm, Claim(k, n, NOW, LEASE, PREFIX, "w9", **more))


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- the scenarios, one per call class ------------------------------------------------------


def claim_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(3)
    push(warm, k, task_ids)
    out = claim(warm, k, 2, first_k=4)
    assert (out.left, out.mode, out.retry_after_ms, out.granted) == (1, "warm", 0, -1)
    assert [(text(i), a, text(t), text(j)) for i, a, t, j in out.claimed] == [
        (task_ids[0], 1, f"{PREFIX}1~5", '{"e":0,"p":0}'),
        (task_ids[1], 1, f"{PREFIX}1~6", '{"e":0,"p":1}')]
    assert valkey.zscore(k.leased, lease_member(task_ids[0], f"{PREFIX}1~5")) == NOW + LEASE
    assert text(valkey.hget(k.claims, PREFIX)) == f"{NOW}|w9"
    # the tenant's limits: two leases held of at most two, then a bucket with no token
    capped = claim(warm, k, 1, tenant_max_leased=2)
    assert (capped.claimed, capped.left) == ([], 1) and capped.retry_after_ms > 0
    valkey.hset(k.bucket, mapping={"tokens": 0, "at": 10**18})
    rated = claim(warm, k, 1, tenant_rate=(0.5, 1))
    assert rated.claimed == [] and rated.retry_after_ms > 0
    if warm.single_server:  # the queue-wide take rides in the claim on one server only
        queue, q = new_pair(valkey)
        push(warm, q, ids(2))
        take = ClaimTake(QueueKeys.held(queue, "leases"), QueueKeys.counts(queue, "leases"),
                         QueueKeys.of(queue).bucket, 5, "h~", 1, wire_float(0.0), 0, 1)
        taken = claim(warm, q, 2, take=take)
        assert taken.granted == 1 and len(taken.claimed) == 1 and taken.retry_after_ms > 0


def push_ready_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(3)
    out = push(warm, k, task_ids, warm_max=2, kind="new")
    assert (out.mode, out.refused, out.given_back, out.short) == ("cold", task_ids[2:], 0, 0)
    assert [text(m) for m in valkey.zrange(k.ready, 0, -1)] == task_ids[:2]
    _, other = new_pair(valkey)
    asked = push(warm, other, task_ids, bound="ask", charge=1000)
    assert (asked.mode, asked.refused, asked.given_back) == ("allot", [], 0)
    assert asked.short >= 3000 and valkey.zcard(other.ready) == 0
    kept = push(warm, other, task_ids, bound="strict", grant=10**6, charge=10, keep=100)
    assert (kept.mode, kept.refused, kept.short) == ("warm", [], 0)
    assert kept.given_back == 10**6 - kept_usage(valkey, other, 10) - 100
    valkey.hset(other.meta, "fence", NOW + 1)
    late = push(warm, other, ids(1), since_ms=NOW)
    assert (late.mode, late.refused, late.given_back, late.short) == ("late", [], 0, 0)


def kept_usage(valkey: Any, k: PairKeys, charge: int) -> int:
    return int(valkey.hget(k.meta, "bytes")) + charge * valkey.zcard(k.ready)


def update_ready_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(2)
    push(warm, k, task_ids[:1])
    at = place(3, 1, task_ids[0])
    found = run(warm, UpdateReady(k, 10**6, [(at.member, at.score, b'0|{"e":0,"p":"new"}'),
                                             (task_ids[1], 1, b"0|{}")]))
    assert found == 1
    assert valkey.hget(k.data, task_ids[0]) == b'0|{"e":0,"p":"new"}'
    assert valkey.zscore(k.ready, at.member) == at.score
    assert not valkey.hexists(k.data, task_ids[1])


def claimed_members(out: ClaimReply) -> list[str]:
    return [lease_member(text(i), text(t)) for i, _, t, _ in out.claimed]


def lease_drop_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(3))
    members = claimed_members(claim(warm, k, 2))
    assert run(warm, LeaseDrop(k, [*members, "gone|t1~x~1~1"])) == 2
    assert valkey.zcard(k.leased) == 0 and valkey.hlen(k.lease_of) == 0
    assert valkey.hlen(k.claims) == 0 and valkey.zcard(k.started) == 0


def release_leases_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(2))
    members = claimed_members(claim(warm, k, 2))
    valkey.zadd(k.leased, {members[1]: NOW})  # its deadline passed: not taken back
    assert run(warm, ReleaseLeases(k, NOW + 1, members)) == members[:1]
    assert text(valkey.hget(k.lease_of, members[0].partition("|")[0])) == f"~r{NOW + 1}"


def lease_extend_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(1))
    member = claimed_members(claim(warm, k, 1))[0]
    out = run(warm, LeaseExtend(k, NOW + 10, [(member, 7_000), ("gone|t1~x~1~1", 7_000)]))
    assert out == [NOW + 10 + 7_000, 0]
    assert valkey.zscore(k.leased, member) == NOW + 10 + 7_000


def lease_expired_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(2)
    push(warm, k, task_ids)
    claim(warm, k, 2)
    out = run(warm, LeaseExpired(k, NOW + LEASE, 1))
    assert out == [(task_ids[0], f"{PREFIX}1~1", 1)]
    assert valkey.zscore(k.leased, lease_member(task_ids[0], f"{PREFIX}1~1")) == 0


def lease_index_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(2))
    members = claimed_members(claim(warm, k, 2))
    valkey.delete(k.lease_of)  # leases as a tierq that kept no index left them
    valkey.hdel(k.claims, f"{PREFIX}#")
    assert run(warm, LeaseIndex(k, 1)) is False  # one slice of one lease: not done
    indexed(warm, k)
    assert valkey.hget(k.meta, "leases_indexed") == b"1"
    assert {text(v) for v in valkey.hvals(k.lease_of)} == {m.partition("|")[2] for m in members}


def running_page_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(2)
    push(warm, k, task_ids)
    claim(warm, k, 2)
    first, after = run(warm, RunningPage(k, None, 1, 5))
    assert first == [RunningLease(task_ids[0], f"{PREFIX}1~1", NOW + LEASE, NOW, f"{NOW}|w9")]
    assert after == (NOW, task_ids[0])
    rest, end = run(warm, RunningPage(k, after, 5, 10))
    assert [lease.id for lease in rest] == task_ids[1:] and end is None


def missing_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(3)
    assert run(warm, Missing(k, NOW, "", task_ids)) is None  # no lease index yet
    push(warm, k, task_ids[:2])
    claim(warm, k, 1)
    indexed(warm, k)
    assert run(warm, Missing(k, NOW + 7, "c1", task_ids)) == task_ids[2:]
    assert valkey.hmget(k.meta, "fence", "reconcile_after") == [str(NOW + 7).encode(), b"c1"]
    assert run(warm, Missing(k, NOW, "0", [])) == []
    assert valkey.hget(k.meta, "reconcile_after") is None


def remove_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(3)
    push(warm, k, task_ids)
    claim(warm, k, 1)
    removed = run(warm, Remove(k, [place(0, i + 1, t).member for i, t in enumerate(task_ids[:2])]))
    assert removed == 2
    assert valkey.zcard(k.leased) == 0 and valkey.zcard(k.ready) == 1


def warm_ledger_scenario(warm: WarmTier, valkey: Any) -> None:
    tenant = f"rt{uuid.uuid4().hex[:8]}"
    ledger = TenantKeys.of(tenant)
    assert run(warm, WarmLedger(ledger, "take", "q1", 100, 150, NOW, 0, 0)) == LedgerReply(
        100, 100)
    assert run(warm, WarmLedger(ledger, "take", "q2", 100, 150, NOW, 0, 0)) == LedgerReply(
        50, 150)
    # q1's last grant is older than the quiet time: set to its own figure
    assert run(warm, WarmLedger(ledger, "set", "q1", 30, 0, NOW + 10, 5, 0)) == LedgerReply(
        30, 80)
    # within the quiet time, only lowered by what was freed
    assert run(warm, WarmLedger(ledger, "set", "q2", 0, 0, NOW + 1, 5, 20)) == LedgerReply(
        30, 60)
    assert text(valkey.hget(ledger.warm, "~total")) == "60"


SCENARIOS: dict[type[LuaCall[Any]], Callable[[WarmTier, Any], None]] = {
    Claim: claim_scenario,
    PushReady: push_ready_scenario,
    UpdateReady: update_ready_scenario,
    LeaseDrop: lease_drop_scenario,
    ReleaseLeases: release_leases_scenario,
    LeaseExtend: lease_extend_scenario,
    LeaseExpired: lease_expired_scenario,
    LeaseIndex: lease_index_scenario,
    RunningPage: running_page_scenario,
    Missing: missing_scenario,
    Remove: remove_scenario,
    WarmLedger: warm_ledger_scenario,
}
assert set(SCENARIOS) == set(CALLS), "every typed call has a round-trip scenario"
