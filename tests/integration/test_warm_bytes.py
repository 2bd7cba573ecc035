"""The warm tier is bounded in bytes too: warm_max_bytes per (queue, tenant), the byte counter
in each pair's meta (lua/warm_bytes.lua) kept exact by every script that adds or removes task
data, FIFO across tiers under the byte bound, and Valkey out of memory (a real Redis with
``maxmemory`` reached and ``noeviction``): committed work waits cold, nothing is lost."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis

from tests.integration.helpers import count_state, mode_of, ready_size
from tests.support.valkey_memory import memory_bound
from tierq.core.ordering import place
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.errors import WarmTierFull
from tierq.logic import claim, tiering
from tierq.logic.context import OffsetClock

SMALL = 4096  # warm_max_bytes of the small queues below
PAD = "x" * 300  # a task's blob is then about 380 bytes: about ten fit in SMALL


def warm_bytes(tq: Tierq, queue: str, tenant: str = "_") -> int:
    """The counter as the scripts keep it."""
    return tq.ctx.warm.ready_bytes(queue, tenant)


def counted_bytes(valkey: redis.Redis, queue: str, tenant: str = "_") -> int:
    """The bytes of task data the pair's data hash really holds, counted here."""
    data = PairKeys.of(queue, tenant).data
    return sum(int(valkey.hstrlen(data, f)) for f in valkey.hkeys(data) if f != b"~encoding")


def assert_exact(tq: Tierq, valkey: redis.Redis, queue: str, tenant: str = "_") -> int:
    counted = counted_bytes(valkey, queue, tenant)
    assert warm_bytes(tq, queue, tenant) == counted
    return counted


def test_a_small_warm_max_bytes_bounds_the_warm_set_and_fifo_holds_across_tiers(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The claims' low-water top-up runs at most every LOW_WATER_EVERY (50 ms) of the clock:
    # on a loaded machine every claim comes later than that and promotes all there is,
    # leaving the mover, which this test is about, nothing. Only the mover tops up here
    # (a claim that finds the set dry still refills it).
    monkeypatch.setattr(claim, "LOW_WATER_EVERY", math.inf)
    tq = make_tq(warm_max=1000)
    tq.put_queue("b", {"warm_max_bytes": SMALL})
    assert tq.queue_settings("b").warm_max_bytes == SMALL
    enqueued: list[int] = []
    claimed: list[int] = []
    rng = random.Random(14)

    def enqueue(n: int) -> None:
        first = len(enqueued)
        tq.enqueue("b", [{"payload": {"n": first + i, "pad": PAD}} for i in range(n)])
        enqueued.extend(range(first, first + n))

    def check() -> None:
        held = assert_exact(tq, valkey, "b")
        assert held <= SMALL
        if ready_size(valkey, "b"):
            assert held > 0

    enqueue(60)
    check()
    assert ready_size(valkey, "b") < 60 and count_state(pg, "b", "cold") > 0
    assert mode_of(valkey, "b") == "cold"
    promoted = 0
    for step in range(200):
        got = tq.claim("b", max=rng.randint(1, 4))
        claimed.extend(t.payload["n"] for t in got)
        tq.ack("b", got)
        check()
        if step % 5 == 0:
            promoted += tq.run_cold_to_warm().promoted
            check()
        if step == 20:
            enqueue(25)  # lands cold behind the cold line (the queue is in cold mode)
            check()
        if len(claimed) == len(enqueued):
            break
    assert claimed == enqueued  # one line, across both tiers and the byte bound
    assert promoted > 0  # the cold line was promoted as claims freed bytes
    assert count_state(pg, "b", "cold") == 0
    assert warm_bytes(tq, "b") == 0
    tq.run_cold_to_warm()
    assert mode_of(valkey, "b") == "warm"


def test_the_scheduled_mover_promotes_as_claims_free_bytes(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(warm_max=1000, warm_max_bytes=SMALL)  # the deployment default this time
    tq.enqueue("m", [{"payload": {"n": i, "pad": PAD}} for i in range(40)])
    warm_before = ready_size(valkey, "m")
    assert 0 < warm_before < 40
    assert tq.run_cold_to_warm().promoted == 0  # full: no headroom below 90%
    # claim around the ctx's inline refill: pop straight from the warm tier
    left, _, popped = tq.ctx.warm.claim("m", "_", n=warm_before // 2, now_ms=0, lease_ms=60_000,
                                        token_prefix="_~t~", worker="w")
    assert len(popped) == warm_before // 2 and left == warm_before - len(popped)
    assert_exact(tq, valkey, "m")
    summary = tq.run_cold_to_warm()
    assert summary.promoted > 0
    assert assert_exact(tq, valkey, "m") <= SMALL
    assert ready_size(valkey, "m") + count_state(pg, "m", "cold") == 40 - len(popped)


def test_one_task_larger_than_warm_max_bytes_still_goes_warm_alone(
        make_tq: Callable[..., Tierq], valkey: redis.Redis) -> None:
    tq = make_tq(warm_max_bytes=1024)
    tq.enqueue("big", [{"payload": "y" * 3000}, {"payload": "small"}])
    assert ready_size(valkey, "big") == 1  # the empty warm set takes the first task
    got = tq.claim("big", max=5, lease_seconds=60)  # the set runs dry: refilled inline
    assert [t.payload for t in got] == ["y" * 3000, "small"]


def test_the_counter_stays_exact_on_every_path(make_tq: Callable[..., Tierq],
                                               valkey: redis.Redis,
                                               pg: psycopg.Connection[Any]) -> None:
    clock = OffsetClock()
    tq = make_tq(clock=clock, warm_max=1000)
    tq.enqueue("c", [{"payload": {"n": i, "pad": PAD[: 10 * i]}, "key": f"k{i}"}
                     for i in range(12)])
    total = assert_exact(tq, valkey, "c")
    assert total > 0
    got = tq.claim("c", max=4)  # claim: the data handed out leaves the count
    assert assert_exact(tq, valkey, "c") < total
    tq.ack("c", got[:1])  # ack: nothing in the warm set changes
    assert_exact(tq, valkey, "c")
    nacked = tq.nack("c", [{"id": got[1].id, "lease_token": got[1].lease_token,
                            "retry_in_seconds": 0}])  # back in line at once: pushed
    assert nacked.retried and assert_exact(tq, valkey, "c")
    released = tq.release("c", [got[2]])  # back in its place: pushed
    assert released.released and assert_exact(tq, valkey, "c")
    # replace in place, larger (update_ready), and into the future (remove)
    tq.enqueue("c", [{"payload": {"replaced": "z" * 500}, "key": "k5", "on_conflict": "replace"},
                     {"payload": 0, "key": "k6", "on_conflict": "replace", "delay_seconds": 600}])
    assert_exact(tq, valkey, "c")
    waiting = tq.get_task("c", tq.enqueue_one("c", 1, key="k7").id)
    tq.cancel_task("c", waiting.id)  # cancel (remove)
    assert_exact(tq, valkey, "c")
    k8 = tq.enqueue_one("c", 1, key="k8").id
    [seq] = pg.execute("SELECT seq FROM tierq_tasks WHERE id = %s", (k8,)).fetchone()
    assert tq.ctx.warm.remove_ready("c", "_", [place(0, seq, str(k8))]) == [str(k8)]  # withdraw
    assert_exact(tq, valkey, "c")
    short = tq.claim("c", max=2, lease_seconds=1)
    assert assert_exact(tq, valkey, "c") > 0
    clock.advance(5)
    assert tq.run_reaper().expired == len(short)  # expired leases go back in line
    assert_exact(tq, valkey, "c")
    tq.ack("c", [got[3]])
    while True:
        batch = tq.claim("c", max=3)
        if not batch:
            break
        tq.ack("c", batch)
        assert_exact(tq, valkey, "c")
    assert warm_bytes(tq, "c") == 0 and counted_bytes(valkey, "c") == 0


def test_a_missing_or_drifted_counter_heals(make_tq: Callable[..., Tierq],
                                            valkey: redis.Redis) -> None:
    """A warm tier written before the counter existed (no field) or a counter that drifted
    (negative) is recounted from the data hash by the next script that needs it."""
    tq = make_tq()
    meta = PairKeys.of("h", "_").meta
    tq.enqueue("h", [{"payload": {"n": i}} for i in range(5)])
    valkey.hdel(meta, "bytes")  # as written by an older tierq
    tq.enqueue("h", [{"payload": {"n": 5}}])
    assert_exact(tq, valkey, "h")
    valkey.hset(meta, "bytes", -7)
    tiering.refill(tq.ctx, "h", "_")  # observes the pair: admission_mode heals too
    assert_exact(tq, valkey, "h")
    valkey.hset(meta, "bytes", 10**9)  # drifted upwards: healed once the set is small
    tiering.refill(tq.ctx, "h", "_")
    assert_exact(tq, valkey, "h")
    tq.claim("h", max=6)  # the set empties: the counter is 0, whatever it said
    valkey.hset(meta, "bytes", 123)
    tq.enqueue("h", [{"payload": 1}])
    assert_exact(tq, valkey, "h")


def test_warm_max_bytes_is_a_queue_setting(make_tq: Callable[..., Tierq]) -> None:
    from pydantic import ValidationError

    tq = make_tq(warm_max_bytes=2_000_000)
    assert tq.queue_settings("s").warm_max_bytes == 2_000_000  # the deployment default
    tq.put_queue("s", {"warm_max_bytes": 10_000})
    assert tq.get_queue("s").settings.warm_max_bytes == 10_000
    tq.put_queue("s", {"warm_max": 7})  # other changes keep it
    assert tq.queue_settings("s").warm_max_bytes == 10_000
    with pytest.raises(ValidationError, match="warm_max_bytes"):
        tq.put_queue("s", {"warm_max_bytes": 10})
    assert tq.queue_settings("s").warm_max_bytes == 10_000


# -- Valkey out of memory -------------------------------------------------------------------

FullSwitch = Callable[[bool], None]


@pytest.fixture
def valkey_full(valkey: redis.Redis) -> Iterator[FullSwitch]:
    """``full(True)``: the session's private Redis refuses every write that needs memory
    with a real OOM reply (``maxmemory`` 1 byte, policy ``noeviction``); ``full(False)``
    frees it. The server's settings are restored afterwards."""
    with memory_bound(valkey) as before:
        def full(on: bool) -> None:
            valkey.config_set("maxmemory", 1 if on else before["maxmemory"])

        yield full


def test_an_enqueue_while_valkey_is_full_answers_cold_and_delivers_later(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        valkey_full: FullSwitch) -> None:
    tq = make_tq()
    first = tq.enqueue_one("o", 0)  # the pair is warm, its scripts loaded
    assert first.state == "warm" and mode_of(valkey, "o") == "warm"
    held = tq.claim("o", max=1)
    valkey_full(True)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        valkey.set("probe", "x")  # really full
    out = tq.enqueue("o", [{"payload": n} for n in range(1, 6)])  # warm mode: pushed, OOM
    assert [o.state for o in out] == ["cold"] * 5
    assert count_state(pg, "o", "cold") == 5  # really cold: the mover's to promote
    assert mode_of(valkey, "o") == "cold"  # later work cannot pass them
    out = tq.enqueue("o", [{"payload": n} for n in range(6, 9)])  # cold mode: only Postgres
    assert [o.state for o in out] == ["cold"] * 3
    # what runs keeps running: heartbeats and acks need no memory
    assert tq.heartbeat("o", [{"id": held[0].id, "lease_token": held[0].lease_token}]).extended
    assert tq.ack("o", held).acked
    # the warm set is empty, cold work waits, nothing can be promoted: a claim is refused
    with pytest.raises(WarmTierFull) as refused:
        tq.claim("o", max=10)
    assert refused.value.status == 503 and refused.value.retry_after > 0
    summary = tq.run_cold_to_warm()
    assert summary.promoted == 0
    assert count_state(pg, "o", "cold") == 8  # promoted rows went back to the cold line
    valkey_full(False)
    tq.run_cold_to_warm()
    got = tq.claim("o", max=20)
    assert [t.payload for t in got] == list(range(1, 9))  # all of it, in order
    assert tq.ack("o", got).acked
    assert count_state(pg, "o", "cold") == 0 and warm_bytes(tq, "o") == 0


def test_a_replace_while_valkey_is_full_never_hands_out_the_old_data(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        valkey_full: FullSwitch) -> None:
    tq = make_tq()
    tq.enqueue("r", [{"payload": "old", "key": "a"}, {"payload": "next", "key": "b"}])
    valkey_full(True)
    out = tq.enqueue("r", [{"payload": "new", "key": "a", "on_conflict": "replace"}])
    assert out[0].outcome == "updated"
    assert not tq.ctx.warm.is_ready("r", "_", str(out[0].id))  # left the warm tier
    assert count_state(pg, "r", "cold") == 1
    valkey_full(False)
    payloads = []
    for _ in range(3):
        got = tq.claim("r", max=5)
        payloads.extend(t.payload for t in got)
        tq.ack("r", got)
        tq.run_cold_to_warm()
    assert sorted(payloads) == ["new", "next"]  # delivered, and never with the old payload
    assert_exact(tq, valkey, "r")
