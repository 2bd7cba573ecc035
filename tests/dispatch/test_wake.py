"""Waking the dispatcher: once when a task of a queue with a consumer becomes ready while no
dispatcher runs, never for other queues, never while one holds the flag; and the
dispatcher's invocation (tierq.aws.scheduled.dispatcher) holds the flag while it takes
batches, ends when idle, lets go of the flag and waits for what it started."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis

from tests.dispatch.journal import JOURNAL
from tests.dispatch.support import task_states
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions
from tierq.logic import wake
from tierq.logic.wake import FLAG_KEY, SEEN_AWAKE_MS

pytestmark = pytest.mark.usefixtures("clean_stores", "functions")


class CountingWaker:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


@pytest.fixture
def waker() -> Iterator[CountingWaker]:
    counting = CountingWaker()
    previous = wake.install(counting)
    yield counting
    wake.install(previous)


def test_a_ready_task_wakes_the_dispatcher_once(tq: Tierq, valkey: redis.Redis,
                                                waker: CountingWaker) -> None:
    tq.put_queue("plain", {"lease_seconds": 30})
    tq.enqueue("plain", [{"payload": 1}])
    assert waker.calls == 0 and valkey.get(FLAG_KEY) is None  # no consumer: no wake
    tq.put_queue("pushed", {"consumer": {"function": "tests.dispatch.consumers:keep"}})
    for n in range(5):
        tq.enqueue("pushed", [{"payload": n}, {"payload": n, "tenant": "other"}])
    assert waker.calls == 1
    assert wake.holder(tq.ctx).startswith("wake-")  # type: ignore[union-attr]
    assert 0 < valkey.pttl(FLAG_KEY) <= wake.WAKE_PENDING_MS
    # a wake that never started a dispatcher expires; the next ready task wakes again
    valkey.delete(FLAG_KEY)
    time.sleep(SEEN_AWAKE_MS / 1000 + 0.05)
    tq.enqueue("pushed", [{"payload": "again"}])
    assert waker.calls == 2


def test_nothing_wakes_while_a_dispatcher_holds_the_flag(tq: Tierq, valkey: redis.Redis,
                                                         waker: CountingWaker) -> None:
    tq.put_queue("pushed", {"consumer": {"function": "tests.dispatch.consumers:keep"}})
    wake.hold(tq.ctx, "dispatcher-1", 10_000)
    tq.enqueue("pushed", [{"payload": 1}])
    assert waker.calls == 0
    assert not wake.release(tq.ctx, "dispatcher-2")  # only its holder releases it
    assert wake.release(tq.ctx, "dispatcher-1") and valkey.get(FLAG_KEY) is None


@pytest.fixture
def lambda_env(monkeypatch: pytest.MonkeyPatch, app_database_url: str,
               valkey_url: str) -> Iterator[None]:
    from tierq.aws.runtime import reset_engine

    monkeypatch.setenv("DATABASE_URL", app_database_url)
    monkeypatch.setenv("VALKEY_URL", valkey_url)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setenv("TIERQ_SETTINGS_CACHE_SECONDS", "0")
    monkeypatch.setenv("TIERQ_DISPATCHER_IDLE_SECONDS", "0.5")
    reset_engine()
    yield
    from tierq.aws.runtime import engine
    from tierq.maintenance.dispatcher import forget_dispatcher

    forget_dispatcher(engine().ctx)
    reset_engine()


class Remaining:
    def __init__(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.until - time.monotonic()) * 1000))


@pytest.mark.usefixtures("lambda_env")
def test_an_invocation_takes_batches_until_idle_then_lets_go_and_waits(
        pg: psycopg.Connection[Any], valkey: redis.Redis, functions: LocalFunctions,
        waker: CountingWaker) -> None:
    from tierq.aws.runtime import engine
    from tierq.aws.scheduled.jobs import handle

    tq = engine()
    tq.put_queue("pushed", {"consumer": {"function": "tests.dispatch.consumers:fail_once",
                                         "batch_size": 10},
                            "backoff": {"kind": "fixed", "base_seconds": 0, "jitter": 0}})
    waker.calls = 0
    valkey.delete(FLAG_KEY)
    tq.enqueue("pushed", [{"payload": {"n": i, "fail_once": i < 3, "sleep": 0.01}}
                          for i in range(40)])
    assert waker.calls == 1
    started = time.monotonic()
    report = handle("dispatcher", {"source": "tierq.scheduler", "job": "dispatcher"},
                    Remaining(300))
    took = time.monotonic() - started
    assert report["acked"] == 40 and report["retried"] == 3 and report["drained"]
    assert took < 20  # ended idle, long before its 55 s
    # retries due at once did not wake another dispatcher: this one held the flag
    assert waker.calls == 1
    assert valkey.get(FLAG_KEY) is None
    assert task_states(pg).total() == 0
    assert sorted(JOURNAL.runs.values()) == [1] * 37 + [2] * 3


@pytest.mark.usefixtures("lambda_env")
def test_an_invocation_near_its_deadline_starts_no_batch_it_could_not_finish(
        valkey: redis.Redis, functions: LocalFunctions, pg: psycopg.Connection[Any],
        caplog: pytest.LogCaptureFixture) -> None:
    from tierq.aws.runtime import engine
    from tierq.aws.scheduled.jobs import handle

    tq = engine()
    # a 60 s function needs a lease of 90 s: an invocation with 40 s left takes no batch
    tq.put_queue("pushed", {"consumer": {"function": "tests.dispatch.consumers:keep"}})
    [queued] = tq.enqueue("pushed", [{"payload": 1}])
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="tierq.logic.dispatch"):
        report = handle("dispatcher", {"job": "dispatcher", "max_seconds": 20}, Remaining(40))
    assert report["batches"] == 0
    assert time.monotonic() - started < 5  # idle: nothing it could take
    untouched = tq.get_task("pushed", queued.id)  # never leased, no attempt recorded
    assert (untouched.state, untouched.attempts) == ("warm", 0)
    assert task_states(pg) == {"warm": 1}
    # a lease longer than the invocation's whole time is a setting to fix, not a wait: said
    # once, and named in the report
    assert report["unfit_queues"] == ["pushed"]
    said = [r.getMessage() for r in caplog.records if "is not dispatched" in r.getMessage()]
    assert len(said) == 1 and "pushed" in said[0] and "lease of 90 s" in said[0]


@pytest.mark.usefixtures("lambda_env")
def test_a_queue_that_fits_later_in_the_invocation_is_not_called_unfit(
        functions: LocalFunctions, pg: psycopg.Connection[Any]) -> None:
    from tierq.aws.runtime import engine
    from tierq.aws.scheduled.jobs import handle

    tq = engine()
    tq.put_queue("pushed", {"consumer": {"function": "tests.dispatch.consumers:keep"}})
    tq.enqueue("pushed", [{"payload": 1}])
    report = handle("dispatcher", {"job": "dispatcher", "max_seconds": 5}, Remaining(200))
    assert report["acked"] == 1 and "unfit_queues" not in report
