"""A task's progress (heartbeats carry it), run by each engine on each store layout: a
single Valkey (tests/integration/test_progress.py), a cluster
(tests/cluster/test_progress_on_cluster.py) and three shards
(tests/shards/test_progress_on_shards.py). Valkey keeps the last progress with the lease
(its bytes counted in the pair's meta field ``progress``); the task's view and the running
leases show it while the task is leased, its row once the attempt ends (nack, expiry, ack
with a result); every path that ends the lease gives its bytes back."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
import redis
from pydantic import ValidationError
from redis.cluster import RedisCluster

from tierq.contract import QueueEngine
from tierq.dal.warm_tier import PairKeys
from tierq.errors import InvalidInput
from tierq.models import ClaimedTask
from tierq.models.leases import MAX_PROGRESS_BYTES

TENANT = "_"
Valkey = redis.Redis | RedisCluster


def kept_bytes(valkey: Valkey, queue: str, tenant: str = TENANT) -> int:
    """The pair's progress bytes as its meta counts them (0 when never counted)."""
    return int(valkey.hget(PairKeys.of(queue, tenant).meta, "progress") or 0)


def stored_bytes(valkey: Valkey, queue: str, tenant: str = TENANT) -> int:
    """The pair's progress bytes recounted from its progress hash."""
    key = PairKeys.of(queue, tenant).progress
    return sum(int(valkey.hstrlen(key, field)) for field in valkey.hkeys(key))


def beat(tq: QueueEngine, queue: str, task: ClaimedTask, progress: Any) -> None:
    out = tq.heartbeat(queue, [{"id": task.id, "lease_token": task.lease_token,
                                "progress": progress}])
    assert [e.id for e in out.extended] == [task.id], out


def seen_while_running_and_after_a_nack(tq: QueueEngine, valkey: Valkey) -> None:
    """Visible in the task's view and the running leases while leased, the last one sent
    winning; kept on the row by the nack that ends the attempt; its bytes given back."""
    [made] = tq.enqueue("pq", [{"payload": 1}])
    [task] = tq.claim("pq", max=1)
    assert tq.get_task("pq", made.id).progress is None
    beat(tq, "pq", task, {"step": 1, "of": 3})
    beat(tq, "pq", task, {"step": 2, "of": 3})
    view = tq.get_task("pq", made.id)
    assert view.state == "leased" and view.progress == {"step": 2, "of": 3}
    assert isinstance(view.progress_at, datetime)
    [lease] = [r for r in tq.running("pq") if r.id == made.id]
    assert lease.progress == {"step": 2, "of": 3} and lease.progress_at == view.progress_at
    assert kept_bytes(valkey, "pq") == stored_bytes(valkey, "pq") > 0
    out = tq.nack("pq", [{"id": task.id, "lease_token": task.lease_token, "error": "boom",
                          "retry_in_seconds": 60}])
    assert out.retried == [made.id]
    after = tq.get_task("pq", made.id)
    assert after.state == "delayed" and after.progress == {"step": 2, "of": 3}
    assert after.progress_at == view.progress_at
    assert kept_bytes(valkey, "pq") == stored_bytes(valkey, "pq") == 0


def kept_by_an_ack_with_a_result(tq: QueueEngine, valkey: Valkey) -> None:
    [made] = tq.enqueue("pa", [{"payload": 1}])
    [task] = tq.claim("pa", max=1)
    beat(tq, "pa", task, "almost")
    tq.ack("pa", [{"id": task.id, "lease_token": task.lease_token, "result": {"ok": True}}])
    view = tq.get_task("pa", made.id)
    assert view.state == "done" and view.progress == "almost" and view.result == {"ok": True}
    assert kept_bytes(valkey, "pa") == stored_bytes(valkey, "pa") == 0


def kept_by_an_expiry_and_shown_until_the_next_attempt_sends_its_own(
        tq: QueueEngine, valkey: Valkey, advance: Any) -> None:
    """The reaper's expiry writes the attempt's last progress to the row; the next
    attempt's lease shows the row's until its own heartbeat carries one."""
    [made] = tq.enqueue("pe", [{"payload": 1}])
    [task] = tq.claim("pe", max=1)
    beat(tq, "pe", task, [1, 2, 3])
    advance(tq.settings.lease_seconds + 1)
    tq.run_reaper()
    assert kept_bytes(valkey, "pe") == stored_bytes(valkey, "pe") == 0
    view = tq.get_task("pe", made.id)
    assert view.attempts == 1 and view.progress == [1, 2, 3]
    [again] = tq.claim("pe", max=1)
    assert again.attempt == 2
    assert tq.get_task("pe", made.id).progress == [1, 2, 3]  # the last attempt's
    beat(tq, "pe", again, [4])
    assert tq.get_task("pe", made.id).progress == [4]
    tq.ack("pe", [again])  # no result: the row goes, and the lease's progress with it
    assert kept_bytes(valkey, "pe") == stored_bytes(valkey, "pe") == 0


def given_back_by_a_release_and_a_plain_ack(tq: QueueEngine, valkey: Valkey) -> None:
    tq.enqueue("pr", [{"payload": i} for i in range(2)])
    first, second = tq.claim("pr", max=2)
    beat(tq, "pr", first, {"a": "x" * 100})
    beat(tq, "pr", second, {"b": "y" * 200})
    assert kept_bytes(valkey, "pr") == stored_bytes(valkey, "pr") > 300
    tq.release("pr", [first])
    assert kept_bytes(valkey, "pr") == stored_bytes(valkey, "pr") > 200
    tq.ack("pr", [second])
    assert kept_bytes(valkey, "pr") == stored_bytes(valkey, "pr") == 0
    assert valkey.hlen(PairKeys.of("pr", TENANT).progress) == 0


def larger_than_4_kib_is_refused_naming_it(tq: QueueEngine, valkey: Valkey) -> None:
    """A progress past 4 KiB encoded fails the whole heartbeat (nothing written, nothing
    extended); 4 KiB exactly is kept."""
    [made] = tq.enqueue("pl", [{"payload": 1}])
    [task] = tq.claim("pl", max=1)
    deadline = tq.get_task("pl", made.id).lease_expires_at
    too_big = "x" * (MAX_PROGRESS_BYTES - 1)  # its quotes take it past the bound
    with pytest.raises((ValidationError, InvalidInput)) as caught:
        tq.heartbeat("pl", [{"id": task.id, "lease_token": task.lease_token,
                             "extend_seconds": 600, "progress": too_big}])
    assert "progress" in str(caught.value) and "4096" in str(caught.value)
    assert valkey.hlen(PairKeys.of("pl", TENANT).progress) == 0
    assert kept_bytes(valkey, "pl") == 0
    assert tq.get_task("pl", made.id).lease_expires_at == deadline
    beat(tq, "pl", task, "x" * (MAX_PROGRESS_BYTES - 2))
    assert tq.get_task("pl", made.id).progress == "x" * (MAX_PROGRESS_BYTES - 2)


# a tenant bound: the least TIERQ_TENANT_WARM_MAX_BYTES takes
SHARE = 1 << 20
BIG_PROGRESS = "p" * 4_000  # 4,002 bytes encoded: within MAX_PROGRESS_BYTES


def held_to_the_tenants_share(tq: QueueEngine, valkey: Valkey) -> None:
    """A tenant whose leases fill its share of the warm tier cannot grow past it by
    heartbeating progress (tiny tasks, 4 KB of progress each: about 6 times the share
    unchecked). The extensions stand, the progress that does not fit is dropped, and
    another tenant's work still goes warm."""
    from tierq.logic.tenant_budget import TASK_CHARGE

    queues = ["pa", "pb"]
    leased: list[tuple[str, ClaimedTask]] = []
    for queue in queues:
        for _ in range(2):
            tq.enqueue(queue, [{"payload": 0, "tenant": "hog"} for _ in range(300)])
        while got := tq.claim(queue, max=500, tenant="hog", lease_seconds=3600):
            leased += [(queue, t) for t in got]
    assert len(leased) == 1200

    def usage() -> int:
        return sum(tq_usage(tq, queue, "hog", TASK_CHARGE) for queue in queues)

    assert usage() <= SHARE
    for start in range(0, len(leased), 300):
        for queue in queues:
            part = [t for q, t in leased[start:start + 300] if q == queue]
            if part:
                out = tq.heartbeat(queue, [{"id": t.id, "lease_token": t.lease_token,
                                            "progress": BIG_PROGRESS} for t in part])
                assert len(out.extended) == len(part) and out.rejected == []
    assert usage() <= SHARE
    kept = sum(kept_bytes(valkey, queue, "hog") for queue in queues)
    assert 0 < kept < 1200 * len(BIG_PROGRESS) // 2  # some fit, most did not
    made = tq.enqueue("pc", [{"payload": "y" * 1_000, "tenant": "other"} for _ in range(50)])
    assert {o.state for o in made} == {"warm"}


def kept_with_a_grant_when_the_share_has_room(tq: QueueEngine, valkey: Valkey) -> None:
    """A pair whose allotment has no room left beyond its usage asks its tenant's ledger
    for more, as a push does: well within the share, the progress is kept."""
    from tierq.logic.tenant_budget import TASK_CHARGE

    tq.enqueue("pg", [{"payload": 0} for _ in range(3)])
    tasks = tq.claim("pg", max=3)
    engine_of(tq, "pg").ctx.warm.shrink_allot("pg", TENANT, charge=TASK_CHARGE, keep=0)
    for task in tasks:
        beat(tq, "pg", task, BIG_PROGRESS)
    assert kept_bytes(valkey, "pg") > 3 * len(BIG_PROGRESS)
    assert all(tq.get_task("pg", t.id).progress == BIG_PROGRESS for t in tasks)


def a_grant_refused_at_its_pair_goes_back_to_the_ledger(
        tq: QueueEngine, valkey: Valkey, monkeypatch: pytest.MonkeyPatch) -> None:
    """A progress short of its allotment takes a grant; when the pair then refuses the
    call that would add it (Valkey at its maximum memory between the two), the grant goes
    back to the tenant's ledger instead of counting there for nothing, heartbeat after
    heartbeat; the heartbeat answers its extension all the same."""
    from tierq.dal.warm_tier import TenantKeys, WarmTier
    from tierq.errors import WarmTierFull
    from tierq.logic.tenant_budget import TASK_CHARGE

    tq.enqueue("pr", [{"payload": 0}])
    [task] = tq.claim("pr", max=1)
    warm = engine_of(tq, "pr").ctx.warm
    warm.shrink_allot("pr", TENANT, charge=TASK_CHARGE, keep=0)
    ledger = TenantKeys.of(TENANT).warm
    entry = text_of(valkey.hget(ledger, "pr")).partition("|")[0]
    real = WarmTier.keep_progress

    def full_when_strict(self: WarmTier, *args: Any, **kwargs: Any) -> Any:
        if kwargs["share"].bound == "strict":
            raise WarmTierFull()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(WarmTier, "keep_progress", full_when_strict)
    for _ in range(3):
        beat(tq, "pr", task, BIG_PROGRESS)
    assert text_of(valkey.hget(ledger, "pr")).partition("|")[0] == entry
    assert kept_bytes(valkey, "pr") == 0


def text_of(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def engine_of(tq: QueueEngine, queue: str, tenant: str = TENANT) -> Any:
    """The engine that holds the pair (the engine itself, or a shard's)."""
    on = getattr(tq, "engine_of", None)
    return tq if on is None else on(queue, tenant)


def tq_usage(tq: QueueEngine, queue: str, tenant: str, charge: int) -> int:
    return engine_of(tq, queue, tenant).ctx.warm.pair_usage(queue, tenant, charge=charge)[0]
