"""One round trip per typed script call (dal/lua_calls.py): each scenario sends its call
with values the script's effect shows (a worker's name in the claim's record, a lease's
deadline, a ledger's bound) and checks every field of the parsed reply. Run on a single
Valkey (tests/integration/test_lua_round_trip.py) and on a cluster
(tests/cluster/test_lua_round_trip_on_cluster.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import redis

from tierq.core.ordering import SPLIT, place
from tierq.dal.lua_calls import (
    CALLS,
    AckCheckJoin,
    AckLook,
    AckPass,
    AdmissionBegin,
    AdmissionEnd,
    AdmissionMode,
    AllotShrink,
    CapacityExtend,
    CapacityFree,
    CapacityReply,
    CapacityUse,
    Claim,
    ClaimReply,
    ClaimTake,
    ColdReply,
    GoCold,
    IdempotencyAbandon,
    IdempotencyClaim,
    IdempotencyFinish,
    LapseIndex,
    LeaseCheck,
    LeaseDrop,
    LeaseExpired,
    LeaseExtend,
    LeaseIndex,
    LeaseOf,
    LeaseOfReply,
    LeaseProgress,
    LedgerReply,
    LongPolls,
    LuaCall,
    Missing,
    ModeReply,
    PairSweep,
    PollKey,
    PoolKeys,
    PushReady,
    PushReply,
    QueueCapacity,
    RateAdd,
    RateKey,
    RateTenants,
    ReadyTenantsNote,
    RecordClaim,
    RecordKey,
    ReleaseLeases,
    Remove,
    Removed,
    RemoveReady,
    ReplaceCold,
    RunningLease,
    RunningPage,
    StatsReply,
    SweepReply,
    TaskFinished,
    TaskWait,
    TenantRequests,
    TenantsKey,
    TierStats,
    UpdateReady,
    UpdateReply,
    UseCounts,
    UseKeys,
    WarmLedger,
    wire_float,
)
from tierq.dal.throughput import rate_key, tenants_key
from tierq.dal.warm_tier import (
    GONE_CHARGE,
    MARKER_CHARGE,
    NEWER_CHARGE,
    AckMail,
    PairKeys,
    QueueKeys,
    TenantKeys,
    WarmTier,
    lease_member,
)
from tierq.logic.idempotency import valkey_key

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
    assert len(args) == fixed + (1 if call.GROUPED else len(call.ITEM)) * len(call.items)
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
    items = [(task_id, place(0, i + 1, task_id), f'0|{{"e":0,"p":{i}}}')
             for i, task_id in enumerate(task_ids)]
    return run(warm, PushReady(k, items=items, **values))


def claim(warm: WarmTier, k: PairKeys, n: int, prefix: str = PREFIX, **more: Any
          ) -> ClaimReply:
    return run(warm, Claim(k, n, NOW, LEASE, prefix, "w9", **more))


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
    assert valkey.zcard(k.limits) == 0  # (no task of the claim has a time limit)
    # the same call again (its reply lost, sent once more) pops nothing: it answers the
    # first run's leases
    again = claim(warm, k, 2, first_k=4)
    assert (again.left, again.mode, again.claimed, again.retry_after_ms, again.granted) == (
        1, "repeat", [], 0, -1)
    assert sorted(again.repeated) == [(task_ids[0], f"{PREFIX}1~5"),
                                      (task_ids[1], f"{PREFIX}1~6")]
    assert valkey.zcard(k.leased) == 2 and valkey.zcard(k.ready) == 1
    # time limits: the queue's (timeout_seconds) or the task's own "to", found however the
    # payload or the trace after it reads; a lease ends at its limit when that comes first
    _, t = new_pair(valkey)
    blobs = ['0|{"e":0,"p":{"to":1},"c":5}',                    # the queue's: 2 s
             '0|{"e":0,"p":0,"c":5,"to":1}',                    # its own: 1 s
             '0|{"e":0,"p":0,"c":5,"to":9,"tr":{"tracestate":"a,\\"tr\\":{"}}',
             '0|{"e":0,"p":{"x":1,"to":1,"tr":{}},"c":5,"tr":{"tracestate":"b"}}']
    limited = ids(4)
    run(warm, PushReady(t, items=[(task_id, place(0, i + 1, task_id), blob) for i, (task_id, blob)
                                  in enumerate(zip(limited, blobs, strict=True))],
                        warm_max=100, kind="restore", now_ms=NOW, token="adm",
                        warm_max_bytes=10**6, since_ms=NOW, bound="", grant=0, charge=0,
                        keep=0))
    timed = claim(warm, t, 4, timeout_seconds=2)
    members = claimed_members(timed)
    assert [valkey.zscore(t.limits, m) for m in members] == [
        NOW + 2000, NOW + 1000, NOW + 9000, NOW + 2000]
    assert [valkey.zscore(t.leased, m) for m in members] == [
        NOW + 2000, NOW + 1000, NOW + LEASE, NOW + 2000]
    # the leases' places are numbered on across tens and hundreds (claim.lua writes the
    # tens once per ten leases)
    _, n = new_pair(valkey)
    many = ids(14)
    push(warm, n, many)
    first = claim(warm, n, 3, first_k=8)
    rest = claim(warm, n, 11, first_k=95)
    assert [text(t) for _, _, t, _ in first.claimed + rest.claimed] == [
        f"{PREFIX}1~{place}" for place in [9, 10, 11, *range(96, 107)]]
    assert [text(i) for i, _, _, _ in first.claimed + rest.claimed] == many
    assert rest.left == 0 and valkey.zcard(n.ready) == 0 and valkey.zcard(n.leased) == 14
    # a later pop of the same claim numbers past the leases before it, so it was no repeat;
    # its own repeat answers its leases alone
    assert sorted(claim(warm, n, 11, first_k=95).repeated) == sorted(
        (text(i), text(t)) for i, _, t, _ in rest.claimed)
    # the tenant's limits: two leases held of at most two, then a bucket with no token
    capped = claim(warm, k, 1, "t1~def~", tenant_max_leased=2)
    assert (capped.claimed, capped.left) == ([], 1) and capped.retry_after_ms > 0
    valkey.hset(k.bucket, mapping={"tokens": 0, "at": 10**18})
    rated = claim(warm, k, 1, "t1~ghi~", tenant_rate=(0.5, 1))
    assert rated.claimed == [] and rated.retry_after_ms > 0
    if warm.single_server:  # the queue-wide take rides in the claim on one server only
        queue, q = new_pair(valkey)
        push(warm, q, ids(2))
        take = ClaimTake(QueueKeys.held(queue, "leases"), QueueKeys.counts(queue, "leases"),
                         QueueKeys.of(queue).bucket, 5, "h~", 1, wire_float(0.0), 0, 1)
        taken = claim(warm, q, 2, take=take)
        assert taken.granted == 1 and len(taken.claimed) == 1 and taken.retry_after_ms > 0
        # its repeat answers the take's grant, as the pool's counts keep it, and takes
        # nothing more; under a rate alone no count is kept: -1
        again = claim(warm, q, 2, take=take)
        assert (again.mode, again.granted, len(again.repeated)) == ("repeat", 1, 1)
        assert text(valkey.hget(QueueKeys.counts(queue, "leases"), "h~")) == "1|1|"
        rated_take = ClaimTake(QueueKeys.held(queue, "leases"),
                               QueueKeys.counts(queue, "leases"), QueueKeys.of(queue).bucket,
                               5, "r~", 0, wire_float(1.0), 5, 1)
        by_rate = claim(warm, q, 1, "t1~rate~", take=rated_take)
        assert by_rate.granted == 5 and len(by_rate.claimed) == 1
        again = claim(warm, q, 1, "t1~rate~", take=rated_take)
        assert (again.mode, again.granted, len(again.repeated)) == ("repeat", -1, 1)


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
    assert kept.freed == kept.given_back == int(valkey.hget(other.meta, "freed"))
    assert kept.ready_before == 0
    again = push(warm, other, ids(1), bound="strict", charge=10, keep=100)
    assert (again.mode, again.given_back, again.freed, again.ready_before) == (
        "warm", 0, 0, 3)
    valkey.hset(other.meta, "fence", NOW + 1)
    late = push(warm, other, ids(1), since_ms=NOW)
    assert (late.mode, late.refused, late.given_back, late.short) == ("late", [], 0, 0)
    # tombstoned ids (a cancel's or delete's, lua/remove.lua) are left out, neither pushed
    # nor refused, whatever the kind
    for kind, mode in (("new", "cold"), ("restore", "warm")):
        _, third = new_pair(valkey)
        valkey.zadd(third.gone, {task_ids[0]: NOW + 1, task_ids[2]: NOW + 1})
        # (one task fits: without the tombstones the second and third were refused)
        out = push(warm, third, task_ids, warm_max=1, kind=kind)
        assert (out.mode, out.refused, out.gone) == (mode, [], 2), kind
        assert [text(m) for m in valkey.zrange(third.ready, 0, -1)] == task_ids[1:2]
        assert not valkey.hexists(third.data, task_ids[0])
        assert int(valkey.hget(third.meta, "bytes")) == valkey.hstrlen(third.data, task_ids[1])
    assert push(warm, other, ids(1)).gone == 0
    # a push drops the lapsed tombstones before it looks (the key with the last one)
    _, fourth = new_pair(valkey)
    valkey.zadd(fourth.gone, {task_ids[0]: NOW - 1})
    out = push(warm, fourth, task_ids[:1], now_ms=NOW)
    assert (out.refused, out.gone) == ([], 0) and not valkey.exists(fourth.gone)


def kept_usage(valkey: Any, k: PairKeys, charge: int) -> int:
    return int(valkey.hget(k.meta, "bytes")) + charge * valkey.zcard(k.ready)


def update_ready_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(2)
    push(warm, k, task_ids[:1])
    at = place(3, 1, task_ids[0])
    found = run(warm, UpdateReady(k, 10**6, items=[
        (at.member, at.score, b'0|{"e":0,"p":"new"}'), (task_ids[1], 1, b"0|{}")]))
    assert found == UpdateReply("ok", 1, made=True)
    assert valkey.hget(k.data, task_ids[0]) == b'0|{"e":0,"p":"new"}'
    assert valkey.zscore(k.ready, at.member) == at.score
    assert not valkey.hexists(k.data, task_ids[1])
    # (the task not waiting keeps a mark: no room for whole entries, newer_max_bytes 0)
    assert text(valkey.hget(k.newer, task_ids[1])) == f"1|{task_ids[1]}"
    # with a bound: growth past the allotment is asked for, then refused without a grant
    bigger = [(at.member, at.score, b'0|{"e":0,"p":"' + b"n" * 100 + b'"}')]
    grow = len(bigger[0][2]) - len(b'0|{"e":0,"p":"new"}')
    marks = int(valkey.hget(k.meta, "newer"))
    usage = kept_usage(valkey, k, 10) + marks
    valkey.hset(k.meta, "allot", usage)
    assert run(warm, UpdateReady(k, 10**6, "ask", 0, 10, items=bigger)) == UpdateReply(
        "allot", grow)
    assert run(warm, UpdateReady(k, 10**6, "strict", 50, 10, items=bigger)) == UpdateReply(
        "over", 0)
    assert int(valkey.hget(k.meta, "allot")) == usage + 50  # the grant is the pair's
    assert valkey.hget(k.data, task_ids[0]) == b'0|{"e":0,"p":"new"}'
    assert run(warm, UpdateReady(k, 10**6, "strict", 50, 10, items=bigger)) == UpdateReply("ok", 1)
    assert kept_usage(valkey, k, 10) + marks == usage + grow
    newer_entries_scenario(warm, valkey)


def newer_cost(entry: str | bytes) -> int:
    """What an entry of `newer` counts in the meta field `newer` (lua/newer_entries.lua)."""
    return len(entry) + NEWER_CHARGE


def newer_entries_scenario(warm: WarmTier, valkey: Any) -> None:
    """A replacement of a task not waiting is kept for its push (lua/update_ready.lua): a
    push of the same seq writes the entry's place and blob, one of a greater seq keeps its
    own (long-form places compare by seq too); a lapsed entry goes at the next push."""
    _, k = new_pair(valkey)
    a, b, c, d = ids(4)
    long_seq = SPLIT + 7  # a long-form place (core/ordering.py)
    entry = {a: place(2, 5, a), b: place(0, long_seq, b), c: place(0, 9, c)}
    assert run(warm, UpdateReady(k, 10**6, now_ms=NOW, ttl_ms=1000, newer_max_bytes=10**6,
                                 items=[(at.member, at.score, f'0|{{"e":0,"p":"{i}2"}}')
                                        for i, at in entry.items()])) == UpdateReply(
        "ok", 0, made=True)
    assert valkey.zcard(k.newer_at) == 3
    held = sum(newer_cost(valkey.hget(k.newer, i)) for i in entry)
    assert int(valkey.hget(k.meta, "newer")) == held  # (their bytes and charges)
    # pushes that read the tasks before the replace (a, b) and after a new readiness (c)
    read = {a: place(0, 5, a), b: place(0, long_seq, b), c: place(0, long_seq + 512, c)}
    values: dict[str, Any] = dict(warm_max=100, kind="restore", now_ms=NOW, token="adm",
                                  warm_max_bytes=10**6, since_ms=NOW, bound="", grant=0,
                                  charge=0, keep=0)
    run(warm, PushReady(k, items=[(i, at, f'0|{{"e":0,"p":"{i}1"}}')
                                  for i, at in read.items()], **values))
    # (a's place is the entry's: its priority's score)
    for at in (entry[a], entry[b], read[c]):
        assert valkey.zscore(k.ready, at.member) == at.score
    assert valkey.zcard(k.ready) == 3
    assert [valkey.hget(k.data, i) for i in (a, b, c)] == [
        f'0|{{"e":0,"p":"{a}2"}}'.encode(), f'0|{{"e":0,"p":"{b}2"}}'.encode(),
        f'0|{{"e":0,"p":"{c}1"}}'.encode()]
    assert not valkey.exists(k.newer) and not valkey.exists(k.newer_at)
    assert not valkey.hexists(k.meta, "newer")
    # an entry lapsed: gone at the next push (of any task)
    at = place(0, 3, d)
    assert run(warm, UpdateReady(k, 10**6, now_ms=NOW, ttl_ms=0, newer_max_bytes=10**6,
                                 items=[(at.member, at.score, "x")])).made
    assert valkey.hexists(k.newer, d)
    run(warm, PushReady(k, items=[(c, read[c], "y")], **{**values, "now_ms": NOW + 1}))
    assert not valkey.exists(k.newer) and not valkey.exists(k.newer_at)
    assert not valkey.hexists(k.meta, "newer")
    newer_bound_scenario(warm, valkey)
    newer_share_scenario(warm, valkey)


def newer_bound_scenario(warm: WarmTier, valkey: Any) -> None:
    """A pair keeps at most newer_max_bytes of whole entries (lua/newer_entries.lua): past
    them a replacement keeps a mark, which makes a push of the task refuse it (it waits
    cold, and its promotion reads the replaced row)."""
    _, k = new_pair(valkey)
    a, b = ids(2)
    at_a, at_b = place(0, 5, a), place(0, 6, b)
    mark_b = f"{at_b.score}|{at_b.member}"
    bound = newer_cost(f"{at_a.score} {at_a.member} " + "a" * 20) + newer_cost(mark_b)

    def replace(at: Any, blob: str, now_ms: int = NOW, ttl_ms: int = 1000) -> UpdateReply:
        return run(warm, UpdateReady(k, 10**6, now_ms=now_ms, ttl_ms=ttl_ms,
                                     newer_max_bytes=bound, items=[(at.member, at.score, blob)]))

    assert replace(at_a, "a" * 20).made  # fits
    assert replace(at_b, "b") == UpdateReply("ok", 0)  # past the bound: a mark
    assert text(valkey.hget(k.newer, b)) == mark_b
    assert int(valkey.hget(k.meta, "newer")) == bound
    replace(at_a, "a" * 10)  # a's own entry replaced: fits
    assert int(valkey.hget(k.meta, "newer")) == bound - 10
    replace(at_a, "a" * 30)  # too large: a keeps a mark
    assert text(valkey.hget(k.newer, a)) == f"{at_a.score}|{at_a.member}"
    assert int(valkey.hget(k.meta, "newer")) == 2 * newer_cost(mark_b)
    # a push of a marked task refuses it, and every later one; their marks go
    values: dict[str, Any] = dict(warm_max=100, kind="restore", now_ms=NOW, token="adm",
                                  warm_max_bytes=10**6, since_ms=NOW, bound="", grant=0,
                                  charge=0, keep=0)
    other = ids(3)[2]
    out = run(warm, PushReady(k, items=[(a, at_a, "old a"), (other, place(0, 7, other), "o")],
                              **values))
    assert (out.mode, out.refused) == ("cold", [a, other])
    assert not valkey.hexists(k.newer, a) and valkey.zcard(k.ready) == 0
    # a push of a later readiness (a greater seq) passes, and the mark goes unused
    later = place(0, 6 + 512, b)
    valkey.hset(k.meta, "mode", "warm")
    out = run(warm, PushReady(k, items=[(b, later, "b again")], **values))
    assert (out.mode, out.refused) == ("warm", []) and valkey.hget(k.data, b) == b"b again"
    assert not valkey.exists(k.newer) and not valkey.exists(k.newer_at)
    assert not valkey.hexists(k.meta, "newer")
    # an enqueue's own push ('new') of a marked task refuses it too
    _, fresh = new_pair(valkey)
    run(warm, UpdateReady(fresh, 10**6, now_ms=NOW, ttl_ms=1000, newer_max_bytes=0,
                          items=[(at_a.member, at_a.score, "new a")]))
    out = run(warm, PushReady(fresh, items=[(b, at_b, "b"), (a, at_a, "old a")],
                              **{**values, "kind": "new"}))
    assert (out.mode, out.refused) == ("cold", [a])
    assert valkey.hget(fresh.data, b) == b"b" and not valkey.exists(fresh.newer)
    # a lapsed entry goes at the next replace (it counts against the bound)
    replace(at_a, "a", ttl_ms=0)
    replace(place(0, 7, other), "o", now_ms=NOW + 1)
    assert not valkey.hexists(k.newer, a) and valkey.hexists(k.newer, other)
    assert int(valkey.hget(k.meta, "newer")) == newer_cost(valkey.hget(k.newer, other))


def newer_share_scenario(warm: WarmTier, valkey: Any) -> None:
    """The entries count against the pair's share of its tenant's bound
    (lua/warm_usage.lua): a replacement past the allotment is asked for; without a grant
    the tasks not waiting keep marks; a push that writes an entry counts its task's data in
    place of the entry."""
    _, k = new_pair(valkey)
    a, b = ids(2)
    push(warm, k, [a])
    at_a, at_b = place(0, 1, a), place(0, 9, b)
    usage = kept_usage(valkey, k, 10)
    valkey.hset(k.meta, "allot", usage)
    items = [(at_a.member, at_a.score, b'0|{"e":0,"p":0}'), (at_b.member, at_b.score, "B" * 50)]
    cost = newer_cost(f"{at_b.score} {at_b.member} " + "B" * 50)
    share: dict[str, Any] = dict(charge=10, now_ms=NOW, ttl_ms=1000, newer_max_bytes=10**6)
    assert run(warm, UpdateReady(k, 10**6, "ask", 0, items=items, **share)) == UpdateReply(
        "allot", cost)
    assert not valkey.exists(k.newer)
    # strict without the room: a (waiting) is replaced, b keeps a mark, counted
    assert run(warm, UpdateReady(k, 10**6, "strict", 0, items=items, **share)) == UpdateReply(
        "ok", 1, made=True)
    mark = f"{at_b.score}|{at_b.member}"
    assert text(valkey.hget(k.newer, b)) == mark
    assert int(valkey.hget(k.meta, "newer")) == newer_cost(mark)
    # with the room: b's whole entry
    run(warm, UpdateReady(k, 10**6, "strict", cost, items=items, **share))
    assert int(valkey.hget(k.meta, "newer")) == cost
    # a strict push that writes b's entry fits the allotment: b's data takes the entry's room
    allot = int(valkey.hget(k.meta, "allot"))
    values: dict[str, Any] = dict(warm_max=100, kind="restore", now_ms=NOW, token="adm",
                                  warm_max_bytes=10**6, since_ms=NOW, bound="strict",
                                  grant=0, charge=10, keep=10**6)
    asked = run(warm, PushReady(k, items=[(b, at_b, "old b")],
                                **{**values, "bound": "ask", "charge": 10**6}))
    assert asked.mode == "allot" and valkey.hexists(k.newer, b)  # (kept for the next try)
    out = run(warm, PushReady(k, items=[(b, at_b, "old b")], **values))
    assert (out.mode, out.refused) == ("warm", [])
    assert valkey.hget(k.data, b) == b"B" * 50 and int(valkey.hget(k.meta, "allot")) == allot
    assert not valkey.hexists(k.meta, "newer")
    # tombstones count too (GONE_CHARGE each): a strict push finds no room left
    valkey.zadd(k.gone, {"x1": NOW + 10, "x2": NOW + 10})
    valkey.hset(k.meta, "allot", kept_usage(valkey, k, 10) + 2 * GONE_CHARGE + 10)
    c = ids(3)[2]
    out = run(warm, PushReady(k, items=[(c, place(0, 10, c), "c")], **values))
    assert (out.mode, out.refused) == ("cold", [c])


def claimed_members(out: ClaimReply) -> list[str]:
    return [lease_member(text(i), text(t)) for i, _, t, _ in out.claimed]


def lease_check_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(3))
    members = claimed_members(claim(warm, k, 3))
    deadline = NOW + LEASE
    valkey.zadd(k.leased, {members[2]: NOW})  # its deadline passed: not held
    out = run(warm, LeaseCheck(k, NOW + 1, [*members, "gone|t1~x~1~1"]))
    assert out == [True, True, False, False]
    # the leases held are marked (half a millisecond on), the others left as they were
    assert [valkey.zscore(k.leased, m) for m in members] == [deadline + 0.5,
                                                              deadline + 0.5, NOW]
    assert not valkey.zscore(k.leased, "gone|t1~x~1~1")
    # a second check (a retried ack) still holds them and marks nothing twice
    assert run(warm, LeaseCheck(k, NOW + 2, members[:1])) == [True]
    assert valkey.zscore(k.leased, members[0]) == deadline + 0.5
    # a heartbeat keeps the mark; a release takes no marked lease
    assert run(warm, LeaseExtend(k, NOW + 3, [(members[0], 7_000)])) == [NOW + 3 + 7_000]
    assert valkey.zscore(k.leased, members[0]) == NOW + 3 + 7_000 + 0.5
    assert run(warm, ReleaseLeases(k, NOW + 4, members)) == []
    # a marked lease past its deadline is not held
    assert run(warm, LeaseCheck(k, NOW + LEASE + 1, members[1:2])) == [False]


def lease_drop_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(3))
    members = claimed_members(claim(warm, k, 2))
    assert run(warm, LeaseProgress(k, NOW, [(members[0], '{"done":1}')])) == ([1], 0)
    valkey.zadd(k.limits, {members[0]: NOW + 1})  # a time limit goes with its lease
    # replacements kept for both leased tasks (lua/update_ready.lua) and for the waiting one
    at = {task_id: place(0, i + 1, task_id) for i, task_id in enumerate(ids(3))}
    run(warm, UpdateReady(k, 10**6, now_ms=NOW, ttl_ms=1000, newer_max_bytes=10**6,
                          items=[(p.member, p.score, "new") for p in at.values()]))
    assert valkey.zcard(k.newer_at) == 2
    assert run(warm, LeaseDrop(k, [*members, "gone|t1~x~1~1"])) == 2
    assert valkey.zcard(k.leased) == 0 and valkey.hkeys(k.lease_of) == [b"~encoding"]
    assert valkey.zcard(k.limits) == 0
    assert valkey.hlen(k.claims) == 0 and valkey.zcard(k.started) == 0
    # the lease's progress went with it, and its bytes; so did the tasks' replacements
    assert valkey.hlen(k.progress) == 0 and int(valkey.hget(k.meta, "progress")) == 0
    assert not valkey.exists(k.newer) and not valkey.exists(k.newer_at)
    assert not valkey.hexists(k.meta, "newer")


def lease_progress_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(2))
    members = claimed_members(claim(warm, k, 2))
    valkey.zadd(k.leased, {members[1]: 0})  # the reaper is expiring it: no progress
    out = run(warm, LeaseProgress(k, NOW + 5, [(members[0], '{"n":1}'),
                                               (members[1], '"x"'), ("gone|t1~x~1~1", "1")]))
    assert out == ([1, 0, 0], 0)
    task_id, _, token = members[0].partition("|")
    kept = f'{token}|{NOW + 5}|{{"n":1}}'
    assert text(valkey.hget(k.progress, task_id)) == kept
    assert int(valkey.hget(k.meta, "progress")) == len(kept)
    # a later progress replaces it; the count follows the length
    assert run(warm, LeaseProgress(k, NOW + 6, [(members[0], '{"n":100}')])) == ([1], 0)
    assert int(valkey.hget(k.meta, "progress")) == len(kept) + 2
    # counted in the pair's usage of its tenant's share (nothing waits: no task bytes)
    valkey.hset(k.meta, "allot", 10**6)
    assert run(warm, AllotShrink(k, 0, 0))[1] == int(valkey.hget(k.meta, "progress"))
    # held to the pair's allotment (bound, grant, charge): usage = progress + 2 leases'
    # charge; 'ask' past it writes nothing and says how much is short
    usage = int(valkey.hget(k.meta, "progress")) + 2 * 100
    valkey.hset(k.meta, "allot", usage + 10)
    big = '"' + "p" * 50 + '"'
    grows = len(f'{token}|{NOW + 7}|{big}') - int(valkey.hget(k.meta, "progress"))
    assert run(warm, LeaseProgress(k, NOW + 7, [(members[0], big)], "ask", 0, 100)) \
        == ([], grows - 10)
    assert text(valkey.hget(k.progress, task_id)) != f'{token}|{NOW + 7}|{big}'
    # 'strict' without the grant refuses it (2); with it, the grant joins the allotment
    assert run(warm, LeaseProgress(k, NOW + 7, [(members[0], big)], "strict", 0, 100)) \
        == ([2], 0)
    assert run(warm, LeaseProgress(k, NOW + 7, [(members[0], big)], "strict", grows - 10,
                                   100)) == ([1], 0)
    assert int(valkey.hget(k.meta, "allot")) == usage + grows
    assert text(valkey.hget(k.progress, task_id)) == f'{token}|{NOW + 7}|{big}'
    # a progress that shrinks goes in whatever the allotment
    valkey.hset(k.meta, "allot", 0)
    assert run(warm, LeaseProgress(k, NOW + 8, [(members[0], "1")], "strict", 0, 100)) \
        == ([1], 0)
    # a lease named twice in one call: its last entry kept, and counted as stored
    valkey.hset(k.meta, "allot", 10**6)
    twice = [(members[0], "1"), (members[0], big)] * 3
    assert run(warm, LeaseProgress(k, NOW + 9, twice, "ask", 0, 100)) == ([1] * 6, 0)
    assert int(valkey.hget(k.meta, "progress")) == int(valkey.hstrlen(k.progress, task_id))


def release_leases_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(2))
    members = claimed_members(claim(warm, k, 2))
    valkey.zadd(k.leased, {members[1]: NOW})  # its deadline passed: not taken back
    run(warm, LeaseProgress(k, 0, [(members[0], "[1]")]))
    assert run(warm, ReleaseLeases(k, NOW + 1, members)) == members[:1]
    assert valkey.hlen(k.progress) == 0 and int(valkey.hget(k.meta, "progress")) == 0
    assert text(valkey.hget(k.lease_of, members[0].partition("|")[0])) == f"~r{NOW + 1}"


def lease_extend_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(1))
    member = claimed_members(claim(warm, k, 1))[0]
    out = run(warm, LeaseExtend(k, NOW + 10, [(member, 7_000), ("gone|t1~x~1~1", 7_000)]))
    assert out == [NOW + 10 + 7_000, 0]
    assert valkey.zscore(k.leased, member) == NOW + 10 + 7_000
    valkey.zadd(k.limits, {member: NOW + 9_000})  # its time limit: never extended past it
    assert run(warm, LeaseExtend(k, NOW + 20, [(member, 60_000)])) == [NOW + 9_000]


def lease_expired_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(2)
    push(warm, k, task_ids)
    members = claimed_members(claim(warm, k, 2))
    # the first ran out before its limit (an expiry: its limit goes), the second at it
    valkey.zadd(k.limits, {members[0]: NOW + LEASE + 1, members[1]: NOW + LEASE - 1})
    valkey.zadd(k.leased, {members[1]: NOW + LEASE - 1}, xx=True)
    out = run(warm, LeaseExpired(k, NOW + LEASE, 1))
    assert out == [(task_ids[1], f"{PREFIX}1~2", 1)]
    assert valkey.zscore(k.leased, members[1]) == 0
    out = run(warm, LeaseExpired(k, NOW + LEASE, 2))  # (the marked one first)
    assert out == [(task_ids[1], f"{PREFIX}1~2", 1), (task_ids[0], f"{PREFIX}1~1", 1)]
    assert valkey.zrange(k.limits, 0, -1) == [members[1].encode()]


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
    assert run(warm, Missing(k, NOW, "reconcile_after", "", task_ids)) is None  # (no index)
    push(warm, k, task_ids[:2])
    claim(warm, k, 1)
    indexed(warm, k)
    assert run(warm, Missing(k, NOW + 7, "reconcile_after", "c1", task_ids)) == task_ids[2:]
    assert valkey.hmget(k.meta, "fence", "reconcile_after") == [str(NOW + 7).encode(), b"c1"]
    assert run(warm, Missing(k, NOW, "members_after", "m1", [])) == []
    assert valkey.hmget(k.meta, "reconcile_after", "members_after") == [b"c1", b"m1"]
    assert run(warm, Missing(k, NOW, "reconcile_after", "0", [])) == []
    assert valkey.hmget(k.meta, "reconcile_after", "members_after") == [None, b"m1"]
    with pytest.raises(redis.ResponseError, match="no cursor field fence"):
        run(warm, Missing(k, NOW, "fence", "1", []))


def remove_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(3)
    push(warm, k, task_ids)
    member = claimed_members(claim(warm, k, 1))[0]
    run(warm, LeaseProgress(k, 0, [(member, '"half"')]))
    removed = run(warm, Remove(k, NOW, 60_000, 2, "1", [
        place(0, i + 1, t).member for i, t in enumerate(task_ids[:2])]))
    # the lease it ended is named, with the progress it kept (read before it went)
    task_id, token = member.split("|", 1)
    assert (removed.count, removed.made) == (2, True)  # (its `gone` made: the pair is noted)
    assert [(i, t, p.split("|")[2]) for i, t, p in removed.leases] == [
        (task_id, token, '"half"')]
    assert valkey.zcard(k.leased) == 0 and valkey.zcard(k.ready) == 1
    assert valkey.hlen(k.progress) == 0 and int(valkey.hget(k.meta, "progress")) == 0
    # both left tombstones scored by when they lapse (gone_ms + ttl_ms), on a key without a
    # TTL; past the cap the oldest go first
    assert valkey.zrange(k.gone, 0, -1, withscores=True) == [
        (task_ids[0].encode(), NOW + 60_000), (task_ids[1].encode(), NOW + 60_000)]
    assert valkey.pttl(k.gone) == -1
    assert not run(warm, Remove(k, NOW + 1, 60_000, 2, "1", [place(0, 3, task_ids[2]).member])
                   ).made
    assert valkey.zrange(k.gone, 0, -1, withscores=True) == [
        (task_ids[1].encode(), NOW + 60_000), (task_ids[2].encode(), NOW + 60_001)]
    # a removal without gone_ms (a replace into the future) leaves none; a later one drops
    # the lapsed ones
    _, other = new_pair(valkey)
    push(warm, other, task_ids[:1])
    assert run(warm, Remove(other, "", 0, 0, "1", [task_ids[0]])) == Removed(1, [], False)
    assert not valkey.exists(other.gone)
    run(warm, Remove(k, NOW + 60_001, 60_000, 2, "1", [task_ids[0]]))
    assert valkey.zrange(k.gone, 0, -1, withscores=True) == [
        (task_ids[2].encode(), NOW + 60_001), (task_ids[0].encode(), NOW + 120_001)]
    # waiting tasks only (leases '0'): a held task keeps its lease and its data; both ids
    # get their tombstones
    _, held = new_pair(valkey)
    two = ids(2)
    push(warm, held, two)
    lease = claimed_members(claim(warm, held, 1))[0]
    held_id = lease.split("|", 1)[0]
    waiting_id = next(t for t in two if t != held_id)
    held_data = valkey.hget(held.data, held_id)
    out = run(warm, Remove(held, NOW, 60_000, 10, "0", [
        place(0, i + 1, t).member for i, t in enumerate(two)]))
    assert (out.count, out.leases, out.made) == (1, [], True)
    assert valkey.zcard(held.ready) == 0 and valkey.zcard(held.leased) == 1
    assert valkey.hget(held.data, held_id) == held_data
    assert not valkey.hexists(held.data, waiting_id)
    assert valkey.zcard(held.gone) == 2


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
    # within the quiet time, only lowered by what the pair's count of bytes given back adds
    assert run(warm, WarmLedger(ledger, "set", "q2", 0, 0, NOW + 1, 5, 20)) == LedgerReply(
        30, 60)
    assert run(warm, WarmLedger(ledger, "set", "q2", "", 0, NOW + 1, 5, 20)) == LedgerReply(
        30, 60)
    assert text(valkey.hget(ledger.warm, "q2")) == f"30|{NOW}|20"
    assert run(warm, WarmLedger(ledger, "cancel", "q2", 10, 0, 0, 0, 0)) == LedgerReply(
        20, 50)
    assert text(valkey.hget(ledger.warm, "~total")) == "50"


def allot_shrink_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(2), bound="strict", grant=10**6, charge=10, keep=10**7)
    usage = kept_usage(valkey, k, 10)
    assert int(valkey.hget(k.meta, "allot")) == 10**6
    assert run(warm, AllotShrink(k, 10, 5)) == (10**6 - usage - 5, usage + 5,
                                                10**6 - usage - 5)
    assert int(valkey.hget(k.meta, "allot")) == usage + 5
    assert run(warm, AllotShrink(k, 10, 0)) == (5, usage, 10**6 - usage)
    # its tombstones and `newer` entries count too (lua/warm_usage.lua): nothing to give back
    valkey.zadd(k.gone, {"x": NOW})
    valkey.hset(k.meta, "newer", 100)
    valkey.hset(k.meta, "allot", usage + GONE_CHARGE + 100)
    assert run(warm, AllotShrink(k, 10, 0)) == (0, usage + GONE_CHARGE + 100, 10**6 - usage)


def admission_begin_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    assert run(warm, AdmissionBegin(k, NOW, "a1")) == "warm"
    assert valkey.zcard(k.inflight) == 0  # only a cold admission is in flight
    assert run(warm, AdmissionBegin(k, NOW + 1, "a2", force_cold=True)) == "cold"
    assert valkey.zscore(k.inflight, "a2") == NOW + 1
    assert text(valkey.hget(k.meta, "mode")) == "cold"
    # with the first task to push: a warm set that can take it stays warm and records
    # what the admission is about to push; one that cannot (its count, or its bytes, with
    # what others are about to push) turns cold and registers the admission
    _, k = new_pair(valkey)
    valkey.zadd(k.ready, {"t1": 1.0})
    valkey.hset(k.data, "t1", "x" * 100)
    valkey.hset(k.meta, "bytes", 100)
    assert run(warm, AdmissionBegin(k, NOW, "b1", False, 3, 400, 200, 1, 200, 1000)) == "warm"
    assert valkey.zcard(k.inflight) == 0
    assert text(valkey.hget(k.meta, "rsv:b1")) == f"{NOW}|1|200"
    epoch = int(valkey.hget(k.meta, "epoch") or 0)
    # 100 held + 200 coming + 101 > 400
    assert run(warm, AdmissionBegin(k, NOW, "b2", False, 3, 400, 101, 1, 101, 1000)) == "cold"
    assert text(valkey.hget(k.meta, "mode")) == "cold"
    assert int(valkey.hget(k.meta, "epoch")) == epoch + 1
    assert valkey.zscore(k.inflight, "b2") == NOW
    valkey.hset(k.meta, "mode", "warm")
    # 1 held + 1 coming: warm_max 2 reached
    assert run(warm, AdmissionBegin(k, NOW, "b3", False, 2, 10**6, 1, 1, 1, 1000)) == "cold"
    valkey.hset(k.meta, "mode", "warm")
    # a record older than stale_ms counts no more, and is dropped
    assert run(warm, AdmissionBegin(k, NOW + 1001, "b4", False, 2, 10**6, 1, 1, 1, 1000)) \
        == "warm"
    assert valkey.hget(k.meta, "rsv:b1") is None and valkey.hget(k.meta, "rsv:b4")
    # b4's push is taken though the pair turned cold meantime, and uses its record up
    valkey.hset(k.meta, "mode", "cold")
    out = push(warm, k, ids(1), kind="new", token="b4")
    assert (out.mode, out.refused) == ("cold", []) and valkey.zcard(k.ready) == 2
    assert valkey.hget(k.meta, "rsv:b4") is None
    # without a record, a push into a cold pair is refused
    assert push(warm, k, ids(2)[1:], kind="new", token="b5").refused == ids(2)[1:]


def go_cold_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    assert run(warm, GoCold(k, NOW, "a1")) == "cold"
    assert valkey.zscore(k.inflight, "a1") == NOW
    assert valkey.hmget(k.meta, "mode", "epoch") == [b"cold", b"1"]


def admission_end_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    run(warm, GoCold(k, NOW, "a1"))
    assert run(warm, AdmissionEnd(k, "a1")) == 1
    assert run(warm, AdmissionEnd(k, "a1")) == 0
    assert valkey.zcard(k.inflight) == 0
    valkey.hset(k.meta, "rsv:a2", f"{NOW}|1|10")  # (a record no push used up)
    assert run(warm, AdmissionEnd(k, "a2")) == 0
    assert valkey.hget(k.meta, "rsv:a2") is None


def admission_mode_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(1))
    run(warm, GoCold(k, NOW, "a1"))
    seen = run(warm, AdmissionMode(k, "observe", NOW + 1, 10_000, 100, "", 10**6))
    ready_bytes = int(valkey.hget(k.meta, "bytes"))
    assert seen == ModeReply("cold", "1", 1, 1, False, ready_bytes)
    # the admission in flight is stale after stale_ms: dropped, and the flip goes through
    flipped = run(warm, AdmissionMode(k, "flip", NOW + 20, 10, 100, "1", 10**6))
    assert flipped == ModeReply("warm", "1", 0, 1, True, ready_bytes)
    assert text(valkey.hget(k.meta, "mode")) == "warm"
    refused = run(warm, AdmissionMode(k, "flip", NOW + 20, 10, 1, "1", 10**6))
    assert refused.flipped is False and refused.mode == "warm"


def tier_stats_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    push(warm, k, ids(3))
    claim(warm, k, 1)
    assert run(warm, TierStats(k)) == StatsReply(2, 1, "warm", int(valkey.hget(k.meta, "bytes")))


def lease_of_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(2)
    push(warm, k, task_ids)
    claim(warm, k, 1)
    assert run(warm, LeaseOf(k, task_ids[0])) == LeaseOfReply(f"{PREFIX}1~1", NOW + LEASE,
                                                              f"{NOW}|w9")
    assert run(warm, LeaseOf(k, task_ids[1])) is None


def remove_ready_scenario(warm: WarmTier, valkey: Any) -> None:
    _, k = new_pair(valkey)
    task_ids = ids(3)
    push(warm, k, task_ids)
    claim(warm, k, 1)
    members = [place(0, i + 1, t).member for i, t in enumerate(task_ids)]
    assert run(warm, RemoveReady(k, members[:2])) == task_ids[1:2]  # the first is leased
    assert valkey.zcard(k.ready) == 1 and valkey.zcard(k.leased) == 1


def ready_tenants_note_scenario(warm: WarmTier, valkey: Any) -> None:
    index = QueueKeys.ready_tenants(f"rt{uuid.uuid4().hex[:8]}")
    assert run(warm, ReadyTenantsNote(Index(index), ["b", "a"])) == 2
    assert run(warm, ReadyTenantsNote(Index(index), ["a", "c"])) == 1
    assert valkey.zrange(index, 0, -1) == [b"a", b"b", b"c"]


@dataclass(frozen=True)
class Index:
    index: str


def replace_cold_scenario(warm: WarmTier, valkey: Any) -> None:
    """Replaced tasks the warm tier cannot keep go cold (lua/replace_cold.lua): a waiting
    one leaves the ready set, one not waiting keeps a mark that a push of it refuses."""
    _, k = new_pair(valkey)
    waiting, leased, on_its_way = ids(3)
    push(warm, k, [leased, waiting])  # (places 1 and 2)
    claim(warm, k, 1)  # leased is the first in line
    places = [place(0, 2, waiting), place(0, 1, leased), place(0, 3, on_its_way)]
    out = run(warm, ReplaceCold(k, NOW, 1000, [(at.member, at.score) for at in places]))
    assert out == ColdReply([waiting], True)
    assert valkey.zcard(k.ready) == 0 and not valkey.hexists(k.data, waiting)
    assert int(valkey.hget(k.meta, "bytes")) == 0 and valkey.zcard(k.leased) == 1
    marks = {leased: place(0, 1, leased), on_its_way: place(0, 3, on_its_way)}
    for task_id, at in marks.items():
        assert text(valkey.hget(k.newer, task_id)) == f"{at.score}|{at.member}"
        assert valkey.zscore(k.newer_at, task_id) == NOW + 1000
    assert int(valkey.hget(k.meta, "newer")) == sum(
        newer_cost(f"{at.score}|{at.member}") for at in marks.values())
    # the push on its way is refused: its task waits cold, read again when promoted
    pushed = push(warm, k, [on_its_way], now_ms=NOW)
    assert pushed.refused == [on_its_way] and not valkey.hexists(k.newer, on_its_way)
    assert run(warm, ReplaceCold(k, NOW, 1000, [(places[1].member, places[1].score)])
               ) == ColdReply([], False)


def pair_sweep_scenario(warm: WarmTier, valkey: Any) -> None:
    """The reaper's sweep of a pair (lua/pair_sweep.lua): lapsed `newer` entries (at most
    the limit a call) and tombstones go; the first lapse left is answered."""
    _, k = new_pair(valkey)
    a, b, c = ids(3)
    for task_id, ttl in ((a, 0), (b, 0), (c, 100)):
        at = place(0, 1, task_id)
        run(warm, UpdateReady(k, 10**6, now_ms=NOW - 1, ttl_ms=ttl, newer_max_bytes=10**6,
                              items=[(at.member, at.score, "x")]))
    valkey.zadd(k.gone, {"g1": NOW - 1, "g2": NOW + 50})
    valkey.hset(k.newer, "~bytes", 10)  # (a count an older tierq kept in the key)
    assert run(warm, PairSweep(k, NOW, 1)) == SweepReply(NOW - 1, True)
    assert valkey.zcard(k.newer_at) == 2 and valkey.zrange(k.gone, 0, -1) == [b"g2"]
    assert run(warm, PairSweep(k, NOW, 10)) == SweepReply(NOW + 50, False)
    assert int(valkey.hget(k.meta, "newer")) == newer_cost(valkey.hget(k.newer, c))
    assert run(warm, PairSweep(k, NOW + 200, 10)) == SweepReply(0, False)
    assert not any(valkey.exists(key) for key in (k.newer, k.newer_at, k.gone))
    assert not valkey.hexists(k.meta, "newer")


def lapse_index_scenario(warm: WarmTier, valkey: Any) -> None:
    """The index of lapses (lua/lapse_index.lua): a note enters a pair or raises it; a
    sweep's move or removal applies only while the score is the one it read."""
    index = Index(f"tq:{{~}}:lapses-{uuid.uuid4().hex[:8]}")
    assert run(warm, LapseIndex(index, [("q|t", "", 100), ("r|t", "", 300)])) == 2
    assert run(warm, LapseIndex(index, [("q|t", "", 50)])) == 0  # (raised, never lowered)
    assert run(warm, LapseIndex(index, [("q|t", 99, 200), ("r|t", 300, "")])) == 1
    assert valkey.zrange(index.index, 0, -1, withscores=True) == [(b"q|t", 100)]
    assert run(warm, LapseIndex(index, [("q|t", 100, 200)])) == 1
    assert valkey.zscore(index.index, "q|t") == 200


def pool_of(queue: str) -> PoolKeys:
    return PoolKeys(QueueKeys.held(queue, "leases"), QueueKeys.counts(queue, "leases"),
                    QueueKeys.of(queue).bucket)


def queue_capacity_scenario(warm: WarmTier, valkey: Any) -> None:
    keys = pool_of(f"rt{uuid.uuid4().hex[:8]}")
    taken = run(warm, QueueCapacity(keys, 5, NOW, NOW + LEASE, "h~", 3, None))
    assert taken == CapacityReply(3, taken.retry_after_ms, 3) and taken.retry_after_ms > 0
    assert valkey.zscore(keys.pool, "h~") == NOW + LEASE
    # give back what the take did not use: its units past the first one
    back = run(warm, QueueCapacity(keys, 0, NOW, NOW + LEASE, "h~", 3, None, 0, 1))
    assert (back.taken, back.held) == (0, 1)
    rated = run(warm, QueueCapacity(keys, 5, NOW, NOW + LEASE, "r~", 0, (1.0, 2)))
    assert (rated.taken, rated.held) == (2, 0) and rated.retry_after_ms > 0


def capacity_free_scenario(warm: WarmTier, valkey: Any) -> None:
    keys = pool_of(f"rt{uuid.uuid4().hex[:8]}")
    run(warm, QueueCapacity(keys, 3, NOW, NOW + LEASE, "h~", 10, None))
    assert run(warm, CapacityFree(keys, ["h~", 2, 1, 3])) == 2
    assert run(warm, CapacityFree(keys, ["h~", 2, 1, 2])) == 1  # unit 1 went back already
    assert not valkey.exists(keys.pool) or valkey.zcard(keys.pool) == 0


def capacity_extend_scenario(warm: WarmTier, valkey: Any) -> None:
    keys = pool_of(f"rt{uuid.uuid4().hex[:8]}")
    run(warm, QueueCapacity(keys, 2, NOW, NOW + LEASE, "h~", 10, None))
    out = run(warm, CapacityExtend(keys, NOW + 1, ["h~", NOW + 9_000, 2, 1, 2,
                                                   "x~", NOW + 9_000, 1, 1]))
    assert out == [NOW + 9_000, NOW + 9_000, 0]
    assert valkey.zscore(keys.pool, "h~") == NOW + 9_000


def capacity_use_scenario(warm: WarmTier, valkey: Any) -> None:
    keys = pool_of(f"rt{uuid.uuid4().hex[:8]}")
    run(warm, QueueCapacity(keys, 2, NOW, NOW + LEASE, "h~", 10, None))
    use = UseKeys(keys.pool, keys.bucket)
    assert run(warm, CapacityUse(use, NOW + 1, None, UseCounts(keys.counts))) == (2, None)
    assert run(warm, CapacityUse(use, NOW + LEASE, None, UseCounts(keys.counts))) == (0, None)
    _, k = new_pair(valkey)
    push(warm, k, ids(1))
    claim(warm, k, 1)
    held, tokens = run(warm, CapacityUse(UseKeys(k.leased, k.bucket), NOW + 1, (1.0, 7)))
    assert held == 1 and tokens == 7.0  # a missing bucket is full


def tenant_requests_scenario(warm: WarmTier, valkey: Any) -> None:
    keys = TenantKeys.of(f"rt{uuid.uuid4().hex[:8]}")
    assert run(warm, TenantRequests(keys, 0.5, 2)) == 0
    assert run(warm, TenantRequests(keys, 0.5, 2)) == 0
    retry = run(warm, TenantRequests(keys, 0.5, 2))
    assert 0 < retry <= 2_000
    assert 0 < valkey.pttl(keys.requests) <= 2 * 2_000 + 1_000


def long_polls_scenario(warm: WarmTier, valkey: Any) -> None:
    key = TenantKeys.of(f"rt{uuid.uuid4().hex[:8]}").polls
    assert run(warm, LongPolls(PollKey(key), 1, "p1", 30_000)) is True
    assert run(warm, LongPolls(PollKey(key), 1, "p2", 30_000)) is False
    assert valkey.zrange(key, 0, -1) == [b"p1"] and 0 < valkey.pttl(key) <= 30_000


def task_finished_scenario(warm: WarmTier, valkey: Any) -> None:
    queue = f"rt{uuid.uuid4().hex[:8]}"
    k = PairKeys.of(queue, TENANT)
    waited, other, third = ids(3)
    with warm.finished_channel(queue, TENANT, waited) as receive, \
            warm.finished_channel(queue, TENANT, other) as unregistered:
        # subscribed but not registered: no message at all
        assert run(warm, TaskFinished(k, 60_000, 4, 0, [(other, "dead", 1)])) == 0
        assert unregistered(0.3) is None
        valkey.hset(k.waiters, waited, 1)
        # (SPUBLISH from the script, on the pair's own channel: one waiter reached)
        assert run(warm, TaskFinished(k, 60_000, 4, 0, [(waited, "done", 2)])) == 1
        assert receive(5).startswith("done|2|")  # (the message: its marker)
    assert valkey.exists(k.waiters) == 0  # (told: its registration went)
    state, attempt, ms = valkey.hget(k.finished, waited).decode().split("|")
    assert (state, attempt) == ("done", "2") and abs(int(ms) / 1000 - valkey.time()[0]) < 2
    started = int(valkey.hget(k.finished, "@started"))
    assert abs(started / 1000 - valkey.time()[0]) < 2
    assert 0 < valkey.pttl(k.finished) <= 120_000  # (2 TTL after the generation began)
    # a cap of 4 is two generations of 2: a third marker starts a new one
    assert run(warm, TaskFinished(k, 60_000, 4, 0, [(third, "done", 1)])) == 0
    own = {b"@started", b"~encoding"}
    assert set(valkey.hkeys(k.finished)) == {third.encode()} | own
    assert set(valkey.hkeys(k.finished_prev)) == {waited.encode(), other.encode()} | own
    assert 0 < valkey.pttl(k.finished_prev) <= 120_000
    # a hash of the old layout (no '@started') becomes the previous generation
    old = PairKeys.of(f"rt{uuid.uuid4().hex[:8]}", TENANT)
    valkey.hset(old.finished, waited, "done|1|5")
    run(warm, TaskFinished(old, 60_000, 4, 0, [(other, "done", 1)]))
    assert valkey.hget(old.finished_prev, waited) == b"done|1|5"
    assert valkey.hexists(old.finished, other) and valkey.hexists(old.finished, "@started")
    markers_under_a_bound(warm, valkey)


def markers(valkey: Any, k: PairKeys) -> set[str]:
    """The pair's completion markers, both generations."""
    own = {"@started", "~encoding"}
    return {f.decode() for key in (k.finished, k.finished_prev)
            for f in valkey.hkeys(key)} - own


def markers_under_a_bound(warm: WarmTier, valkey: Any) -> None:
    """Under a tenant's bound (a charge given) a pair's generations of markers keep to the
    room its allotment leaves beside its usage (at least MARKERS_KEPT_AT_LEAST, and each
    call's own markers); they count in its usage, and give way to its tasks."""
    queue = f"rt{uuid.uuid4().hex[:8]}"
    k = PairKeys.of(queue, TENANT)
    done = [(i, "done", 1) for i in ids(1_000)]
    names = [i for i, _, _ in done]
    valkey.hset(k.meta, "allot", 200 * MARKER_CHARGE)  # (nothing else held: room for 200)
    run(warm, TaskFinished(k, 60_000, 10_000, 640, done[:500]))
    assert markers(valkey, k) == set(names[:500])  # (a call's own: kept whatever the room)
    run(warm, TaskFinished(k, 60_000, 10_000, 640, done[500:650]))
    assert markers(valkey, k) == set(names[500:650])  # (the older generation went early)
    run(warm, TaskFinished(k, 60_000, 10_000, 640, done[650:700]))
    assert markers(valkey, k) == set(names[500:700])  # (within the room: both kept)
    assert warm.pair_usage(queue, TENANT, charge=640) == (
        200 * MARKER_CHARGE, 200 * MARKER_CHARGE, 200 * MARKER_CHARGE)
    # the room taken by a task waiting: MARKERS_KEPT_AT_LEAST at most
    valkey.zadd(k.ready, {"m": 0})
    valkey.hset(k.meta, "bytes", 200 * MARKER_CHARGE - 640)
    run(warm, TaskFinished(k, 60_000, 10_000, 640, done[700:710]))
    assert markers(valkey, k) == set(names[650:710])  # (60: both generations fit the floor)
    run(warm, TaskFinished(k, 60_000, 10_000, 640, done[710:720]))
    assert markers(valkey, k) == set(names[700:720])  # (70 would not: the older went)
    # the markers are part of the pair's usage; a reclaim (a shrink) with nothing else to
    # give back keeps them, one with room to give back drops them first
    usage = 200 * MARKER_CHARGE  # (the task's bytes and charge)
    assert warm.pair_usage(queue, TENANT, charge=640) == (
        usage + 20 * MARKER_CHARGE, 200 * MARKER_CHARGE, 20 * MARKER_CHARGE)
    assert run(warm, AllotShrink(k, 640, 0))[1] == usage and len(markers(valkey, k)) == 20
    valkey.hset(k.meta, "allot", 10**6)
    assert run(warm, AllotShrink(k, 640, 0))[1] == usage and markers(valkey, k) == set()
    # one task a call with no room (cancels of tasks that never went warm): the floor, and
    # the generations that go before their time are noted for waits
    floor = PairKeys.of(f"rt{uuid.uuid4().hex[:8]}", TENANT)
    for item in done[:70]:
        run(warm, TaskFinished(floor, 60_000, 10_000, 640, [item]))
    assert 32 < len(markers(valkey, floor)) <= 64 and names[69] in markers(valkey, floor)
    assert valkey.hexists(floor.meta, "markers_dropped")
    assert run(warm, TaskWait(floor, names[0], 0, 0)) == "~dropped"
    # no bound: the cap alone
    free = PairKeys.of(f"rt{uuid.uuid4().hex[:8]}", TENANT)
    run(warm, TaskFinished(free, 60_000, 10_000, 0, done))
    assert len(markers(valkey, free)) == 1_000
    markers_give_way_to_tasks(warm, valkey, done)


def markers_give_way_to_tasks(warm: WarmTier, valkey: Any,
                              done: list[tuple[str, str, int]]) -> None:
    """A push, or a heartbeat's progress, that the markers' room alone would refuse drops
    them instead, the older generation first; one refused for anything else drops none."""
    names = [i for i, _, _ in done]
    _, k = new_pair(valkey)

    def fill() -> None:
        valkey.hset(k.meta, "allot", 200 * MARKER_CHARGE)
        run(warm, TaskFinished(k, 60_000, 10_000, 640, done[:100]))
        run(warm, TaskFinished(k, 60_000, 10_000, 640, done[100:200]))
        assert len(markers(valkey, k)) == 200  # (the room, two generations)

    fill()
    [task] = ids(1)
    full = push(warm, k, [task], bound="ask", charge=640, kind="enqueue", warm_max=0)
    assert full.refused == [task] and len(markers(valkey, k)) == 200  # (its own bound)
    cold = push(warm, k, [task], bound="ask", charge=640, kind="enqueue")
    assert cold.refused == [task] and len(markers(valkey, k)) == 200  # (the cold mode)
    out = push(warm, k, [task], bound="ask", charge=10**6)  # (short with no marker too)
    assert out.mode == "allot" and len(markers(valkey, k)) == 200
    out = push(warm, k, [task], bound="strict", charge=10**6)  # (no drop would make room)
    assert out.refused == [task] and len(markers(valkey, k)) == 200
    assert not valkey.hexists(k.meta, "markers_dropped")
    out = push(warm, k, [task], bound="strict", charge=640)  # (a restore: room alone)
    assert out.refused == [] and valkey.zcard(k.ready) == 1
    # (the drop is noted: a wait that finds no marker reads its row again)
    assert valkey.hexists(k.meta, "markers_dropped")
    assert run(warm, TaskWait(k, names[0], 0, 0)) == "~dropped"
    assert run(warm, TaskWait(k, names[150], 0, 0)).startswith("done|1|")
    assert markers(valkey, k) == set(names[100:200])  # (the older went first)
    valkey.delete(k.ready, k.data)
    valkey.hset(k.meta, "bytes", 0)
    fill()
    out = push(warm, k, [task], bound="ask", charge=640)  # (short for the markers alone)
    assert out.mode != "allot" and valkey.zcard(k.ready) == 1
    assert markers(valkey, k) == set(names[100:200])
    # and so does a heartbeat's progress (the task claimed): the rest of them go
    [(_, _, token, _)] = claim(warm, k, 1).claimed
    # (the lease's charge and the markers, and 1,000 bytes more: not 2,000 of progress)
    valkey.hset(k.meta, "allot", 640 + 100 * MARKER_CHARGE + 1_000)
    member = lease_member(task, text(token))
    progress = '{"p":"' + "x" * 2_000 + '"}'
    kept, short = run(warm, LeaseProgress(k, NOW, [(member, progress)], "strict", 0, 640))
    assert (kept, short) == ([1], 0) and markers(valkey, k) == set()


def task_wait_scenario(warm: WarmTier, valkey: Any) -> None:
    k = PairKeys.of(f"rt{uuid.uuid4().hex[:8]}", TENANT)
    [task] = ids(1)
    assert run(warm, TaskWait(k, task, 1, 30_000)) is None  # registered, no marker
    assert run(warm, TaskWait(k, task, 1, 30_000)) is None
    assert valkey.hget(k.waiters, task) == b"2" and 0 < valkey.pttl(k.waiters) <= 30_000
    assert run(warm, TaskWait(k, task, -1, 0)) is None
    assert valkey.hget(k.waiters, task) == b"1"
    run(warm, TaskWait(k, task, -1, 0))
    assert valkey.exists(k.waiters) == 0
    run(warm, TaskWait(k, task, -1, 0))  # (taken back already: nothing made)
    assert valkey.exists(k.waiters) == 0
    valkey.hset(k.finished_prev, task, "dead|3|42")
    assert run(warm, TaskWait(k, task, 0, 0)) == "dead|3|42"
    valkey.hset(k.finished, task, "done|4|43")
    assert run(warm, TaskWait(k, task, 0, 0)) == "done|4|43"  # the current one first
    assert valkey.exists(k.waiters) == 0  # (0: a look alone)


def ack_check_join_scenario(warm: WarmTier, valkey: Any) -> None:
    queue, k = new_pair(valkey)
    push(warm, k, ids(3))
    members = claimed_members(claim(warm, k, 3))
    first, second = (AckMail.of(queue, TENANT, None, r) for r in ("r1", "r2"))
    assert first.leased == k.leased
    # the first: its two leases checked and marked, the lock free: it commits (none waits)
    call = AckCheckJoin(first, NOW, "r1", 5_000, 31, [(members[0], 1), (members[1], 1)])
    held, entry, role, taken = run(warm, call)
    ids_of = [m.partition("|")[0] for m in members]
    assert held == [True, True] and role == "commit" and taken == []
    assert entry == f"r1 {ids_of[0]},{ids_of[1]} 1,1"
    assert valkey.get(first.lock) == b"r1" and 0 < valkey.pttl(first.lock) <= 5_000
    assert valkey.zscore(k.leased, members[0]) % 1 == 0.5  # (marked as ending)
    # sent again after its reply was lost: the lock is its own, it commits (takes nothing)
    assert run(warm, call) == ([True, True], entry, "commit", [])
    # the second: one lease not held (unknown); the held one joins the line
    held, entry, role, taken = run(warm, AckCheckJoin(
        second, NOW, "r2", 5_000, 31, [("gone|t1~x~1~1", 1), (members[2], 2)]))
    assert held == [False, True] and role == "wait" and taken == []
    assert entry == f"r2 {ids_of[2]} 2"
    assert [text(e) for e in valkey.lrange(first.mailbox, 0, -1)] == [entry]
    assert valkey.hget(first.states, "r2") == b""  # (in line)
    assert 5_000 < valkey.pttl(first.mailbox) <= 10_000
    assert 5_000 < valkey.pttl(first.states) <= 10_000
    # none held: nothing joined
    assert run(warm, AckCheckJoin(second, NOW, "r3", 5_000, 31, [("gone|t1~x~1~1", 1)])) \
        == ([False], None, "none", [])
    assert valkey.llen(first.mailbox) == 1
    # the lock free again: the next to join takes it and the line, recorded as its own
    valkey.delete(first.lock)
    third = AckMail.of(queue, TENANT, None, "r4")
    valkey.zadd(k.leased, {"t4|t1~y~1~1": NOW + 100})
    held, entry, role, taken = run(warm, AckCheckJoin(
        third, NOW, "r4", 5_000, 31, [("t4|t1~y~1~1", 1)]))
    assert (held, entry, role) == ([True], "r4 t4 1", "commit")
    assert taken == [f"r2 {ids_of[2]} 2"] and valkey.llen(first.mailbox) == 0
    assert valkey.hget(first.states, "r2") == b"r4"


def ack_look_scenario(warm: WarmTier, valkey: Any) -> None:
    queue = f"rt{uuid.uuid4().hex[:8]}"
    first, second, third = (AckMail.of(queue, TENANT, None, r) for r in ("r1", "r2", "r3"))
    valkey.set(first.lock, "r1", px=5_000)
    valkey.rpush(first.mailbox, "r2 y 1", "r3 z 2", "r4 w 1", "r5 v 1")
    valkey.hset(first.states, mapping={r: "" for r in ("r2", "r3", "r4", "r5")})
    # in line, the lock held: wait; an answer: taken
    assert run(warm, AckLook(second, "r2 y 1", 5_000, 31)) == ("wait", [])
    valkey.rpush(second.reply, "D[]")
    assert run(warm, AckLook(second, "r2 y 1", 5_000, 31)) == ("reply", ["D[]"])
    assert not valkey.exists(second.reply)
    # in line, the lock gone: r3 takes it and what waits (at most 1 here), as its own
    valkey.delete(first.lock)
    assert run(warm, AckLook(third, "r3 z 2", 4_000, 1)) == ("commit", ["r2 y 1"])
    assert valkey.get(first.lock) == b"r3" and valkey.pttl(first.lock) <= 4_000
    assert [text(e) for e in valkey.lrange(first.mailbox, 0, -1)] == ["r4 w 1", "r5 v 1"]
    assert valkey.hget(first.states, "r2") == b"r3" and not valkey.hexists(first.states, "r3")
    # sent again after its reply was lost: its own lock
    assert run(warm, AckLook(third, "r3 z 2", 4_000, 1)) == ("commit", [])
    # taken, its taker at work: wait; the taker gone (another holds the lock, or none)
    assert run(warm, AckLook(second, "r2 y 1", 5_000, 31)) == ("wait", [])
    valkey.set(first.lock, "r9", px=5_000)
    assert run(warm, AckLook(second, "r2 y 1", 5_000, 31)) == ("orphan", [])
    assert not valkey.hexists(first.states, "r2")  # (its state dropped)
    assert run(warm, AckLook(second, "r2 y 1", 5_000, 31)) == ("orphan", [])  # (none)


def ack_pass_scenario(warm: WarmTier, valkey: Any) -> None:
    queue = f"rt{uuid.uuid4().hex[:8]}"
    keys = AckMail.of(queue, TENANT, 7, "r1")
    assert keys.mailbox.endswith(":acks:7") and keys.reply_of("r2") == keys.mailbox + ":r:r2"
    valkey.set(keys.lock, "r1", px=1_000)
    valkey.rpush(keys.mailbox, "r2 y 1", "r3 z 1", "r4 w 1")
    valkey.hset(keys.states, mapping={"r8": "r1", "r9": "r1", "r2": "", "r3": "", "r4": ""})
    # the committer's lock: it forgets r8, takes at most 2 and extends its lock
    assert run(warm, AckPass(keys, "r1", 2, 9_000, ["r8"])) == ["r2 y 1", "r3 z 1"]
    assert 1_000 < valkey.pttl(keys.lock) <= 9_000
    assert {k: text(v) for k, v in valkey.hgetall(keys.states).items()} == {
        b"r9": "r1", b"r2": "r1", b"r3": "r1", b"r4": ""}
    # not its lock (it expired, another took it): it forgets, takes nothing, leaves the lock
    assert run(warm, AckPass(keys, "r0", 5, 9_000, ["r9"])) == []
    assert valkey.get(keys.lock) == b"r1" and valkey.llen(keys.mailbox) == 1
    assert not valkey.hexists(keys.states, "r9")
    # none to take (0): the lock let go, the line left for the next to look
    assert run(warm, AckPass(keys, "r1", 0, 9_000, [])) == []
    assert not valkey.exists(keys.lock) and valkey.llen(keys.mailbox) == 1
    # through the tier: the answers sent in the pass's round trip
    valkey.set(keys.lock, "r1", px=1_000)
    taken = warm.ack_answer(keys, "r1", [("r2", b"D[]"), ("r3", b"E")], most=5,
                            lock_ms=9_000, reply_ttl_ms=60_000)
    assert taken == (["r4 w 1"], 0)
    assert valkey.lrange(keys.reply_of("r2"), 0, -1) == [b"D[]"]
    assert 0 < valkey.pttl(keys.reply_of("r3")) <= 60_000
    assert not valkey.hexists(keys.states, "r2") and not valkey.hexists(keys.states, "r3")
    assert warm.ack_reply_wait(AckMail.of(queue, TENANT, 7, "r2"), 0.01) == b"D[]"
    assert warm.ack_reply_wait(AckMail.of(queue, TENANT, 7, "r2"), 0.01) is None
    assert warm.ack_answer(keys, "r1", [], most=5, lock_ms=9_000,
                           reply_ttl_ms=60_000) == ([], 0)
    assert not valkey.exists(keys.lock)


def rate_add_scenario(warm: WarmTier, valkey: Any) -> None:
    queue = f"rt{uuid.uuid4().hex[:8]}"
    key = rate_key(queue, TENANT)
    second = run(warm, RateAdd(RateKey(key), 3, 2))
    assert abs(second - int(valkey.time()[0])) <= 1
    run(warm, RateAdd(RateKey(key), 1, 0))
    series = warm.throughput.read(queue, [TENANT])
    assert (sum(series.enqueued), sum(series.acked)) == (4, 2)
    assert 950 <= valkey.ttl(key) <= 960


def rate_tenants_scenario(warm: WarmTier, valkey: Any) -> None:
    queue = f"rt{uuid.uuid4().hex[:8]}"
    second = run(warm, RateTenants(TenantsKey(tenants_key(queue)), ["b", "a"]))
    assert abs(second - int(valkey.time()[0])) <= 1
    assert valkey.zrange(tenants_key(queue), 0, -1, withscores=True) == [
        (b"a", float(second)), (b"b", float(second))]
    assert warm.throughput.noted_tenants(queue) == ["a", "b"]


def new_record() -> RecordKey:
    return RecordKey(valkey_key(uuid.uuid4().bytes))


def idem_claim_scenario(warm: WarmTier, valkey: Any) -> None:
    key = new_record()
    assert run(warm, IdempotencyClaim(key, b"f1", "owner-1", 30_000)) == RecordClaim(True)
    assert valkey.hgetall(key.record) == {b"f": b"f1", b"o": b"owner-1"}
    assert 0 < valkey.pttl(key.record) <= 30_000
    # claimed already: the record as it is (no status or body while its request runs)
    assert run(warm, IdempotencyClaim(key, b"f2", "owner-2", 30_000)) == RecordClaim(
        False, b"f1", None, None)
    valkey.hset(key.record, mapping={"s": 201, "b": b'{"ok":1}'})
    assert run(warm, IdempotencyClaim(key, b"f1", "owner-3", 30_000)) == RecordClaim(
        False, b"f1", 201, b'{"ok":1}')
    assert valkey.hget(key.record, "o") == b"owner-1"  # a reader changes nothing


def idem_finish_scenario(warm: WarmTier, valkey: Any) -> None:
    key = new_record()
    run(warm, IdempotencyClaim(key, b"f", "owner-1", 30_000))
    assert run(warm, IdempotencyFinish(key, "owner-2", 200, b"[]", 60_000)) is False
    assert valkey.hget(key.record, "s") is None
    assert run(warm, IdempotencyFinish(key, "owner-1", 207, b'{"n":2}', 60_000)) is True
    assert valkey.hmget(key.record, ["s", "b"]) == [b"207", b'{"n":2}']
    assert 30_000 < valkey.pttl(key.record) <= 60_000


def idem_abandon_scenario(warm: WarmTier, valkey: Any) -> None:
    key = new_record()
    run(warm, IdempotencyClaim(key, b"f", "owner-1", 30_000))
    assert run(warm, IdempotencyAbandon(key, "owner-2")) is False
    assert valkey.exists(key.record) == 1
    assert run(warm, IdempotencyAbandon(key, "owner-1")) is True
    assert valkey.exists(key.record) == 0


SCENARIOS: dict[type[LuaCall[Any]], Callable[[WarmTier, Any], None]] = {
    Claim: claim_scenario,
    PushReady: push_ready_scenario,
    UpdateReady: update_ready_scenario,
    LeaseCheck: lease_check_scenario,
    LeaseDrop: lease_drop_scenario,
    ReleaseLeases: release_leases_scenario,
    LeaseExtend: lease_extend_scenario,
    LeaseProgress: lease_progress_scenario,
    LeaseExpired: lease_expired_scenario,
    LeaseIndex: lease_index_scenario,
    RunningPage: running_page_scenario,
    Missing: missing_scenario,
    Remove: remove_scenario,
    WarmLedger: warm_ledger_scenario,
    AllotShrink: allot_shrink_scenario,
    AdmissionBegin: admission_begin_scenario,
    GoCold: go_cold_scenario,
    AdmissionEnd: admission_end_scenario,
    AdmissionMode: admission_mode_scenario,
    TierStats: tier_stats_scenario,
    LeaseOf: lease_of_scenario,
    RemoveReady: remove_ready_scenario,
    ReadyTenantsNote: ready_tenants_note_scenario,
    ReplaceCold: replace_cold_scenario,
    PairSweep: pair_sweep_scenario,
    LapseIndex: lapse_index_scenario,
    QueueCapacity: queue_capacity_scenario,
    CapacityFree: capacity_free_scenario,
    CapacityExtend: capacity_extend_scenario,
    CapacityUse: capacity_use_scenario,
    TenantRequests: tenant_requests_scenario,
    LongPolls: long_polls_scenario,
    RateAdd: rate_add_scenario,
    RateTenants: rate_tenants_scenario,
    IdempotencyClaim: idem_claim_scenario,
    IdempotencyFinish: idem_finish_scenario,
    IdempotencyAbandon: idem_abandon_scenario,
    TaskFinished: task_finished_scenario,
    TaskWait: task_wait_scenario,
    AckCheckJoin: ack_check_join_scenario,
    AckLook: ack_look_scenario,
    AckPass: ack_pass_scenario,
}
assert set(SCENARIOS) == set(CALLS), "every typed call has a round-trip scenario"
