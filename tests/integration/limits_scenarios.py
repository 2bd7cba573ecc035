"""Limits on claims (max_leased, rate, tenant_max_leased, tenant_rate): scenarios run on a
single Valkey (tests/integration/test_limits.py) and on a three-master cluster with the
queue's tenants on several masters (tests/cluster/test_limits_on_cluster.py)."""

from __future__ import annotations

import contextlib
import os
import queue as queue_module
import random
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster

from tests.support.processes import Children
from tierq.config import Settings
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq

Factory = Callable[..., Tierq]


def _engine(database_url: str, valkey_url: str, overrides: dict[str, Any]) -> Tierq:
    return Tierq(settings=Settings(database_url=database_url, valkey_url=valkey_url,
                                   db_pool_max=2, settings_cache_seconds=0.0, **overrides))


# -- 8 claimers against max_leased ------------------------------------------------------------


def limited_claimer(database_url: str, valkey_url: str, queue: str, out: Any,
                    overrides: dict[str, Any]) -> None:
    """Claim (up to 3 at once) and ack after holding each batch 5-40 ms, until the queue
    stays empty for 2 s. Journal: (claim returned at, ack sent at) per task, wall clock."""
    journal: list[tuple[float, float]] = []
    acked = 0
    empty_since: float | None = None
    rng = random.Random(os.getpid())
    with _engine(database_url, valkey_url, overrides) as tq:
        while True:
            outcome = tq.claim_outcome(queue, max=3, worker=f"p{os.getpid()}")
            got_at = time.time()
            if not outcome.tasks:
                empty_since = empty_since or got_at
                if got_at - empty_since > 2:
                    break
                # at the limit: wait as told (a long poll would do the same)
                time.sleep(min(0.02, (outcome.retry_after_ms or 20) / 1000))
                continue
            empty_since = None
            time.sleep(rng.uniform(0.005, 0.04))
            acked_at = time.time()
            result = tq.ack(queue, outcome.tasks)
            assert not result.rejected, result.rejected
            acked += len(result.acked)
            journal.extend((got_at, acked_at) for _ in outcome.tasks)
    out.put((journal, acked))


def most_at_once(intervals: Sequence[tuple[float, float]]) -> int:
    """The most intervals (start, end) that overlap at one instant."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                    key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    most = held = 0
    for _, step in events:
        held += step
        most = max(most, held)
    return most


def live_leases(valkey: redis.Redis | RedisCluster, queue: str,
                tenants: Sequence[str]) -> set[str]:
    """Leases of the queue held at one instant, read without a transaction across slots:
    every pair is read twice; a lease seen in both reads (with its deadline ahead) was held
    throughout between its two reads, and every such span contains the instant of the last
    first read. So the count is never more than what was held then."""
    def read() -> dict[str, float]:
        seen: dict[str, float] = {}
        for tenant in tenants:
            for member, deadline in valkey.zrange(PairKeys.of(queue, tenant).leased, 0, -1,
                                                  withscores=True):
                seen[member.decode()] = deadline
        return seen

    first = read()
    second = read()
    now_ms = time.time() * 1000
    return {m for m, d in second.items() if m in first and d > now_ms}


def run_eight_claimers(tq: Tierq, valkey: redis.Redis | RedisCluster, database_url: str,
                       valkey_url: str, tenants: Sequence[str],
                       overrides: dict[str, Any]) -> None:
    """8 claimer processes against max_leased 5: never more than 5 leases, sampled from the
    lease sets while they run and from the workers' journals; every task acked once."""
    queue = "limited"
    tq.put_queue(queue, {"max_leased": 5, "lease_seconds": 60})
    per_tenant = 240 // len(tenants)
    tq.enqueue(queue, [{"payload": i, "tenant": t} for t in tenants for i in range(per_tenant)])
    total = per_tenant * len(tenants)
    children = Children()
    samples: list[int] = []
    try:
        results = children.queue()
        for _ in range(8):
            children.start(limited_claimer, database_url, valkey_url, queue, results, overrides)
        collected: list[Any] = []
        deadline = time.monotonic() + 300
        while len(collected) < 8:
            assert time.monotonic() < deadline, "the claimers did not finish"
            samples.append(len(live_leases(valkey, queue, tenants)))
            children.check()
            with contextlib.suppress(queue_module.Empty):  # nothing yet
                collected.append(results.get(timeout=0.01))
        children.join(timeout=60)
    finally:
        children.close()
    journal = [span for spans, _ in collected for span in spans]
    acked = sum(n for _, n in collected)
    assert acked == total
    assert len(journal) == total
    assert max(samples) <= 5, max(samples)
    assert most_at_once(journal) <= 5, most_at_once(journal)
    # the limit was reached, not merely never approached
    assert most_at_once(journal) == 5 or max(samples) == 5, (max(samples), most_at_once(journal))
    assert tq.ctx.warm.capacity_use(queue, "leases", now_ms=int(time.time() * 1000))[0] == 0
    print(f"\n{total} tasks, 8 processes, {len(samples)} lease-set samples: at most "
          f"{max(samples)} leased (journals: {most_at_once(journal)})")


# -- after acks, exactly that many more --------------------------------------------------------


def acks_free_exactly_their_capacity(tq: Tierq, tenants: Sequence[str]) -> None:
    queue = "acks"
    tq.put_queue(queue, {"max_leased": 5, "lease_seconds": 60})
    tq.enqueue(queue, [{"payload": i, "tenant": t} for t in tenants for i in range(10)])
    first = tq.claim_outcome(queue, max=20)
    assert len(first.tasks) == 5
    assert first.retry_after_ms is not None and 0 < first.retry_after_ms <= 1000
    assert len({t.tenant for t in first.tasks}) >= 2  # the rotation spans tenants
    assert tq.claim_outcome(queue, max=20).tasks == []
    result = tq.ack(queue, first.tasks[:2])
    assert len(result.acked) == 2
    second = tq.claim_outcome(queue, max=20)
    assert len(second.tasks) == 2
    assert tq.claim(queue, max=20) == []
    # a nack and a release free theirs too; a heartbeat keeps it
    held = first.tasks[2:] + second.tasks
    assert tq.heartbeat(queue, [{"id": t.id, "lease_token": t.lease_token}
                                for t in held]).rejected == []
    assert tq.claim(queue, max=20) == []
    tq.nack(queue, [{"id": held[0].id, "lease_token": held[0].lease_token,
                     "retry_in_seconds": 3600}])
    tq.release(queue, [held[1]])
    third = tq.claim(queue, max=20)
    assert len(third) == 2
    assert tq.claim(queue, max=20) == []
    # clearing the limit lifts it
    tq.put_queue(queue, {"max_leased": None})
    assert len(tq.claim(queue, max=5)) == 5


def one_tenants_claim_tells_nothing_of_the_others(tq: Tierq, tenants: Sequence[str]) -> None:
    """A claim of one tenant (a caller pinned to it) with nothing of its own ready answers as
    on a queue name nobody used, however full the queue's limits are of other tenants'
    leases, and whichever limits the queue has; with ready work of its own, the limits that
    cut it are told (``retry_after_ms``)."""
    queue = "shared-limit"
    holder, idle, busy = tenants[:3]
    tq.put_queue(queue, {"max_leased": 1, "tenant_max_leased": 1, "lease_seconds": 60})
    tq.enqueue(queue, [{"payload": i, "tenant": t} for t in (holder, busy) for i in range(2)])
    [held] = tq.claim(queue, max=1, tenant=holder)  # the queue's max_leased is full now
    unused = tq.claim_outcome("never-used", max=5, tenant=idle)
    assert (unused.tasks, unused.retry_after_ms) == ([], None)
    # nothing ready of its own: max_leased (held by another) and tenant_max_leased (max 5
    # asks for more than 1) would both cut it, and neither is told
    assert tq.claim_outcome(queue, max=5, tenant=idle) == unused
    # its own ready work, cut by the limits: told when more may be had
    cut = tq.claim_outcome(queue, max=5, tenant=busy)
    assert cut.tasks == [] and cut.retry_after_ms is not None and cut.retry_after_ms > 0
    tq.ack(queue, [held])
    [got] = tq.claim_outcome(queue, max=5, tenant=busy).tasks
    assert got.tenant == busy


# -- rate ------------------------------------------------------------------------------------


def rate_flat_out(tq: Tierq, tenants: Sequence[str], *, tenant_rate: bool = False) -> int:
    """Claim flat out for 5 s against rate 20/s burst 5 (the queue's, or each tenant's);
    returns how many tasks were handed out."""
    queue = "rated"
    rate = {"per_second": 20, "burst": 5}
    tq.put_queue(queue, {"tenant_rate": rate} if tenant_rate else {"rate": rate})
    for tenant in tenants:  # more than 5 s can take at either rate
        tq.enqueue(queue, [{"payload": i, "tenant": tenant} for i in range(250)])
    handed = 0
    limited = 0
    end = time.monotonic() + 5
    while time.monotonic() < end:
        outcome = tq.claim_outcome(queue, max=50)
        handed += len(outcome.tasks)
        if outcome.retry_after_ms is not None:
            limited += 1
            assert 0 < outcome.retry_after_ms <= 50 + 1  # the next token: 1/20 s away
    assert limited > 0
    return handed


# -- a claimer killed while holding capacity -------------------------------------------------


def die_holding(database_url: str, valkey_url: str, queue: str, out: Any, where: str,
                overrides: dict[str, Any]) -> None:
    """Take capacity and die without giving it back: ``leased`` after the claim (it holds
    leases), ``reserved`` after the reservation for the whole claim and its first pair's
    pop, before the second pair's (it holds a reservation that no lease uses; on a single
    server the take rides in the first pop's script). Reports when it started (before
    anything was taken), the lease, and (``reserved``) a moment after the reservation was
    taken: under load a claim's reservation may come well after its start."""
    with _engine(database_url, valkey_url, overrides) as tq:
        started = time.time()
        if where == "reserved":
            first_pop = tq.ctx.warm.claim_limited

            def killed(*args: Any, **kwargs: Any) -> Any:
                if kwargs["first_k"] == 0:
                    return first_pop(*args, **kwargs)
                out.put((started, None, time.time()))
                time.sleep(0.2)  # the report reaches the parent
                os.kill(os.getpid(), signal.SIGKILL)
            tq.ctx.warm.claim_limited = killed  # type: ignore[method-assign]
        got = tq.claim(queue, max=2)
        lease_end = got[0].lease_expires_at.timestamp() if got else None
        out.put((started, lease_end, time.time() if lease_end is None else lease_end))
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)


def killed_claimer_frees_by_lease_expiry(tq: Tierq, database_url: str, valkey_url: str,
                                         where: str, overrides: dict[str, Any]) -> None:
    queue = f"killed-{where}"
    lease_seconds = 3
    tq.put_queue(queue, {"max_leased": 2, "lease_seconds": lease_seconds})
    # two tenants: a claim of 2 pops one from each
    tq.enqueue(queue, [{"payload": i, "tenant": t} for t in ("a", "b") for i in range(5)])
    children = Children()
    try:
        results = children.queue()
        proc = children.start(die_holding, database_url, valkey_url, queue, results, where,
                              overrides)
        started, lease_end, reserved_by = results.get(timeout=60)
        proc.join(timeout=30)
        assert proc.exitcode == -signal.SIGKILL
    finally:
        children.close()
    # the capacity is held (the limit stands) until the deadline, then free: the deadline
    # lies between the claim's start and the moment after its reservation, plus the lease
    earliest = started + lease_seconds if lease_end is None else lease_end
    latest = reserved_by + lease_seconds if lease_end is None else lease_end
    assert latest <= time.time() + lease_seconds + 1
    got: list[Any] = []
    while not got:
        asked = time.time()  # (the claim ran after this: a slow call under load is no hold)
        got = tq.claim(queue, max=2)
        now = time.time()
        if not got:
            assert asked <= latest + 0.5, f"capacity still held {asked - latest:.2f} s after"
            time.sleep(0.02)
    assert now >= earliest - 0.5, f"freed {earliest - now:.2f} s before the lease ended"
    assert len(got) == 2
