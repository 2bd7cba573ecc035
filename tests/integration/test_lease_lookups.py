"""A task's lease is found by its id (``tq:{q|t}:lease_of``, lua/lease_keys.lua), claim
records are counted per claim, and the reconciler walks a pair a slice at a time: nothing
on a request or maintenance path reads a whole lease, ready or data set (the scripts are
also checked statically: tests/unit/test_lua_sources.py)."""

from __future__ import annotations

from typing import Any

import redis

from tierq.core.ordering import task_of
from tierq.dal.warm_tier import PairKeys, lease_member
from tierq.engine import Tierq
from tierq.maintenance import reaper

K = PairKeys.of("q", "_")


def lease_of(valkey: redis.Redis, task_id: Any) -> str | None:
    raw = valkey.hget(K.lease_of, str(task_id))
    return None if raw is None else raw.decode()


# lease_of's one field of its own, which keeps it a hashtable (lua/claim.lua)
ENCODING = b"~encoding"


def calls_of(valkey: redis.Redis, command: str) -> int:
    stats = valkey.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def test_a_claim_enters_each_lease_by_id_and_its_end_removes_it(tq: Tierq, valkey):
    tq.enqueue("q", [{"payload": i} for i in range(3)])
    held = tq.claim("q", max=3)
    assert {str(t.id): t.lease_token for t in held} == {
        k.decode(): v.decode() for k, v in valkey.hgetall(K.lease_of).items() if k != ENCODING}
    tq.ack("q", held[:1])
    tq.nack("q", [{"id": held[1].id, "lease_token": held[1].lease_token}])
    assert lease_of(valkey, held[0].id) is None and lease_of(valkey, held[1].id) is None
    assert lease_of(valkey, held[2].id) == held[2].lease_token


def test_lease_of_is_a_hashtable_from_a_claims_first_lease(tq: Tierq, valkey):
    """A pair's few leases in flight are found by hash, not by a scan of a listpack: the
    first claim writes lease_of's own field, and it stays when the leases end."""
    tq.enqueue("q", [{"payload": 1}])
    [held] = tq.claim("q")
    assert valkey.object("encoding", K.lease_of) == b"hashtable"
    assert len(valkey.hget(K.lease_of, ENCODING)) > 64  # (hash-max-listpack-value)
    tq.ack("q", [held])
    assert valkey.hkeys(K.lease_of) == [ENCODING]
    assert valkey.object("encoding", K.lease_of) == b"hashtable"


def test_an_old_token_never_erases_a_newer_leases_entry(make_tq, valkey):
    """The task's first lease expired and was issued again; the old lease's member, were
    it still in the set (a failover's leftovers), is ended by its own token alone."""
    tq = make_tq(lease_seconds=10)
    tq.enqueue("q", [{"payload": 1}])
    [first] = tq.claim("q")
    tq.ctx.clock.advance(11)
    assert tq.run_reaper().expired == 1
    [second] = tq.claim("q")
    assert second.id == first.id and lease_of(valkey, second.id) == second.lease_token
    old = lease_member(str(first.id), first.lease_token)
    valkey.zadd(K.leased, {old: 1})  # the old lease, left behind
    assert tq.ctx.warm.release("q", "_", [old]) == 1
    assert lease_of(valkey, second.id) == second.lease_token  # the newer lease's entry
    assert tq.ctx.warm.release("q", "_", [old]) == 0
    assert [str(i) for i in tq.ack("q", [second]).acked] == [str(second.id)]
    assert valkey.hkeys(K.lease_of) == [ENCODING] and valkey.hlen(K.claims) == 0


def test_a_task_view_finds_its_lease_without_a_scan(tq: Tierq, valkey):
    tq.enqueue("q", [{"payload": i} for i in range(50)])
    held = tq.claim("q", max=50, worker="w-9")
    scans = calls_of(valkey, "zscan")
    view = tq.get_task("q", held[17].id)
    assert view.state == "leased" and view.worker == "w-9"
    assert view.lease_expires_at is not None
    assert calls_of(valkey, "zscan") == scans
    tq.ack("q", held)
    assert tq.ctx.warm.lease_of("q", "_", str(held[17].id)) is None


def test_cancelling_a_leased_task_ends_its_lease_by_id(tq: Tierq, valkey):
    tq.enqueue("q", [{"payload": i} for i in range(3)])
    held = tq.claim("q", max=3)
    tq.cancel_task("q", held[1].id)
    assert lease_of(valkey, held[1].id) is None
    assert valkey.zscore(K.leased, lease_member(str(held[1].id), held[1].lease_token)) is None
    rejected = tq.heartbeat("q", [{"id": held[1].id, "lease_token": held[1].lease_token}])
    assert [r.reason for r in rejected.rejected] == ["not_owner"]
    assert lease_of(valkey, held[0].id) == held[0].lease_token  # the others keep theirs


def test_an_entry_naming_a_lease_that_is_gone_counts_as_missing(make_tq, valkey):
    """lease_of names a lease the set no longer holds (ended by a tierq that kept no
    lease_of): the task holds none, the reconciler restores it and the entry goes."""
    tq = make_tq(reconcile_grace_seconds=30)
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    valkey.zrem(K.leased, lease_member(str(task.id), task.lease_token))  # as an old ack did
    tq.ctx.clock.advance(31)
    assert tq.run_reaper().restored == 1
    assert lease_of(valkey, task.id) is None
    [again] = tq.claim("q")
    assert again.id == task.id


def test_a_pair_of_an_older_tierq_is_indexed_before_it_is_reconciled(make_tq, valkey):
    """Leases and claim records written without lease_of and counts: the reconciler first
    completes them, a slice at a time (lua/lease_index.lua), and reports nothing missing
    before; then each claim's record goes with its last lease, and a record of a claim
    with no lease left goes at once."""
    tq = make_tq(reconcile_grace_seconds=30, lease_seconds=600)
    tq.enqueue("q", [{"payload": i} for i in range(6)])
    first = tq.claim("q", max=4, worker="a")
    second = tq.claim("q", max=2, worker="b")
    # as an older tierq left them: no lease_of, no counts, no flag; an orphaned record
    valkey.delete(K.lease_of)
    for field in valkey.hkeys(K.claims):
        if field.endswith(b"#"):
            valkey.hdel(K.claims, field)
    valkey.hdel(K.meta, "leases_indexed")
    valkey.hset(K.claims, "_~deadbeef~", "1|gone")
    ids = [str(t.id) for t in first + second]
    assert tq.ctx.warm.missing("q", "_", ids, fence_ms=0) is None  # not indexed yet
    assert tq.ctx.warm.index_leases("q", "_", slices=1) is False  # one slice: the leases
    assert tq.ctx.warm.index_leases("q", "_") is True
    assert tq.ctx.warm.missing("q", "_", ids, fence_ms=0) == []
    assert {k.decode(): v.decode() for k, v in valkey.hgetall(K.lease_of).items()
            if k != ENCODING} == {
        str(t.id): t.lease_token for t in first + second}
    records = {k.decode(): v.decode() for k, v in valkey.hgetall(K.claims).items()}
    assert sorted(v for k, v in records.items() if k.endswith("#")) == ["2", "4"]
    assert "_~deadbeef~" not in records
    tq.ack("q", second)
    assert {v.decode().split("|")[1] for k, v in valkey.hgetall(K.claims).items()
            if not k.endswith(b"#")} == {"a"}


def test_the_reconciler_walks_a_large_pair_a_slice_per_pass(make_tq, valkey):
    """13 warm rows, 12 of them leased and older: with slices of 5 the lost row, the
    newest, is found on the third pass (a reconciler that read only the oldest slice
    would never find it)."""
    tq = make_tq(reconcile_grace_seconds=30, lease_seconds=3600)
    for i in range(12):
        tq.enqueue("q", [{"payload": i}])
        tq.ctx.clock.advance(0.01)
    assert len(tq.claim("q", max=12)) == 12
    [lost] = tq.enqueue("q", [{"payload": "lost"}])
    [member] = [m for m in valkey.zrange(K.ready, 0, -1) if task_of(m.decode()) == str(lost.id)]
    valkey.zrem(K.ready, member)
    valkey.hdel(K.data, str(lost.id))
    tq.ctx.clock.advance(31)
    restored = [reaper.run(tq.ctx, reconcile_batch=5).restored for _ in range(3)]
    assert restored == [0, 0, 1]
    assert [t.payload for t in tq.claim("q", max=5)] == ["lost"]
    assert reaper.run(tq.ctx, reconcile_batch=5).restored == 0  # started over: none lost


def test_a_missing_byte_count_of_a_large_warm_set_is_not_recounted(make_tq, valkey):
    """The byte counter of a warm set of more than 512 tasks is gone: it is taken as full
    (the pair goes cold: nothing read), not recounted by reading every task, until claims
    bring the set down to where a recount is small."""
    tq = make_tq(warm_max=10_000)
    for start in range(0, 600, 300):
        tq.enqueue("q", [{"payload": start + i} for i in range(300)])
    valkey.hdel(K.meta, "bytes")
    hkeys = calls_of(valkey, "hkeys")
    [late] = tq.enqueue("q", [{"payload": "late"}])
    assert late.state == "cold"
    assert calls_of(valkey, "hkeys") == hkeys and valkey.hget(K.meta, "bytes") is None
    tq.ack("q", tq.claim("q", max=100))
    tq.enqueue("q", [{"payload": "later"}])
    assert calls_of(valkey, "hkeys") == hkeys + 1  # 500 tasks left: recounted, once
    assert tq.ctx.warm.ready_bytes("q", "_") == tq.ctx.warm.count_ready_bytes("q", "_")


def test_a_claim_of_tasks_at_several_attempts_tokens_each_by_its_own(tq: Tierq, valkey):
    """claim.lua builds a token's '<prefix><attempt>~' once per run of one attempt: a claim
    whose tasks go 1, 1, 2, 1 numbers them on, each with its own attempt."""
    tq.enqueue("q", [{"payload": i} for i in range(3)])
    [first] = tq.claim("q", max=1)
    tq.nack("q", [{"id": first.id, "lease_token": first.lease_token, "retry_in_seconds": 0}])
    tq.enqueue("q", [{"payload": 3}])  # the line: 1, 2, the nacked one, 3
    held = tq.claim("q", max=4)
    assert [t.attempt for t in held] == [1, 1, 2, 1] and held[2].id == first.id
    prefix = held[0].lease_token.rsplit("~", 2)[0]
    assert [t.lease_token for t in held] == [
        f"{prefix}~{t.attempt}~{k}" for k, t in enumerate(held, 1)]
    assert {str(t.id): t.lease_token for t in held} == {
        k.decode(): v.decode() for k, v in valkey.hgetall(K.lease_of).items() if k != ENCODING}
    assert [str(i) for i in tq.ack("q", held).acked] == [str(t.id) for t in held]


def test_a_drop_of_interleaved_claims_counts_each_claim_down(tq: Tierq, valkey):
    """lease_drop() finds each lease's claim, whether or not the lease before it was of the
    same claim, and a member whose token has no claim prefix is ended alone."""
    tq.enqueue("q", [{"payload": i} for i in range(6)])
    a = tq.claim("q", max=3, worker="a")
    b = tq.claim("q", max=3, worker="b")
    odd = lease_member("not-a-task", "no-prefix")
    valkey.zadd(K.leased, {odd: 2**50})

    def count(t: Any) -> int | None:
        raw = valkey.hget(K.claims, t.lease_token.rsplit("~", 2)[0] + "~#")
        return None if raw is None else int(raw)

    members = [lease_member(str(t.id), t.lease_token) for t in (a[0], b[0], a[1], b[1])]
    assert tq.ctx.warm.release("q", "_", [members[0], odd, *members[1:]]) == 5
    assert count(a[2]) == 1 and count(b[2]) == 1
    assert tq.ctx.warm.release("q", "_", [lease_member(str(a[2].id), a[2].lease_token)]) == 1
    assert count(a[2]) is None and count(b[2]) == 1
    assert tq.get_task("q", b[2].id).worker == "b"
    tq.ack("q", b[2:])
    assert valkey.hlen(K.claims) == 0 and valkey.hkeys(K.lease_of) == [ENCODING]
