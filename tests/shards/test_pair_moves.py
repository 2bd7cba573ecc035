"""A pair's drained move to another shard (tierq.logic.pair_moves, ``tierq shards move``):
new work is refused while its tasks are worked off where they are, then its home changes on
every shard and new work goes there — nothing lost, nothing left behind, and a move that
stopped half way is finished (or given up) by running it again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
import redis
from typer.testing import CliRunner

from tests.maintenance.test_gauges import Emitted
from tests.shards.conftest import ShardedFactory
from tests.support.every_task import EVERY_TASK
from tierq.cli import app
from tierq.config import get_settings
from tierq.dal.shards import ShardSpec, rendezvous_order, tag_of
from tierq.dal.store.rows import HomeState
from tierq.dal.warm_tier import PairKeys
from tierq.errors import InvalidInput, NotFound
from tierq.logic.bulk import ShardedBulkLoad, load_id
from tierq.logic.homes import PairMoving
from tierq.logic.pair_moves import MoveRefused, MoveTimedOut
from tierq.maintenance import gauges
from tierq.maintenance.gauges import GaugeRound
from tierq.maintenance.reaper import ReaperSummary
from tierq.sharded import ShardedTierq

QUEUE = "moving"
TENANT = "acme"
FAST = {"home_cache_seconds": 0.2}


def quick(tq: ShardedTierq) -> ShardedTierq:
    """A move's settle is the home cache plus the call deadline: a short deadline here."""
    tq.call_seconds = 0.5
    return tq


def states(tq: ShardedTierq, queue: str = QUEUE, tenant: str = TENANT
           ) -> dict[str, HomeState | None]:
    return {name: e.ctx.store.home_state(queue, tenant) for name, e in tq.engines.items()}


def registered_on(spec: ShardSpec, queue: str = QUEUE, tenant: str = TENANT) -> bool:
    with psycopg.connect(spec.url) as conn:
        row = conn.execute("SELECT count(*) FROM tierq_queue_tenants WHERE queue = %s "
                           "AND tenant = %s", (queue, tenant)).fetchone()
    assert row is not None
    return bool(row[0])


def other_shard(tq: ShardedTierq, home: str) -> str:
    return next(name for name in tq.engines if name != home)


def wait_for(predicate: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_move_refuses_new_work_drains_then_switches_every_copy(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec]) -> None:
    tq = quick(make_sharded(**FAST))
    other_process = make_sharded(**FAST)
    tq.enqueue(QUEUE, [{"payload": {"n": n}} for n in range(20)], tenant=TENANT)
    home = tq.homes.home_of(QUEUE, TENANT, create=False)
    assert home is not None
    to = other_shard(tq, home)
    assert other_process.homes.home_of(QUEUE, TENANT) == home  # cached there
    held = tq.claim(QUEUE, tenant=TENANT, max=5)  # leases that outlive the close
    before_tag = tag_of(str(held[0].id))

    said: list[str] = []
    outcome: dict[str, Any] = {}

    def move() -> None:
        try:
            outcome["summary"] = tq.move_pair(QUEUE, TENANT, to, drain_seconds=30,
                                              poll_seconds=0.05, say=said.append)
        except Exception as exc:  # reported by the assertions below
            outcome["error"] = exc

    mover = threading.Thread(target=move)
    mover.start()
    wait_for(lambda: all(s is not None and s.moving_to == to for s in states(tq).values()))
    time.sleep(0.3)  # past the other process's home cache
    for engine in (tq, other_process):
        with pytest.raises(PairMoving) as refused:
            engine.enqueue(QUEUE, [{"payload": "late"}], tenant=TENANT)
        assert refused.value.status == 503 and refused.value.code == "pair_moving"
    with pytest.raises(PairMoving):
        tq.put_schedule("nightly", {"queue": QUEUE, "tenant": TENANT,
                                    "every_seconds": 60, "payload": {}})
    with pytest.raises(PairMoving), tq.bulk_load(QUEUE, rows=1, tenants=[TENANT]):
        pass
    tq.enqueue(QUEUE, [{"payload": "elsewhere"}], tenant="another")  # other pairs go on

    # the old home still serves what it holds: claims, acks, heartbeats
    assert not tq.heartbeat(QUEUE, [{"id": t.id, "lease_token": t.lease_token,
                                     "extend_seconds": 30} for t in held]).rejected
    worked = len(held)
    while batch := other_process.claim(QUEUE, tenant=TENANT, max=4):
        assert all(tag_of(str(t.id)) == before_tag for t in batch)
        assert not other_process.ack(QUEUE, batch).rejected
        worked += len(batch)
    wait_for(lambda: any("ready or leased left" in line for line in said))
    assert "error" not in outcome and "summary" not in outcome  # leases still held
    assert not tq.ack(QUEUE, held).rejected
    mover.join(timeout=30)
    assert "error" not in outcome, outcome
    summary = outcome["summary"]
    assert (summary.from_shard, summary.to_shard, summary.moved) == (home, to, True)
    assert worked == 20

    assert set(states(tq).values()) == {HomeState(to, None)}
    spec_of = {spec.name: spec for spec in shard_specs}
    assert not registered_on(spec_of[home])
    # new work goes to the new home, from every process, and is served there
    for engine in (tq, other_process):
        outcome_ = engine.enqueue(QUEUE, [{"payload": "after"}], tenant=TENANT)[0]
        assert tag_of(str(outcome_.id)) == spec_of[to].tag
    assert registered_on(spec_of[to])
    got = other_process.claim(QUEUE, tenant=TENANT, max=10)
    assert [t.payload for t in got] == ["after", "after"]
    assert not other_process.ack(QUEUE, got).rejected
    counts = tq.tenant_queue(QUEUE, TENANT).counts
    assert (counts.warm, counts.cold, counts.delayed, counts.leased) == (0, 0, 0, 0)
    # the new home, not the old, is what a fresh process finds
    assert make_sharded(**FAST).homes.home_of(QUEUE, TENANT, create=False) == to


def test_schedules_and_dead_letters_refuse_a_move_up_front(
        make_sharded: ShardedFactory) -> None:
    tq = quick(make_sharded(**FAST))
    tq.put_schedule("hourly", {"queue": QUEUE, "tenant": TENANT, "every_seconds": 3600,
                               "payload": {}})
    home = tq.homes.home_of(QUEUE, TENANT, create=False)
    assert home is not None
    to = other_shard(tq, home)
    with pytest.raises(MoveRefused, match="1 schedules") as refused:
        tq.move_pair(QUEUE, TENANT, to)
    assert refused.value.details[0]["field"] == "schedules"
    assert set(states(tq).values()) == {HomeState(home, None)}  # nothing changed
    tq.delete_schedule("hourly", TENANT)

    tq.enqueue(QUEUE, [{"payload": 1, "max_attempts": 1}], tenant=TENANT)
    task = tq.claim(QUEUE, tenant=TENANT, max=1)[0]
    assert tq.nack(QUEUE, [{"id": task.id, "lease_token": task.lease_token,
                            "error": "boom"}]).dead
    with pytest.raises(MoveRefused, match="1 dead letters"):
        tq.move_pair(QUEUE, TENANT, to)
    tq.enqueue(QUEUE, [{"payload": 2}], tenant=TENANT)  # still open for work

    for engine in tq.engines.values():
        with engine.db.connection() as conn:
            conn.execute("DELETE FROM tierq_tasks WHERE queue = %s AND state = 'dead'",
                         (QUEUE,))
    tq.enqueue(QUEUE, [{"payload": 3, "run_at": time.time() + 7200}], tenant=TENANT)
    with pytest.raises(MoveRefused, match="delayed tasks due as late as"):
        tq.move_pair(QUEUE, TENANT, to, drain_seconds=60)
    with pytest.raises(InvalidInput, match="no shard named 'purple'"):
        tq.move_pair(QUEUE, TENANT, "purple")
    with pytest.raises(NotFound, match="has no home"):
        tq.move_pair(QUEUE, "nobody-yet", to)
    assert not tq.move_pair(QUEUE, TENANT, home).moved  # already there


def test_a_pair_that_does_not_drain_in_time_is_reopened_where_it_is(
        make_sharded: ShardedFactory) -> None:
    tq = quick(make_sharded(**FAST))
    tq.enqueue(QUEUE, [{"payload": 1}, {"payload": 2}], tenant=TENANT)
    home = tq.homes.home_of(QUEUE, TENANT, create=False)
    assert home is not None
    with pytest.raises(MoveTimedOut, match="2 ready or leased left"):
        tq.move_pair(QUEUE, TENANT, other_shard(tq, home), drain_seconds=0.3,
                     poll_seconds=0.05)
    assert set(states(tq).values()) == {HomeState(home, None)}
    tq.enqueue(QUEUE, [{"payload": 3}], tenant=TENANT)
    assert [t.payload for t in tq.claim(QUEUE, tenant=TENANT, max=5)] == [1, 2, 3]


def test_a_move_stopped_half_way_is_finished_or_given_up_by_running_it_again(
        make_sharded: ShardedFactory) -> None:
    tq = quick(make_sharded(**FAST))
    tq.enqueue(QUEUE, [{"payload": 1}], tenant=TENANT)
    home = tq.homes.home_of(QUEUE, TENANT, create=False)
    assert home is not None
    to = other_shard(tq, home)
    third = next(n for n in tq.engines if n not in (home, to))
    # closed on every shard, then the process stopped: giving up reopens it where it is
    for engine in tq.engines.values():
        engine.ctx.store.home_close(QUEUE, TENANT, home, to)
    with pytest.raises(MoveRefused, match=f"already moving to shard '{to}'"):
        tq.move_pair(QUEUE, TENANT, third)
    assert tq.give_up_move(QUEUE, TENANT)
    assert set(states(tq).values()) == {HomeState(home, None)}
    assert not tq.give_up_move(QUEUE, TENANT)

    # closed, drained and switched on the old home only, then stopped: run again, finished
    done = tq.claim(QUEUE, tenant=TENANT, max=1)
    assert not tq.ack(QUEUE, done).rejected
    for engine in tq.engines.values():
        engine.ctx.store.home_close(QUEUE, TENANT, home, to)
    switched = tq.engines[home].ctx.store.pair_switch_drained(QUEUE, TENANT, to, home)
    assert switched == HomeState(to, to)
    with pytest.raises(PairMoving):
        make_sharded(**FAST).enqueue(QUEUE, [{"payload": "early"}], tenant=TENANT)
    with pytest.raises(MoveRefused, match="already switched"):
        tq.give_up_move(QUEUE, TENANT)
    summary = tq.move_pair(QUEUE, TENANT, to, poll_seconds=0.05)
    assert summary.moved and summary.to_shard == to
    assert set(states(tq).values()) == {HomeState(to, None)}
    tq.enqueue(QUEUE, [{"payload": 2}], tenant=TENANT)
    assert [t.payload for t in tq.claim(QUEUE, tenant=TENANT, max=5)] == [2]


def test_a_bulk_chunk_for_a_pair_being_moved_writes_nothing(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec]) -> None:
    tq = make_sharded(**FAST)
    tq.enqueue(QUEUE, [{"payload": 0}], tenant=TENANT)
    home = tq.homes.home_of(QUEUE, TENANT, create=False)
    assert home is not None
    with tq.bulk_load(QUEUE, rows=2, tenants=[TENANT]) as load:
        assert isinstance(load, ShardedBulkLoad)
        for engine in tq.engines.values():  # the move closes the pair while the load runs
            engine.ctx.store.home_close(QUEUE, TENANT, home, other_shard(tq, home))
        with tq.bulk_writer(load) as writer, pytest.raises(PairMoving, match="is moving"):
            writer.write(chunk_rows(load, 2), tenants=[TENANT])
    spec = next(s for s in shard_specs if s.name == home)
    assert tasks_on(spec) == 1  # the chunk wrote nothing


def chunk_rows(load: ShardedBulkLoad, count: int) -> bytes:
    return "".join(f"{load_id(load.id_ms, o, load.id_tail)}\t{o}\t{TENANT}\t\\N\t5\t"
                   f"{{\"ord\": {o}}}\t\\N\n" for o in range(count)).encode()


def tasks_on(spec: ShardSpec, queue: str = QUEUE) -> int:
    with psycopg.connect(spec.url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {EVERY_TASK} WHERE queue = %s",
                           (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def test_a_bulk_load_begun_before_a_move_writes_nothing_after_its_switch(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec]) -> None:
    tq = quick(make_sharded(**FAST))
    tq.enqueue(QUEUE, [{"payload": 0}], tenant=TENANT)
    assert not tq.ack(QUEUE, tq.claim(QUEUE, tenant=TENANT, max=1)).rejected
    home = tq.homes.home_of(QUEUE, TENANT, create=False)
    assert home is not None
    spec_of = {spec.name: spec for spec in shard_specs}
    to = other_shard(tq, home)
    with tq.bulk_load(QUEUE, rows=2, tenants=[TENANT]) as load:
        assert isinstance(load, ShardedBulkLoad)
        with tq.bulk_writer(load) as writer:
            # a feed whose load outlasts its admission's registration (which would hold
            # the drain) until after the move
            tq.warm.client.delete(PairKeys.of(QUEUE, TENANT).inflight)
            tq.move_pair(QUEUE, TENANT, to, poll_seconds=0.05)
            with pytest.raises(PairMoving, match="has moved"):
                writer.write(chunk_rows(load, 2), tenants=[TENANT])
    assert tasks_on(spec_of[home]) == 0
    assert not registered_on(spec_of[home])  # not registered again where it was
    tq.sync_homes()  # a deploy's step after it: no pair registered away from its home


def test_a_process_whose_cached_home_predates_the_move_writes_nothing_there(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec]) -> None:
    tq = quick(make_sharded(**FAST))
    stale = make_sharded(home_cache_seconds=300)  # a longer cache than the move waits for
    # it registered the pair on its home: its next enqueue there skips the registration
    stale.enqueue(QUEUE, [{"payload": 0}], tenant=TENANT)
    home = tq.homes.home_of(QUEUE, TENANT, create=False)
    assert home is not None and stale.homes.home_of(QUEUE, TENANT) == home
    assert not stale.ack(QUEUE, stale.claim(QUEUE, tenant=TENANT, max=1)).rejected
    to = other_shard(tq, home)
    tq.move_pair(QUEUE, TENANT, to, poll_seconds=0.05)
    spec_of = {spec.name: spec for spec in shard_specs}
    with pytest.raises(PairMoving, match="has moved"):
        stale.enqueue(QUEUE, [{"payload": "late"}], tenant=TENANT)
    with pytest.raises(PairMoving):
        stale.engines[home].put_schedule("late", {"queue": QUEUE, "tenant": TENANT,
                                                  "every_seconds": 60, "payload": {}})
    assert tasks_on(spec_of[home]) == 0 and not registered_on(spec_of[home])
    # its next request looks the home up again
    again = stale.enqueue(QUEUE, [{"payload": "late"}], tenant=TENANT)[0]
    assert tag_of(str(again.id)) == spec_of[to].tag
    assert [t.payload for t in stale.claim(QUEUE, max=5)] == ["late"]


def drained_pair(make_sharded: ShardedFactory) -> tuple[ShardedTierq, str]:
    """A quick engine and the home of a pair that has had one task, done."""
    tq = quick(make_sharded(**FAST))
    tq.enqueue(QUEUE, [{"payload": 0}], tenant=TENANT)
    assert not tq.ack(QUEUE, tq.claim(QUEUE, max=1)).rejected
    home = tq.homes.home_of(QUEUE, TENANT, create=False)
    assert home is not None
    return tq, home


def test_a_move_waits_for_the_caches_and_a_pair_can_move_back(
        make_sharded: ShardedFactory) -> None:
    tq, home = drained_pair(make_sharded)
    to = other_shard(tq, home)
    slept: list[float] = []
    tq.move_pair(QUEUE, TENANT, to, sleep=slept.append)  # drained: no poll
    # the home cache plus the call deadline, then the tenant lists' cache (0 here)
    assert slept == [0.2 + 0.5, 0.0]
    # back again within the registration refresh: this process still remembers the pair as
    # registered on its first home, so the move registers it there before opening
    tq.move_pair(QUEUE, TENANT, home, poll_seconds=0.05)
    tq.enqueue(QUEUE, [{"payload": 1}], tenant=TENANT)
    assert [t.payload for t in tq.claim(QUEUE, max=5)] == [1]  # a queue-wide claim


def test_the_old_homes_last_visit_leaves_the_new_homes_leases_to_it(
        make_sharded: ShardedFactory, valkey_url: str) -> None:
    """The old home's reaper visits a pair whose warm rows are gone once more, to expire
    what leases it left. Once the pair has moved, the leases in its (shared) Valkey keys
    are the new home's: the old home would find no row to record an expired one on and
    drop it, and its attempt would never be counted. It leaves them to the new home."""
    tq = quick(make_sharded(**FAST))
    tq.enqueue(QUEUE, [{"payload": "before"}], tenant=TENANT)
    home = tq.homes.home_of(QUEUE, TENANT, create=False)
    assert home is not None
    to = other_shard(tq, home)
    old, new = tq.engines[home], tq.engines[to]
    assert old.run_reaper().completed  # a round with the pair's warm rows in it
    assert not tq.ack(QUEUE, tq.claim(QUEUE, tenant=TENANT)).rejected
    tq.move_pair(QUEUE, TENANT, to, drain_seconds=10, poll_seconds=0.05)
    [after] = tq.enqueue(QUEUE, [{"payload": "after"}], tenant=TENANT)
    [task] = tq.claim(QUEUE, tenant=TENANT, lease_seconds=10)
    assert task.id == after.id
    for engine in tq.engines.values():
        engine.ctx.clock.advance(11)
    leased = redis.Redis.from_url(valkey_url)
    try:
        # a round without the pair: its last visit there
        assert old.run_reaper().completed
        assert leased.zcard(PairKeys.of(QUEUE, TENANT).leased) == 1
    finally:
        leased.close()
    assert new.run_reaper().requeued == 1
    [again] = tq.claim(QUEUE, tenant=TENANT)
    assert (again.id, again.attempt) == (after.id, 2)
    assert not tq.ack(QUEUE, [again]).rejected


def test_a_stopped_second_move_is_finished_whatever_copy_is_read_first(
        make_sharded: ShardedFactory) -> None:
    tq, first = drained_pair(make_sharded)
    second = other_shard(tq, first)
    third = next(n for n in tq.engines if n not in (first, second))
    tq.move_pair(QUEUE, TENANT, second, poll_seconds=0.05)  # now off its ranking's first
    for engine in tq.engines.values():
        engine.ctx.store.home_close(QUEUE, TENANT, second, third)
    assert tq.engines[second].ctx.store.pair_switch_drained(
        QUEUE, TENANT, third, second) == HomeState(third, third)
    with pytest.raises(MoveRefused, match="already switched"):
        tq.give_up_move(QUEUE, TENANT)
    with pytest.raises(MoveRefused, match=f"already moving to shard '{third}'"):
        tq.move_pair(QUEUE, TENANT, first)
    summary = tq.move_pair(QUEUE, TENANT, third)
    assert (summary.from_shard, summary.to_shard, summary.moved) == (second, third, True)
    assert set(states(tq).values()) == {HomeState(third, None)}
    tq.enqueue(QUEUE, [{"payload": 1}], tenant=TENANT)
    assert [t.payload for t in tq.claim(QUEUE, max=5)] == [1]


@pytest.fixture
def settings_from_env() -> Iterator[None]:
    """The CLI's engine reads ``get_settings()``, cached for the process: emptied around the
    test, so the command reads the environment it is given, not what an earlier test left."""
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("settings_from_env")
def test_tierq_shards_move_and_home(make_sharded: ShardedFactory,
                                    shard_specs: list[ShardSpec], valkey_url: str) -> None:
    tq = quick(make_sharded(**FAST))
    tq.enqueue(QUEUE, [{"payload": 1}], tenant=TENANT)
    assert not tq.ack(QUEUE, tq.claim(QUEUE, tenant=TENANT, max=1)).rejected
    home = tq.homes.home_of(QUEUE, TENANT, create=False)
    assert home is not None
    to = other_shard(tq, home)
    env = {"TIERQ_SHARD_URLS": ",".join(f"{s.name}={s.url}" for s in shard_specs[:3]),
           "VALKEY_URL": valkey_url, "DATABASE_URL": "", "TIERQ_HOME_CACHE_SECONDS": "0",
           "TIERQ_SETTINGS_CACHE_SECONDS": "0"}
    runner = CliRunner()
    shown = runner.invoke(app, ["shards", "home", QUEUE, TENANT], env=env)
    assert shown.exit_code == 0, shown.output
    assert orjson.loads(shown.stdout) == {"queue": QUEUE, "tenant": TENANT, "home": home,
                                          "moving_to": None}
    bad = runner.invoke(app, ["shards", "move", QUEUE, TENANT], env=env)
    assert bad.exit_code == 2 and "--to SHARD or --give-up" in bad.output
    moved = runner.invoke(app, ["shards", "move", QUEUE, TENANT, "--to", to], env=env)
    assert moved.exit_code == 0, moved.output
    assert orjson.loads(moved.stdout)["to"] == to
    assert "takes new work on shard" in moved.output
    unknown = runner.invoke(app, ["shards", "move", QUEUE, TENANT, "--to", "purple"], env=env)
    assert unknown.exit_code == 1 and "no shard named 'purple'" in unknown.output
    assert set(states(tq).values()) == {HomeState(to, None)}


@pytest.mark.usefixtures("settings_from_env")
def test_tierq_shards_with_one_database(shard_specs: list[ShardSpec], valkey_url: str) -> None:
    """One database (TIERQ_SHARD_URLS names one shard, or is not set): every pair's home is
    the default shard, and there is no other to move a pair to."""
    runner = CliRunner()
    for env in ({"TIERQ_SHARD_URLS": f"red={shard_specs[0].url}", "VALKEY_URL": valkey_url},
                {"TIERQ_SHARD_URLS": "", "DATABASE_URL": shard_specs[0].url,
                 "VALKEY_URL": valkey_url}):
        shown = runner.invoke(app, ["shards", "home", QUEUE, TENANT], env=env)
        assert shown.exit_code == 0, shown.output
        assert orjson.loads(shown.stdout) == {"queue": QUEUE, "tenant": TENANT,
                                              "home": "default", "moving_to": None}
        move = runner.invoke(app, ["shards", "move", QUEUE, TENANT, "--to", "red"], env=env)
        assert move.exit_code == 2 and "names one shard" in move.output


def test_a_pair_moved_off_a_batch_row_it_shared_is_counted_on_its_new_home_only(
        make_sharded: ShardedFactory) -> None:
    """Batch rows on whatever the environment: a pair moved off a shard where a batch row
    also holds another tenant's member (the sweep leaves it there) is no longer walked by
    that shard's gauges and queue views, which would count its new home's tasks again
    (the pair's Valkey keys are one for every shard)."""
    tq = quick(make_sharded(batch_rows=True, **FAST))
    names = list(tq.engines)
    by_home: dict[str, list[str]] = {}
    for n in range(1000):
        by_home.setdefault(rendezvous_order(names, QUEUE, f"t{n}")[0], []).append(f"t{n}")
    home, (moved, stays) = next((h, ts[:2]) for h, ts in by_home.items() if len(ts) >= 2)
    tq.enqueue(QUEUE, [{"payload": 0, "tenant": moved}, {"payload": 0, "tenant": stays}])
    assert not tq.ack(QUEUE, tq.claim(QUEUE, tenant=moved, max=1)).rejected
    to = other_shard(tq, home)
    assert tq.move_pair(QUEUE, moved, to, sleep=lambda _: None).moved
    tq.enqueue(QUEUE, [{"payload": n, "tenant": moved} for n in (1, 2)])
    swept = tq.run_job("reaper").by_shard[home]
    assert isinstance(swept, ReaperSummary) and swept.batches_swept == 0  # (stays' member)
    assert tq.get_queue(QUEUE).counts.warm == 3
    warm: dict[str, float] = {}
    for name, engine in tq.engines.items():  # (each shard's round: one queue, ~other)
        emitted = Emitted()
        gauges.run(engine.ctx, GaugeRound(), emitted, now=engine.ctx.now())
        for values in emitted.take().values():
            warm[name] = values["warm"]
    assert warm == {home: 1, to: 2}
