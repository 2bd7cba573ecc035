"""The engine over three shards (tierq.sharded): pairs spread over every shard and each
pair's tasks stay on its home; the core guarantees hold per pair (FIFO, dedup by key,
retries, nothing lost, no task handed out twice within a lease); ids tell their shard;
maintenance runs per shard; adding a shard moves no pair; a stopped shard fails only its
own pairs (503) while the others go on."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.shards.conftest import SHARD_NAMES, ShardedFactory
from tests.support.every_task import EVERY_TASK
from tierq.config import Settings
from tierq.dal.migrate import migrate
from tierq.dal.shards import ShardSpec, tag_of
from tierq.errors import WarmTierUnavailable
from tierq.local.services import PrivatePostgres
from tierq.logic import ready_tenants
from tierq.logic.homes import ShardDown
from tierq.sharded import ShardedTierq

TENANTS = [f"t{i}" for i in range(12)]
DOWN_URL = "postgresql://nobody@127.0.0.1:9/nothing?connect_timeout=1"


def rows_by_shard(specs: list[ShardSpec]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for spec in specs:
        with psycopg.connect(spec.url) as conn:
            out[spec.name] = Counter(dict(conn.execute(
                f"SELECT tenant, count(*) FROM {EVERY_TASK} GROUP BY tenant").fetchall()))
    return out


def signal_server(postmaster: int, signum: int) -> None:
    """Signal a PostgreSQL server's postmaster and each of its processes (each backend is
    in a session of its own: a process group signal would miss them)."""
    children = [int(pid) for pid in Path(f"/proc/{postmaster}/task/{postmaster}/children")
                .read_text().split()]
    for pid in (postmaster, *children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def drain(tq: ShardedTierq, queue: str) -> list[Any]:
    claimed = []
    while batch := tq.claim(queue, max=7):
        claimed.extend(batch)
        assert not tq.ack(queue, batch).rejected
    return claimed


def test_pairs_spread_over_every_shard_and_stay_home(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec]) -> None:
    tq = make_sharded()
    for n in range(5):
        outcomes = tq.enqueue("q", [{"payload": {"n": n, "t": t}, "tenant": t}
                                    for t in TENANTS])
        assert [o.tenant for o in outcomes] == TENANTS  # the request's order
    homes = {t: tq.homes.home_of("q", t) for t in TENANTS}
    assert set(homes.values()) == set(SHARD_NAMES)
    rows = rows_by_shard(shard_specs[:3])
    for tenant, home in homes.items():
        assert rows[home][tenant] == 5
        assert all(rows[n][tenant] == 0 for n in SHARD_NAMES if n != home)
    # each shard's queue-wide claims visit the tenants homed there (its own index)
    for name, engine in tq.engines.items():
        assert ready_tenants.tenants_after(engine.ctx, "q", None, 100) == sorted(
            t for t, home in homes.items() if home == name)
    claimed = drain(tq, "q")
    assert len(claimed) == len({c.id for c in claimed}) == 60  # nothing lost, none twice
    per_tenant: dict[str, list[int]] = defaultdict(list)
    for task in claimed:
        per_tenant[task.tenant].append(task.payload["n"])
        assert tq.by_tag[tag_of(str(task.id))] == homes[task.tenant]  # the id tells
    assert all(order == sorted(order) for order in per_tenant.values())  # FIFO per pair
    assert tq.get_queue("q").counts.model_dump() == {
        "warm": 0, "waiting": 0, "held": 0, "cold": 0, "delayed": 0, "leased": 0, "dead": 0}


def test_keys_retries_and_status_route_to_the_pair(make_sharded: ShardedFactory) -> None:
    tq = make_sharded(backoff_base_seconds=0.0, backoff_jitter=0.0)
    first = tq.enqueue("q", [{"payload": i, "tenant": t, "key": "k"} for i, t in
                             enumerate(TENANTS)])
    again = tq.enqueue("q", [{"payload": 99, "tenant": t, "key": "k"} for t in TENANTS])
    assert [o.outcome for o in again] == ["ignored"] * len(TENANTS)
    assert [o.id for o in again] == [o.id for o in first]
    assert tq.get_task("q", first[3].id).tenant == TENANTS[3]
    claimed = tq.claim("q", max=len(TENANTS))
    assert len(claimed) == len(TENANTS)
    result = tq.nack("q", [{"id": c.id, "lease_token": c.lease_token} for c in claimed])
    assert len(result.retried) == len(TENANTS) and not result.rejected
    retried = tq.claim("q", max=len(TENANTS), wait_seconds=5)
    assert {c.attempt for c in retried} == {2}
    beat = tq.heartbeat("q", [{"id": c.id, "lease_token": c.lease_token} for c in retried])
    assert len(beat.extended) == len(TENANTS)
    assert len(tq.release("q", retried[:2]).released) == 2
    one = tq.claim("q", tenant=retried[0].tenant, max=5)
    assert [c.id for c in one] == [retried[0].id]
    forged = tq.ack("q", [{"id": first[0].id, "lease_token": "nobody~x~1~0"}])
    assert forged.rejected and not forged.acked


def test_maintenance_runs_on_every_shard(make_sharded: ShardedFactory) -> None:
    tq = make_sharded()
    tq.enqueue("q", [{"payload": 1, "tenant": t, "delay_seconds": 30} for t in TENANTS])
    assert tq.claim("q", max=50) == []
    for engine in tq.engines.values():
        engine.ctx.clock.advance(31)  # type: ignore[attr-defined]
    run = tq.run_job("delayed_mover")
    assert set(run.by_shard) == set(SHARD_NAMES)
    assert not run.down
    assert run.summary().moved == len(TENANTS)  # the shards' summaries added up
    assert len(drain(tq, "q")) == len(TENANTS)


def test_queue_settings_are_one_answer_on_every_shard(make_sharded: ShardedFactory) -> None:
    tq = make_sharded()
    tq.put_queue("q", {"max_attempts": 7, "tenant_max_leased": 3})
    for engine in tq.engines.values():
        settings = engine.queue_settings("q")
        assert (settings.max_attempts, settings.tenant_max_leased) == (7, 3)


def test_adding_a_shard_moves_no_pair_with_rows(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec]) -> None:
    three = make_sharded()
    three.enqueue("q", [{"payload": t, "tenant": t} for t in TENANTS])
    homes = {t: three.homes.home_of("q", t) for t in TENANTS}
    four = make_sharded(specs=shard_specs)  # sync: yellow gets every home
    assert {t: four.homes.home_of("q", t) for t in TENANTS} == homes
    assert rows_by_shard(shard_specs[3:])["yellow"] == Counter()
    assert len(drain(four, "q")) == len(TENANTS)
    new = [f"n{i}" for i in range(40)]
    four.enqueue("q", [{"payload": t, "tenant": t} for t in new])
    assert "yellow" in {four.homes.home_of("q", t) for t in new}


def test_migrations_are_applied_to_every_shard(make_sharded: ShardedFactory) -> None:
    tq = make_sharded()
    assert tq.migrate() == {name: [] for name in SHARD_NAMES}  # (all applied already)


def test_a_stopped_shard_fails_only_its_own_pairs(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec], session_dir: Path) -> None:
    private = PrivatePostgres(session_dir / "blue-shard")  # (a folder the postgres user enters)
    private.start()
    try:
        migrate(private.url)
        specs = [*shard_specs[:2], ShardSpec("blue", private.url)]
        tq = make_sharded(specs=specs, db_pool_timeout=2.0)
        tq.enqueue("q", [{"payload": t, "tenant": t} for t in TENANTS])
        homes = {t: tq.homes.home_of("q", t) for t in TENANTS}
        on_blue = [t for t in TENANTS if homes[t] == "blue"]
        elsewhere = [t for t in TENANTS if homes[t] != "blue"]
        assert on_blue and elsewhere
        private.stop()
        tq.engines["blue"].db.pool.close()  # (its open sessions end with the server)
        for tenant in on_blue:
            with pytest.raises(ShardDown) as down:
                tq.enqueue("q", [{"payload": "more", "tenant": tenant}])
            assert down.value.status == 503
        more = tq.enqueue("q", [{"payload": "more", "tenant": t} for t in elsewhere])
        assert len(more) == len(elsewhere)
        claimed = drain(tq, "q")  # the claims go on over the shards that answer
        assert Counter(c.tenant for c in claimed) == Counter({t: 2 for t in elsewhere})
        run = tq.run_job("reaper")
        assert set(run.down) == {"blue"} and set(run.answered) == {"red", "green"}
        with pytest.raises(ShardDown):
            run.summary()
    finally:
        private.stop()


@pytest.mark.parametrize("claim", ["one tenant", "over the tenants"])
def test_a_claim_answered_past_its_deadline_gives_its_tasks_back(
        make_sharded: ShardedFactory, claim: str) -> None:
    """A shard whose claim outlasts the call's deadline is 503 for that claim; when the
    claim completes after all, its tasks go back in line at once without an attempt (held
    by nobody, their leases would have kept them out of line until they expired, each an
    attempt lost)."""
    tq = make_sharded()
    tq.call_seconds, tq.suspect_seconds = 0.5, 0.0
    tq.enqueue("q", [{"payload": t, "tenant": t} for t in TENANTS])
    slow = tq.homes.home_of("q", TENANTS[0])
    assert slow is not None
    on_slow = [t for t in TENANTS if tq.homes.home_of("q", t) == slow]
    engine = tq.engines[slow]
    real = engine.claim_outcome
    late: list[int] = []

    def claim_late(*args: Any, **kwargs: Any) -> Any:
        time.sleep(1.0)  # past call_seconds: the caller has given up
        outcome = real(*args, **kwargs)
        late.append(len(outcome.tasks))
        return outcome

    engine.claim_outcome = claim_late  # type: ignore[method-assign]
    try:
        if claim == "one tenant":
            with pytest.raises(ShardDown):
                tq.claim("q", tenant=on_slow[0], max=5)
        else:
            got = tq.claim("q", max=len(TENANTS))  # the other shards answer
            assert {c.tenant for c in got}.isdisjoint(on_slow)
            tq.ack("q", got)
        deadline = time.monotonic() + 5
        while not late and time.monotonic() < deadline:
            time.sleep(0.05)
        assert late and late[0] >= 1  # the late claim leased tasks
    finally:
        del engine.claim_outcome
    again: list[Any] = []
    deadline = time.monotonic() + 10  # (its give-back runs right after it, on its thread)
    while len(again) < len(on_slow) and time.monotonic() < deadline:
        again += [c for t in on_slow for c in tq.claim("q", tenant=t, max=5)]
        time.sleep(0.02)
    assert sorted(c.tenant for c in again) == sorted(on_slow)  # none held by nobody
    assert {c.attempt for c in again} == {1}  # no attempt counted for the late claim


def test_a_claim_given_up_on_before_it_started_never_runs(
        make_sharded: ShardedFactory) -> None:
    """A claim still waiting for a thread of the calls' pool when its deadline passes is
    cancelled: it leases nothing later (on a shard that was just marked suspect)."""
    tq = make_sharded()
    tq.call_seconds, tq.suspect_seconds = 0.3, 0.0
    tq.enqueue("q", [{"payload": t, "tenant": t} for t in TENANTS])
    home = tq.homes.home_of("q", TENANTS[0])
    assert home is not None
    engine = tq.engines[home]
    real = engine.claim_outcome
    ran: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        ran.append(1)
        return real(*args, **kwargs)

    engine.claim_outcome = counted  # type: ignore[method-assign]
    release = threading.Event()
    busy = [tq._calls.submit(release.wait) for _ in range(tq._calls._max_workers)]
    try:
        with pytest.raises(ShardDown):
            tq.claim("q", tenant=TENANTS[0], max=5)
    finally:
        release.set()
        for waiting in busy:
            waiting.result(timeout=10)
    tq._calls.submit(lambda: None).result(timeout=10)  # (the queue behind them has run)
    assert ran == []  # the claim given up on never ran
    del engine.claim_outcome
    [task] = tq.claim("q", tenant=TENANTS[0], max=5)
    assert task.attempt == 1


def test_a_hung_shard_fails_only_its_own_pairs_in_time_and_loses_nothing(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec], session_dir: Path) -> None:
    private = PrivatePostgres(session_dir / "green-shard")
    private.start()
    pid = private.pid
    assert pid is not None
    try:
        migrate(private.url)
        specs = [shard_specs[0], ShardSpec("green", private.url), shard_specs[2]]
        tq = make_sharded(specs=specs, db_pool_timeout=2.0)
        tq.call_seconds, tq.suspect_seconds = 2.0, 1.0
        tq.enqueue("q", [{"payload": t, "tenant": t} for t in TENANTS])
        homes = {t: tq.homes.home_of("q", t) for t in TENANTS}
        on_green = [t for t in TENANTS if homes[t] == "green"]
        elsewhere = [t for t in TENANTS if homes[t] != "green"]
        assert on_green and elsewhere
        signal_server(pid, signal.SIGSTOP)  # the postmaster and every backend: nothing answers
        try:
            started = time.monotonic()
            with pytest.raises(ShardDown):
                tq.enqueue("q", [{"payload": "more", "tenant": on_green[0]}])
            assert time.monotonic() - started < 2.0 + 1.5  # within the call's limit
            more = tq.enqueue("q", [{"payload": "more", "tenant": t} for t in elsewhere])
            assert len(more) == len(elsewhere)
            while batch := tq.claim("q", max=7):  # the other shards' pairs go on
                assert {c.tenant for c in batch} <= set(elsewhere)
                tq.ack("q", batch)
        finally:
            signal_server(pid, signal.SIGCONT)
        time.sleep(1.1)  # the suspect period
        left = Counter(c.tenant for c in drain(tq, "q"))  # green's tasks were all kept
        # (the enqueue given up on ran once the server went on: its answer was lost, not
        # its task — which a retry with an Idempotency-Key or a task key would not repeat)
        assert left[on_green[0]] in (1, 2)
        assert left - Counter({on_green[0]: left[on_green[0]]}) == Counter(
            {t: 1 for t in on_green[1:]})
    finally:
        private.stop()


def test_a_pinned_long_poll_waits_for_a_pair_born_meanwhile(
        make_sharded: ShardedFactory) -> None:
    tq = make_sharded()
    assert tq.homes.home_of("born-late", "t", create=False) is None

    def produce() -> None:
        time.sleep(0.3)
        tq.enqueue("born-late", [{"payload": "first"}], tenant="t")

    producer = threading.Thread(target=produce)
    producer.start()
    got = tq.claim("born-late", tenant="t", max=1, wait_seconds=10)
    producer.join()
    assert [t.payload for t in got] == ["first"]  # not an empty answer at once


def test_a_shard_call_keeps_the_warm_tiers_own_error(shard_specs: list[ShardSpec],
                                                    make_sharded: ShardedFactory) -> None:
    make_sharded()  # the homes in service
    dead_cache = Settings(valkey_url="redis://127.0.0.1:9/0", settings_cache_seconds=0.0)
    # not "the database shard does not answer"
    with ShardedTierq(shard_specs[:3], settings=dead_cache) as tq, \
            pytest.raises(WarmTierUnavailable):
        tq.enqueue("cacheless", [{"payload": 1}], tenant="t")


def test_putting_a_schedule_with_a_shard_down_removes_nothing(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec], valkey_url: str) -> None:
    tq = make_sharded()
    body = {"tenant": "t", "every_seconds": 3600, "payload": {}}
    queues = {tq.homes.home_of(q, "t"): q for q in (f"sq{n}" for n in range(40))}
    first_home, second_home = list(queues)[:2]
    tq.put_schedule("hourly", {**body, "queue": queues[first_home]})
    down = [spec if spec.name != second_home else ShardSpec(spec.name, DOWN_URL)
            for spec in shard_specs[:3]]
    settings = Settings(valkey_url=valkey_url, settings_cache_seconds=0.0)
    with ShardedTierq(down, settings=settings) as partial_view, pytest.raises(ShardDown):
        partial_view.put_schedule("hourly", {**body, "queue": queues[second_home]})
    kept = tq.get_schedule("hourly", "t")  # its old copy was not removed first
    assert kept.queue == queues[first_home]
