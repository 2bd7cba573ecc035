"""Throughput counts (dal/throughput.py): per (queue, tenant), tasks enqueued and acked per
second over the last 15 minutes, kept in the warm tier on the server's clock.

The same tests run on the Redis Cluster (tests/cluster/test_throughput_on_cluster.py)."""

from __future__ import annotations

import random
import time
from typing import Any

import redis

from tests.integration.helpers import drain
from tierq.dal.throughput import (
    BLOCK_BYTES,
    BLOCK_SLOTS,
    BLOCKS,
    WINDOW_SECONDS,
    Series,
    add_counts,
    rate_key,
    tenants_key,
)
from tierq.engine import Tierq


def series(tq: Tierq, queue: str, tenants: list[str] | None = None) -> Series:
    return tq.ctx.warm.throughput.read(queue, tenants)


def recent(values: list[int], seconds: int = 30) -> int:
    """The sum of the last ``seconds`` buckets (a test's own counts all fall there)."""
    return sum(values[-seconds:])


def block_bytes(minute: int, counts: dict[int, tuple[int, int]]) -> bytes:
    """One block as lua/rate_add.lua writes it: the minute, then (enqueued, acked) per
    second of it."""
    words = [minute] + [0] * (2 * BLOCK_SLOTS)
    for second, (enqueued, acked) in counts.items():
        words[1 + 2 * second], words[2 + 2 * second] = enqueued, acked
    return b"".join(w.to_bytes(4, "big") for w in words)


def test_counts_right_after_enqueue_and_ack_bursts(tq: Tierq) -> None:
    for _ in range(3):
        tq.enqueue("tp", [{"payload": i, "tenant": "acme"} for i in range(25)])
    tq.enqueue("tp", [{"payload": i, "tenant": "beta"} for i in range(7)])
    tasks = tq.claim("tp", max=40, tenant="acme")
    assert len(tasks) == 40
    assert len(tq.ack("tp", tasks[:30]).acked) == 30

    both = series(tq, "tp")
    assert (sum(both.enqueued), sum(both.acked)) == (82, 30)
    assert (recent(both.enqueued), recent(both.acked)) == (82, 30)
    assert len(both.enqueued) == len(both.acked) == WINDOW_SECONDS and both.tenants == 2
    acme, beta = series(tq, "tp", ["acme"]), series(tq, "tp", ["beta"])
    assert (sum(acme.enqueued), sum(acme.acked)) == (75, 30)
    assert (sum(beta.enqueued), sum(beta.acked)) == (7, 0)
    assert sum(series(tq, "tp", ["nobody"]).enqueued) == 0
    assert sum(series(tq, "other").enqueued) == 0


def test_only_created_tasks_and_accepted_acks_count(tq: Tierq) -> None:
    first = tq.enqueue("tp", [{"payload": 1, "key": "k1"}, {"payload": 2, "key": "k2"}])
    again = tq.enqueue("tp", [{"payload": 1, "key": "k1"},  # ignored: k1 is live
                              {"payload": 3, "key": "k2", "on_conflict": "replace"}])
    assert [o.outcome for o in first] == ["created"] * 2
    assert [o.outcome for o in again] == ["ignored", "updated"]
    tasks = tq.claim("tp", max=2)
    assert len(tq.ack("tp", tasks).acked) == 2
    repeat = tq.ack("tp", tasks)  # the leases are gone: not_owner, not counted again
    assert not repeat.acked and len(repeat.rejected) == 2
    # nacks, releases and delayed tasks' arrival are not acks
    tq.enqueue("tp", [{"payload": 4}, {"payload": 5}])
    more = tq.claim("tp", max=2)
    tq.nack("tp", [{"id": more[0].id, "lease_token": more[0].lease_token}])
    tq.release("tp", [more[1]])
    total = series(tq, "tp")
    assert (sum(total.enqueued), sum(total.acked)) == (4, 2)


def test_a_delayed_task_counts_when_it_is_enqueued(tq: Tierq) -> None:
    tq.enqueue("tp", [{"payload": 1, "delay_seconds": 3600}])
    assert sum(series(tq, "tp").enqueued) == 1


def test_the_tenant_index_is_read_a_page_at_a_time(tq: Tierq, valkey: Any) -> None:
    """3,000 tenants noted: every one is read, in several ZSCAN pages, never with one
    command over the whole index."""
    names = [f"t{i:04d}" for i in range(3000)]
    tq.ctx.warm.throughput.record("tp", {t: (1, 0) for t in names})

    def calls(command: str) -> int:
        stats = valkey.info("commandstats").get(f"cmdstat_{command}")
        return int(stats["calls"]) if stats else 0

    scans, ranges = calls("zscan"), calls("zrange")
    assert tq.ctx.warm.throughput.noted_tenants("tp") == names
    assert calls("zscan") - scans > 3 and calls("zrange") == ranges
    assert sum(series(tq, "tp").enqueued) == 3000


def test_the_tenant_index_names_the_tenants_counted(tq: Tierq, valkey: Any) -> None:
    tq.enqueue("tp", [{"payload": 1, "tenant": t} for t in ("a", "b", "c")])
    assert tq.ctx.warm.throughput.noted_tenants("tp") == ["a", "b", "c"]
    assert 0 < valkey.ttl(tenants_key("tp")) <= 1020
    assert 0 < valkey.ttl(rate_key("tp", "a")) <= 960
    assert valkey.strlen(rate_key("tp", "a")) <= BLOCKS * BLOCK_BYTES


def test_the_first_count_of_a_second_renews_the_key_s_life(tq: Tierq, valkey: Any) -> None:
    counts = tq.ctx.warm.throughput
    counts.record("tp", {"x": (1, 0)})
    valkey.expire(rate_key("tp", "x"), 100)
    time.sleep(1.1)  # the next second: its first count sets the TTL again
    counts.record("tp", {"x": (0, 1)})
    assert 900 < valkey.ttl(rate_key("tp", "x")) <= 960
    assert (sum(series(tq, "tp", ["x"]).enqueued), sum(series(tq, "tp", ["x"]).acked)) == (1, 1)


def test_buckets_older_than_15_minutes_are_dropped(tq: Tierq, valkey: Any) -> None:
    """Counts are stamped by the server's clock: blocks written 15 and 16 minutes ago (as
    rate_add.lua would have) are read only for their seconds inside the window, and the
    block of this minute's ring place, last used 16 minutes ago, is cleared before reuse."""
    warm = tq.ctx.warm
    now = int(warm.server_time(rate_key("tp", "old")))
    if now % 60 > 55:  # keep this minute's block and the 15-minute edge apart
        time.sleep(61 - now % 60)
        now = int(warm.server_time(rate_key("tp", "old")))
    minute = now // 60
    blob = bytearray(BLOCKS * BLOCK_BYTES)

    def place(m: int, counts: dict[int, tuple[int, int]]) -> None:
        at = (m % BLOCKS) * BLOCK_BYTES
        blob[at:at + BLOCK_BYTES] = block_bytes(m, counts)

    # 16 minutes ago: this minute's ring place, stale; 15 minutes ago: straddles the window
    place(minute - 16, {s: (1000, 1000) for s in range(BLOCK_SLOTS)})
    place(minute - 15, {s: (1, 2) for s in range(BLOCK_SLOTS)})
    place(minute - 1, {0: (5, 6)})
    valkey.set(rate_key("tp", "old"), bytes(blob))
    tq.ctx.warm.throughput.record("tp", {"old": (3, 4)})
    counted = series(tq, "tp", ["old"])
    end = counted.end
    start = end - WINDOW_SECONDS + 1
    assert end >= now
    # of minute - 15, only the seconds at or after the window's start
    inside = sum(1 for s in range(BLOCK_SLOTS) if (minute - 15) * 60 + s >= start)
    assert sum(counted.enqueued) == inside + 5 + 3
    assert sum(counted.acked) == 2 * inside + 6 + 4
    assert counted.enqueued[(minute - 1) * 60 - start] == 5
    assert recent(counted.enqueued, 5) == 3
    # the stale block was cleared, not added to
    stored = valkey.get(rate_key("tp", "old"))
    at = (minute % BLOCKS) * BLOCK_BYTES
    assert int.from_bytes(stored[at:at + 4], "big") == minute
    words = stored[at + 4:at + BLOCK_BYTES]
    assert sum(int.from_bytes(words[i:i + 4], "big") for i in range(0, len(words), 4)) == 7


def test_add_counts_keeps_the_window_only() -> None:
    end = 1_800_000_000 + 59  # the last second of a minute
    minute = end // 60
    blob = bytearray(BLOCKS * BLOCK_BYTES)
    # minute - 17 shares its ring place with minute - 1 and was never replaced: stale
    for m, counts in ((minute, {59: (1, 1)}), (minute - 15, {0: (7, 7), 59: (2, 3)}),
                      (minute - 17, {30: (9, 9)})):
        at = (m % BLOCKS) * BLOCK_BYTES
        blob[at:at + BLOCK_BYTES] = block_bytes(m, counts)
    enqueued, acked = [0] * WINDOW_SECONDS, [0] * WINDOW_SECONDS
    add_counts(bytes(blob), end, enqueued, acked)
    # the window is (end - 900, end]: second 59 of minute - 15 is end - 900, just outside
    assert enqueued[-1] == 1 and acked[-1] == 1
    assert sum(enqueued) == 1 and sum(acked) == 1
    enqueued, acked = [0] * WINDOW_SECONDS, [0] * WINDOW_SECONDS
    add_counts(bytes(blob), end - 1, enqueued, acked)  # a second earlier: just inside
    assert (enqueued[0], acked[0]) == (2, 3)
    assert sum(enqueued) == 2 and sum(acked) == 3
    # a string shorter than its last block (as BITFIELD leaves it) is read as far as it goes
    enqueued, acked = [0] * WINDOW_SECONDS, [0] * WINDOW_SECONDS
    short = bytes(blob[:(minute % BLOCKS) * BLOCK_BYTES + 4 + 8 * 60])
    add_counts(short, end, enqueued, acked)
    assert sum(enqueued) == 1


def test_a_count_valkey_refuses_never_fails_the_ack(tq: Tierq, valkey: Any) -> None:
    tq.enqueue("tp", [{"payload": 1}])
    valkey.delete(rate_key("tp", "_"))
    valkey.hset(rate_key("tp", "_"), "not", "a string")  # WRONGTYPE for BITFIELD
    tasks = tq.claim("tp", max=1)
    assert len(tq.ack("tp", tasks).acked) == 1
    assert tq.enqueue("tp", [{"payload": 2}])[0].outcome == "created"
    assert valkey.type(rate_key("tp", "_")) in (b"hash", "hash")
    assert len(drain(tq, "tp")) == 1


def test_scripts_the_server_forgot_are_loaded_again(tq: Tierq, valkey: Any) -> None:
    tq.enqueue("tp", [{"payload": 1}])
    flush_scripts(valkey)
    tasks = tq.claim("tp", max=1)
    flush_scripts(valkey)
    assert len(tq.ack("tp", tasks).acked) == 1
    flush_scripts(valkey)
    tq.enqueue("tp", [{"payload": 2}])
    counted = series(tq, "tp")
    assert (sum(counted.enqueued), sum(counted.acked)) == (2, 1)


def flush_scripts(valkey: Any) -> None:
    if isinstance(valkey, redis.Redis):
        valkey.script_flush()
    else:  # a cluster client: every master
        for node in valkey.get_primaries():
            node.redis_connection.script_flush()


def test_add_counts_agrees_with_a_second_by_second_reading() -> None:
    """Random rings (stale, current and partly-outside blocks, strings cut short) read as
    the plain definition says: every second of the window, from the block stamped with its
    minute."""
    rng = random.Random(7)
    for _ in range(200):
        end = 1_800_000_000 + rng.randrange(10_000)
        minute = end // 60
        blob = bytearray(BLOCKS * BLOCK_BYTES)
        for m in rng.sample(range(minute - 20, minute + 1), 10):
            at = (m % BLOCKS) * BLOCK_BYTES
            blob[at:at + BLOCK_BYTES] = block_bytes(m, {
                s: (rng.randrange(5), rng.randrange(5)) for s in rng.sample(range(60), 20)})
        blob = blob[:rng.choice([len(blob), rng.randrange(len(blob) // 4) * 4])]
        enqueued, acked = [0] * WINDOW_SECONDS, [0] * WINDOW_SECONDS
        add_counts(bytes(blob), end, enqueued, acked)
        expected_e, expected_a = [0] * WINDOW_SECONDS, [0] * WINDOW_SECONDS
        for i, second in enumerate(range(end - WINDOW_SECONDS + 1, end + 1)):
            at = (second // 60 % BLOCKS) * BLOCK_BYTES
            word = at + 4 + 8 * (second % 60)
            if len(blob) >= word + 8 and int.from_bytes(blob[at:at + 4], "big") == second // 60:
                expected_e[i] = int.from_bytes(blob[word:word + 4], "big")
                expected_a[i] = int.from_bytes(blob[word + 4:word + 8], "big")
        assert (enqueued, acked) == (expected_e, expected_a)
