"""The scheduled functions over three shards (TIERQ_SHARD_URLS): each tick runs its job on
every shard under the shard's own budget, and a shard that does not answer delays only its
own pairs (named in the tick's ``shards_down``) while the others' are moved, reaped and
dispatched; the reaper's gauges are one value per queue, summed over the shards."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator

import psycopg
import pytest
import redis

from tests.dispatch.journal import JOURNAL
from tests.shards.conftest import ShardedFactory
from tests.support.every_task import EVERY_TASK
from tierq.aws import metrics, runtime
from tierq.aws.runtime import engine, reset_engine, shard_engines, use_consumers
from tierq.aws.scheduled import jobs
from tierq.dal.shards import ShardSpec
from tierq.local.consumers import LocalFunctions
from tierq.logic.wake import FLAG_KEY
from tierq.maintenance.dispatcher import forget_dispatcher
from tierq.sharded import ShardedTierq

TENANTS = [f"t{i}" for i in range(12)]
DOWN_URL = "postgresql://nobody@127.0.0.1:9/nothing?connect_timeout=1"
UseShards = Callable[[list[ShardSpec]], ShardedTierq]


def forget_engine() -> None:
    if runtime._engine is not None:
        for tq in shard_engines().values():  # (their dispatchers hold their databases)
            forget_dispatcher(tq.ctx)
    reset_engine()


@pytest.fixture
def use_shards(make_sharded: ShardedFactory, shard_specs: list[ShardSpec], valkey_url: str,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[UseShards]:
    """The functions' environment over the three shards (their homes in service, the warm
    tier empty); ``use_shards(specs)`` serves other URLs from the next call on."""
    make_sharded()
    monkeypatch.setenv("VALKEY_URL", valkey_url)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("DB_SECRET_ARN", raising=False)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setenv("TIERQ_SETTINGS_CACHE_SECONDS", "0")
    monkeypatch.setenv("TIERQ_DB_POOL_TIMEOUT", "2")

    def use(specs: list[ShardSpec]) -> ShardedTierq:
        forget_engine()
        monkeypatch.setenv("TIERQ_SHARD_URLS", ",".join(f"{s.name}={s.url}" for s in specs))
        current = engine()
        assert isinstance(current, ShardedTierq)
        return current

    use(shard_specs[:3])
    yield use
    forget_engine()


def states(specs: list[ShardSpec], queue: str) -> dict[str, Counter[tuple[str, int]]]:
    """Per shard: (state, attempts) of the queue's tasks, counted (a member still in its
    batch row has no attempt recorded: 0, as its row would have)."""
    out = {}
    for spec in specs:
        with psycopg.connect(spec.url) as conn:
            out[spec.name] = Counter(conn.execute(
                f"SELECT every_task.state, coalesce(r.attempts, 0) FROM {EVERY_TASK}"
                " LEFT JOIN tierq_tasks r ON r.id = every_task.id"
                " WHERE every_task.queue = %s", (queue,)).fetchall())
    return out


def with_blue_down(specs: list[ShardSpec]) -> list[ShardSpec]:
    return [*specs[:2], ShardSpec(specs[2].name, DOWN_URL)]


def split(tq: ShardedTierq, queue: str, down: str) -> tuple[list[str], list[str]]:
    homes = {t: tq.homes.home_of(queue, t, create=False) for t in TENANTS}
    on_down = [t for t in TENANTS if homes[t] == down]
    elsewhere = [t for t in TENANTS if homes[t] != down]
    assert on_down and elsewhere
    return on_down, elsewhere


def test_moves_and_reaps_per_shard_a_down_shard_delays_only_its_pairs(
        use_shards: UseShards, shard_specs: list[ShardSpec],
        monkeypatch: pytest.MonkeyPatch) -> None:
    specs = shard_specs[:3]
    blue = specs[2].name
    tq = use_shards(specs)
    for queue in ("later", "leased"):  # configured by an admin: their gauges carry their names
        tq.put_queue(queue, {})
    tq.enqueue("later", [{"payload": t, "tenant": t, "delay_seconds": 1} for t in TENANTS])
    tq.enqueue("leased", [{"payload": t, "tenant": t} for t in TENANTS])
    assert len(tq.claim("leased", max=50, lease_seconds=1)) == len(TENANTS)
    on_blue, elsewhere = split(tq, "later", blue)
    leased_on_blue, leased_elsewhere = split(tq, "leased", blue)
    gauged: list[tuple[str, dict[str, float]]] = []
    monkeypatch.setattr(metrics, "queue_gauge",
                        lambda queue, values: gauged.append((queue, dict(values))))
    down_said: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(metrics, "shard_down",
                        lambda job, shards: down_said.append((job, list(shards))))

    use_shards(with_blue_down(specs))
    time.sleep(1.1)  # the delays and the leases are over
    moved = jobs.JobTick("delayed_mover")()
    assert list(moved["shards_down"]) == [blue]
    assert moved["moved"] == len(elsewhere)
    reaped = jobs.ReaperTick()()
    assert list(reaped["shards_down"]) == [blue]
    assert reaped["expired"] == reaped["requeued"] == len(leased_elsewhere)
    assert down_said == [("delayed_mover", [blue]), ("reaper", [blue])]  # ShardDown
    # one value per queue, of the shards that answered (each shard's round is new)
    assert dict(gauged)["later"]["warm"] == len(elsewhere)
    assert (dict(gauged)["leased"]["warm"], dict(gauged)["leased"]["leased"]) == (
        len(leased_elsewhere), 0)
    assert sorted(q for q, _ in gauged) == ["later", "leased"]
    assert reaped["gauged_queues"] == 2
    got = states(specs, "later")
    assert got[blue] == Counter({("delayed", 0): len(on_blue)})  # waited, untouched
    assert sum(got[n][("warm", 0)] for n in got if n != blue) == len(elsewhere)
    got = states(specs, "leased")
    assert got[blue] == Counter({("warm", 0): len(leased_on_blue)})  # its leases unexpired
    assert sum(got[n][("warm", 1)] for n in got if n != blue) == len(leased_elsewhere)

    gauged.clear()
    use_shards(specs)  # blue is back: its pairs catch up, the others have nothing to do
    moved = jobs.JobTick("delayed_mover")()
    assert (moved["moved"], moved["shards_down"]) == (len(on_blue), {})
    reaped = jobs.ReaperTick()()
    assert (reaped["expired"], reaped["shards_down"]) == (len(leased_on_blue), {})
    assert len(down_said) == 2  # nothing more once every shard answers
    assert sorted(q for q, _ in gauged) == ["later", "leased"]
    assert all(values["warm"] == len(TENANTS) for _, values in gauged)  # summed
    every = sum(states(specs, "leased").values(), Counter())
    assert every == Counter({("warm", 1): len(TENANTS)})


def test_the_dispatcher_delivers_every_shards_pairs_and_skips_a_down_one(
        use_shards: UseShards, shard_specs: list[ShardSpec], valkey: redis.Redis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tierq.aws.scheduled.jobs import handle

    monkeypatch.setenv("TIERQ_DISPATCHER_IDLE_SECONDS", "0.5")
    local = LocalFunctions()
    previous = use_consumers(local)
    JOURNAL.reset()
    try:
        specs = shard_specs[:3]
        blue = specs[2].name
        tq = use_shards(specs)
        tq.put_queue("pushed", {"consumer": {"function": "tests.dispatch.consumers:fail_once",
                                             "batch_size": 5, "max_concurrency": 2},
                                "backoff": {"kind": "fixed", "base_seconds": 0, "jitter": 0}})
        tq.enqueue("pushed", [{"payload": {"n": n, "fail_once": n < 3}, "tenant": t}
                              for n, t in enumerate(TENANTS * 2)])
        on_blue, elsewhere = split(tq, "pushed", blue)
        event = {"source": "tierq.scheduler", "job": "dispatcher", "max_seconds": 20}

        use_shards(with_blue_down(specs))
        report = handle("dispatcher", event, None)
        assert list(report["shards_down"]) == [blue]
        assert report["acked"] == 2 * len(elsewhere) and report["drained"]
        assert valkey.get(FLAG_KEY) is None  # let go of the one flag
        left = states(specs, "pushed")
        assert sum(left[blue].values()) == 2 * len(on_blue)
        assert all(not left[n] for n in left if n != blue)

        use_shards(specs)
        report = handle("dispatcher", event, None)
        assert report["shards_down"] == {}
        assert report["acked"] == 2 * len(on_blue)
        assert all(not c for c in states(specs, "pushed").values())
        # each task ran once, those that fail once twice
        assert Counter(JOURNAL.runs.values()) == Counter({1: 2 * len(TENANTS) - 3, 2: 3})
    finally:
        use_consumers(previous)
        JOURNAL.reset()
