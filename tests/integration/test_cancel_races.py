"""A task cancelled or deleted while a push of it is on its way never runs: the push read
the row as ready before the cancel committed and reaches Valkey after the cancel took the
task out of the warm tier. The cancel's tombstone (lua/remove.lua) makes the push leave it
out (lua/push_ready.lua). Each race is made deterministic by running the cancel inside the
engine's own push step, after the push's rows were read and before its script runs."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis

from tests.integration.helpers import count_rows, count_state
from tests.integration.test_warm_bytes import assert_exact
from tests.support.every_task import EVERY_TASK
from tierq.core.batch_ids import batch_of
from tierq.dal.warm_tier import PairKeys, _available
from tierq.engine import Tierq
from tierq.errors import DatabaseTimedOut, NotFound, WarmTierUnavailable
from tierq.local.services.process import free_port
from tierq.logic.context import OffsetClock, to_datetime, to_ms
from tierq.logic.tasks import gone_ttl_ms

Q = "race"


@pytest.fixture
def cancel_before_push(monkeypatch: pytest.MonkeyPatch) -> Iterator[
        Callable[[Tierq, str, str], list[str]]]:
    """``arm(tq, kind, how)``: the next push of that kind first cancels (``how`` 'cancel')
    or deletes ('delete') every task it carries; answers the ids it did it to."""

    def arm(tq: Tierq, kind: str, how: str) -> list[str]:
        real = tq.ctx.warm.push
        done: list[str] = []

        def push(queue: str, tenant: str, **kw: Any) -> Any:
            if kw["kind"] == kind and not done:
                for task_id, _, _ in kw["items"]:
                    done.append(str(task_id))
                    if how == "cancel":
                        tq.cancel(queue, task_id)
                    else:
                        tq.cancel_task(queue, task_id)
            return real(queue, tenant, **kw)

        monkeypatch.setattr(tq.ctx.warm, "push", push)
        return done

    yield arm


def assert_never_runs(tq: Tierq, valkey: redis.Redis, pg: psycopg.Connection[Any],
                      ids: list[str], how: str) -> None:
    """The tasks are not in line, not claimed, their rows cancelled (or gone), and the
    pair's byte count matches its data."""
    assert ids
    k = PairKeys.of(Q, "_")
    for task_id in ids:
        assert valkey.zscore(k.ready, task_id) is None
        assert not valkey.hexists(k.data, task_id)
        assert valkey.zscore(k.gone, task_id) is not None
    assert tq.claim(Q, max=10) == []
    assert valkey.zcard(k.ready) == 0 and valkey.zcard(k.leased) == 0
    assert assert_exact(tq, valkey, Q) == 0
    for task_id in ids:
        if how == "cancel":
            assert tq.get_task(Q, task_id).state == "cancelled"
        else:
            with pytest.raises(NotFound):
                tq.get_task(Q, task_id)
    # (every row left is cancelled: none was marked cold, or anything else, after)
    assert count_state(pg, Q, "cancelled") == count_rows(pg, Q)


@pytest.mark.parametrize("how", ["cancel", "delete"])
def test_an_enqueue_whose_push_comes_after_a_cancel_does_not_run_it(
        tq: Tierq, valkey: redis.Redis, pg: psycopg.Connection[Any],
        cancel_before_push: Any, how: str) -> None:
    tq.put_queue(Q, {})
    done = cancel_before_push(tq, "new", how)
    made = tq.enqueue(Q, [{"payload": {"n": i}} for i in range(3)])
    assert sorted(done) == sorted(str(t.id) for t in made)
    assert_never_runs(tq, valkey, pg, done, how)
    # the pair's tombstones cost a look-up, nothing else: later work goes on
    later = tq.enqueue_one(Q, "later")
    [task] = tq.claim(Q, max=10)
    assert task.id == later.id
    tq.ack(Q, [task])


def two_tasks_one_cold(tq: Tierq, pg: psycopg.Connection[Any]) -> str:
    """warm_max 1: the first task warm, then cancelled (the warm set empty), the second
    waiting cold; the second's id."""
    first, second = tq.enqueue(Q, [{"payload": "warm"}, {"payload": "cold"}])
    assert count_state(pg, Q, "cold") == 1
    tq.cancel(Q, first.id)
    return str(second.id)


@pytest.mark.parametrize("by", ["mover", "refill"])
@pytest.mark.parametrize("how", ["cancel", "delete"])
def test_a_promotion_whose_push_comes_after_a_cancel_does_not_run_it(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        cancel_before_push: Any, how: str, by: str) -> None:
    tq = make_tq(warm_max=1)
    cold_id = two_tasks_one_cold(tq, pg)
    done = cancel_before_push(tq, "promote", how)
    if by == "mover":
        tq.run_cold_to_warm()
    else:  # a claim that finds the warm set dry promotes inline
        assert tq.claim(Q, max=5) == []
    assert done == [cold_id]
    assert_never_runs(tq, valkey, pg, done, how)


def test_a_release_whose_push_comes_after_a_cancel_does_not_run_it(
        tq: Tierq, valkey: redis.Redis, pg: psycopg.Connection[Any],
        cancel_before_push: Any) -> None:
    tq.enqueue_one(Q, "x")
    [task] = tq.claim(Q, max=1)
    done = cancel_before_push(tq, "restore", "cancel")
    tq.release(Q, [task])
    assert done == [str(task.id)]
    assert_never_runs(tq, valkey, pg, done, "cancel")


def test_a_restore_whose_push_comes_after_a_cancel_does_not_run_it(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        cancel_before_push: Any) -> None:
    clock = OffsetClock()
    tq = make_tq(clock=clock)
    task_id = str(tq.enqueue_one(Q, "lost").id)
    k = PairKeys.of(Q, "_")
    valkey.delete(k.ready, k.data, k.meta)  # Valkey lost the pair
    clock.advance(tq.ctx.settings.reconcile_grace_seconds + 1)
    done = cancel_before_push(tq, "restore", "cancel")
    tq.run_reaper()
    assert done == [task_id]
    assert_never_runs(tq, valkey, pg, done, "cancel")


def test_a_replace_into_the_future_pushes_the_task_again_when_due(
        make_tq: Callable[..., Tierq], valkey: redis.Redis) -> None:
    """A replace that takes a keyed task out of the warm tier (into the future) leaves a
    tombstone that lapses just before the task is due: the same id is pushed again then."""
    clock = OffsetClock()
    tq = make_tq(clock=clock)
    first = tq.enqueue_one(Q, 1, key="k")
    tq.enqueue(Q, [{"payload": 2, "key": "k", "on_conflict": "replace", "delay_seconds": 60}])
    k = PairKeys.of(Q, "_")
    assert valkey.zcard(k.ready) == 0
    [(stone, lapses)] = valkey.zrange(k.gone, 0, -1, withscores=True)
    due_ms = int(tq.get_task(Q, first.id).run_at.timestamp() * 1000)
    assert (stone.decode(), lapses) == (str(first.id), due_ms - 1)
    clock.advance(61)
    tq.run_delayed_mover()
    [task] = tq.claim(Q, max=5)
    assert (task.id, task.payload) == (first.id, 2)
    assert assert_exact(tq, valkey, Q) == 0
    assert not valkey.exists(k.gone)


@pytest.mark.parametrize("kind", ["new", "restore"])
def test_a_push_that_comes_after_a_replace_into_the_future_does_not_run_it_early(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, monkeypatch: pytest.MonkeyPatch,
        kind: str) -> None:
    """A push that read a keyed task as ready before a replace moved it into the future
    (its enqueue's own push, 'new'; a release's, 'restore') reaches Valkey after the
    replace: the task is not claimed before it is due, and then runs with the new
    payload."""
    clock = OffsetClock()
    tq = make_tq(clock=clock)
    replace = [{"payload": 2, "key": "k", "on_conflict": "replace", "delay_seconds": 60}]
    real = tq.ctx.warm.push
    replaced: list[str] = []

    def push(queue: str, tenant: str, **kw: Any) -> Any:
        if kw["kind"] == kind and not replaced:
            replaced.extend(str(task_id) for task_id, _, _ in kw["items"])
            [outcome] = tq.enqueue(queue, replace)
            assert (outcome.outcome, outcome.state) == ("updated", "delayed")
        return real(queue, tenant, **kw)

    if kind == "restore":
        tq.enqueue_one(Q, 1, key="k")
        [held] = tq.claim(Q, max=1)
        monkeypatch.setattr(tq.ctx.warm, "push", push)
        assert tq.release(Q, [held]).released == [held.id]
    else:
        monkeypatch.setattr(tq.ctx.warm, "push", push)
        tq.enqueue(Q, [{"payload": 1, "key": "k"}])
    [task_id] = replaced
    k = PairKeys.of(Q, "_")
    assert tq.claim(Q, max=5) == []
    assert valkey.zcard(k.ready) == 0 and assert_exact(tq, valkey, Q) == 0
    assert tq.get_task(Q, task_id).state == "delayed"
    clock.advance(61)
    tq.run_delayed_mover()
    [task] = tq.claim(Q, max=5)
    assert (str(task.id), task.payload) == (task_id, 2)
    assert tq.ack(Q, [task]).acked == [task.id]


def lock_task(pg: psycopg.Connection[Any], task_id: str) -> None:
    """Lock, in ``pg``'s open transaction, the row that holds the task: its own row of
    ``tierq_tasks``, or its batch row while it is a member there (a move out of it, which
    any change but a plain ack makes first, locks that row too)."""
    pg.execute("SELECT 1 FROM tierq_tasks WHERE id = %s FOR UPDATE", (task_id,))
    member = batch_of(task_id)
    if member is not None:
        pg.execute("SELECT 1 FROM tierq_batches WHERE id = %s FOR UPDATE", (member[0],))


@pytest.mark.parametrize("how", ["cancel", "delete"])
def test_a_cancel_that_postgres_fails_after_the_removal_leaves_the_task_to_run_later(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        how: str) -> None:
    """PostgreSQL fails a cancel or delete after it took the task out of Valkey (its row
    locked by another session past the lock timeout): the row is as it was, the task out
    of line and claimed by no one while its tombstone lasts; the retry cancels it, and
    without one the reconciler puts it back once the tombstone lapsed."""
    clock = OffsetClock()
    tq = make_tq(clock=clock, lock_timeout_ms=200)
    task_id = str(tq.enqueue_one(Q, "x").id)
    op = tq.cancel if how == "cancel" else tq.cancel_task
    with pg.transaction():
        lock_task(pg, task_id)
        with pytest.raises(DatabaseTimedOut):
            op(Q, task_id)
    assert row_state(pg, task_id) == "warm"
    k = PairKeys.of(Q, "_")
    assert valkey.zscore(k.gone, task_id) is not None
    assert tq.claim(Q, max=5) == []
    clock.advance(gone_ttl_ms(tq.ctx.settings) / 1000 + 1)
    tq.run_reaper()
    [task] = tq.claim(Q, max=5)
    assert str(task.id) == task_id
    op(Q, task_id)  # (a retry this late still cancels it, its lease dropped)
    assert tq.ack(Q, [task]).acked == []
    assert tq.claim(Q, max=5) == []


@pytest.mark.parametrize("how", ["cancel", "delete"])
def test_a_cancel_that_postgres_fails_leaves_a_running_workers_lease(
        make_tq: Callable[..., Tierq], pg: psycopg.Connection[Any], how: str) -> None:
    """PostgreSQL fails a cancel or delete of a task a worker holds: the lease is ended only
    after the change commits, so the worker's ack stands (the task runs once, its outcome
    kept); a retry then finds no task (an ack without a result leaves no row)."""
    tq = make_tq(lock_timeout_ms=200)
    task_id = str(tq.enqueue_one(Q, "x").id)
    [task] = tq.claim(Q, max=1)
    op = tq.cancel if how == "cancel" else tq.cancel_task
    with pg.transaction():
        lock_task(pg, task_id)
        with pytest.raises(DatabaseTimedOut):
            op(Q, task_id)
    assert tq.ack(Q, [task]).acked == [task.id]
    with pytest.raises(NotFound):
        op(Q, task_id)
    assert tq.claim(Q, max=5) == []


@pytest.mark.parametrize("delay", [0, 10])
def test_a_replace_that_brings_a_task_sooner_lowers_its_tombstone(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, delay: int) -> None:
    """A task replaced into the future, then replaced again due sooner (now, or in 10 s),
    runs when the second replace says: the first one's tombstone lapses by then."""
    clock = OffsetClock()
    tq = make_tq(clock=clock)
    first = tq.enqueue_one(Q, 1, key="k")
    tq.enqueue(Q, [{"payload": 2, "key": "k", "on_conflict": "replace", "delay_seconds": 600}])
    tq.enqueue(Q, [{"payload": 3, "key": "k", "on_conflict": "replace",
                    "delay_seconds": delay}])
    if delay:
        assert tq.claim(Q, max=5) == []
        clock.advance(delay + 1)
        tq.run_delayed_mover()
    [task] = tq.claim(Q, max=5)
    assert (task.id, task.payload) == (first.id, 3)
    assert assert_exact(tq, valkey, Q) == 0


class FrozenClock(OffsetClock):
    """A clock that stands still at ``at`` (seconds)."""

    def __init__(self, at: float) -> None:
        super().__init__()
        self.at = at

    def now(self) -> float:
        return self.at + self.offset


def test_a_replace_to_now_runs_at_once_when_now_rounds_up(
        make_tq: Callable[..., Tierq], valkey: redis.Redis) -> None:
    """A delayed task replaced with a run_at of now is ready at once, also when now rounded
    to the microsecond (as it is stored) is past the float it came from."""
    at = float(int(time.time()))
    while to_datetime(at).timestamp() <= at:
        at = math.nextafter(at + 3e-7, math.inf)
    tq = make_tq(clock=FrozenClock(at))
    first = tq.enqueue_one(Q, 1, key="k")
    tq.enqueue(Q, [{"payload": 2, "key": "k", "on_conflict": "replace", "delay_seconds": 600}])
    [outcome] = tq.enqueue(Q, [{"payload": 3, "key": "k", "on_conflict": "replace",
                                "delay_seconds": 0}])
    assert outcome.state == "warm"
    [task] = tq.claim(Q, max=5)
    assert (task.id, task.payload) == (first.id, 3)
    assert assert_exact(tq, valkey, Q) == 0


def test_a_tombstone_outlives_any_push_and_lapses_without_a_key_ttl(
        tq: Tierq, valkey: redis.Redis) -> None:
    """A tombstone lasts twice the longest a push can lag; the key carries no TTL (under a
    volatile-* policy it would be evicted first), its entries are scored by when they
    lapse, and a push that looks drops the lapsed ones (the key with them)."""
    ttl = gone_ttl_ms(tq.ctx.settings)
    assert ttl >= 2 * 900_000  # (twice the longest Lambda invocation, by default)
    a, b = tq.enqueue(Q, [{"payload": 1}, {"payload": 2}])
    tq.cancel(Q, a.id)
    tq.cancel_task(Q, b.id)
    k = PairKeys.of(Q, "_")
    assert valkey.pttl(k.gone) == -1
    now_ms = int(tq.ctx.now() * 1000)
    stones = valkey.zrange(k.gone, 0, -1, withscores=True)
    assert len(stones) == 2
    assert all(now_ms + ttl - 60_000 < lapses <= now_ms + ttl for _, lapses in stones)
    valkey.zadd(k.gone, {stones[0][0]: now_ms - 1})  # lapsed
    tq.enqueue(Q, [{"payload": 3}])
    assert valkey.zrange(k.gone, 0, -1) == [stones[1][0]]
    valkey.zadd(k.gone, {stones[1][0]: now_ms - 1})
    tq.enqueue(Q, [{"payload": 4}])
    assert not valkey.exists(k.gone)
    assert [t.payload for t in tq.claim(Q, max=5)] == [3, 4]


@pytest.fixture
def purge_before_push(monkeypatch: pytest.MonkeyPatch) -> Callable[[Tierq, str], list[str]]:
    """``arm(tq, kind)``: the next push of that kind first purges the queue; answers the ids
    that push carried."""

    def arm(tq: Tierq, kind: str) -> list[str]:
        real = tq.ctx.warm.push
        carried: list[str] = []

        def push(queue: str, tenant: str, **kw: Any) -> Any:
            if kw["kind"] == kind and not carried:
                carried.extend(str(task_id) for task_id, _, _ in kw["items"])
                tq.purge_queue(queue)
            return real(queue, tenant, **kw)

        monkeypatch.setattr(tq.ctx.warm, "push", push)
        return carried

    return arm


@pytest.mark.parametrize("kind", ["new", "promote"])
def test_a_push_that_comes_after_a_purge_puts_nothing_back(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        purge_before_push: Any, kind: str) -> None:
    """A purge fences its pairs: an enqueue's push or a promotion that read rows before the
    purge deleted them is late, its tasks are not put back in line (they would run, their
    acks refused), and work enqueued after the purge goes on."""
    tq = make_tq(warm_max=1)
    tq.put_queue(Q, {})
    if kind == "promote":
        two = tq.enqueue(Q, [{"payload": "warm"}, {"payload": "cold"}])
        assert count_state(pg, Q, "cold") == 1
        [first] = tq.claim(Q, max=1)
        tq.ack(Q, [first])
        carried = purge_before_push(tq, kind)
        tq.run_cold_to_warm()
        assert carried == [str(two[1].id)]
    else:
        carried = purge_before_push(tq, kind)
        made = tq.enqueue(Q, [{"payload": "purged"}])
        assert carried == [str(made[0].id)]
    k = PairKeys.of(Q, "_")
    assert valkey.zcard(k.ready) == 0 and valkey.hlen(k.data) == 0
    assert count_rows(pg, Q) == 0
    assert tq.claim(Q, max=10) == []
    later = tq.enqueue_one(Q, "later")
    tq.run_cold_to_warm()
    [task] = tq.claim(Q, max=10)
    assert (task.id, task.payload) == (later.id, "later")
    assert not tq.ack(Q, [task]).rejected


@pytest.fixture
def valkey_fails_once() -> Iterator[Callable[[Tierq], None]]:
    """``arm(tq)``: the next removal from the warm tier (lua/remove.lua) goes to a port
    nobody listens on, a real connection failure (``WarmTierUnavailable``); every other
    call, and the removals after it, reach Valkey."""
    armed: list[Any] = []

    def arm(tq: Tierq) -> None:
        warm = tq.ctx.warm
        armed.append(warm)

        def remove_leased(*args: Any, **kw: Any) -> Any:
            del warm.remove_leased  # (once: the class's own from here on)
            dead = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)

            def run_script(script: Any, keys: Any, argv: Any) -> Any:
                with _available():
                    return dead.evalsha(script.sha, len(keys), *keys, *argv)

            warm.run_script = run_script  # type: ignore[method-assign]
            try:
                return warm.remove_leased(*args, **kw)
            finally:
                del warm.run_script
                dead.close()

        warm.remove_leased = remove_leased  # type: ignore[method-assign]

    yield arm
    for warm in armed:
        vars(warm).pop("remove_leased", None)


def row_state(pg: psycopg.Connection[Any], task_id: str) -> str | None:
    """The task's state as PostgreSQL holds it (its row, or its member's place: warm);
    None when it holds none."""
    row = pg.execute(f"SELECT state FROM {EVERY_TASK} WHERE id = %s", (task_id,)).fetchone()
    return None if row is None else str(row[0])


@pytest.mark.parametrize("leased", [False, True])
@pytest.mark.parametrize("how", ["cancel", "delete"])
def test_a_cancel_that_valkey_fails_changes_nothing_and_its_retry_finishes(
        tq: Tierq, valkey: redis.Redis, pg: psycopg.Connection[Any],
        valkey_fails_once: Callable[[Tierq], None], how: str, leased: bool) -> None:
    """Valkey fails the removal of a cancel or delete (503): nothing is changed, so no claim
    hands out a task whose row is cancelled or gone, and the retry cancels or deletes it;
    after that no claim returns it."""
    task_id = str(tq.enqueue_one(Q, "x").id)
    if leased:
        [held] = tq.claim(Q, max=1)
    op = tq.cancel if how == "cancel" else tq.cancel_task
    valkey_fails_once(tq)
    with pytest.raises(WarmTierUnavailable):
        op(Q, task_id)
    # the task is as it was: a claim between the failure and the retry hands out only live
    # rows
    assert row_state(pg, task_id) == "warm"
    for task in tq.claim(Q, max=5):
        assert row_state(pg, str(task.id)) == "warm"
    op(Q, task_id)  # the caller's retry
    if leased:
        assert tq.ack(Q, [held]).acked == []
    assert_never_runs(tq, valkey, pg, [task_id], how)


def test_a_batch_replacing_tasks_into_the_future_gives_each_its_own_lapse(
        make_tq: Callable[..., Tierq], valkey: redis.Redis) -> None:
    """One batch replaces two tasks into the future, one due in 2 s, one in an hour: each
    tombstone lapses just before its own task is due (at most ``gone_ttl_ms`` away), so a
    late push of the later task is kept out past the sooner one's due time."""
    clock = OffsetClock()
    tq = make_tq(clock=clock)
    soon = tq.enqueue_one(Q, 1, key="soon")
    late = tq.enqueue_one(Q, 1, key="late")
    now_ms = to_ms(clock.now())
    tq.enqueue(Q, [{"payload": 2, "key": "soon", "on_conflict": "replace", "delay_seconds": 2},
                   {"payload": 2, "key": "late", "on_conflict": "replace",
                    "delay_seconds": 3600}])
    k = PairKeys.of(Q, "_")
    lapse_soon = valkey.zscore(k.gone, str(soon.id))
    lapse_late = valkey.zscore(k.gone, str(late.id))
    assert lapse_soon is not None and lapse_late is not None
    assert lapse_soon < now_ms + 2_000 + 50  # by its due time
    assert lapse_late >= now_ms + gone_ttl_ms(tq.ctx.settings) - 50  # not at the sooner one's
