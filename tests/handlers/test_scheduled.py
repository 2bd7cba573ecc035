"""The scheduled functions: the tick loop inside one invocation, and each handler invoked
with the events EventBridge sends it, over real stores."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.handlers.support import (
    Invoke,
    emf_lines,
    invoke,
    load_event,
    scheduler_event,
)
from tierq.aws.scheduled import TickReport, run_ticks
from tierq.config import Settings


class FakeTime:
    """A clock that only moves when slept on (or when a tick takes time)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


class Remaining:
    def __init__(self, fake: FakeTime, seconds: float) -> None:
        self.fake = fake
        self.deadline = fake.now + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int(max(0.0, self.deadline - self.fake.now) * 1000)


def ticker(fake: FakeTime, duration: float = 0.0,
           fail: Callable[[int], bool] = lambda n: False) -> tuple[list[float], Callable[[], Any]]:
    at: list[float] = []

    def tick() -> dict[str, int]:
        at.append(fake.now)
        n = len(at)
        fake.now += duration
        if fail(n):
            raise RuntimeError(f"tick {n} failed")
        return {"moved": 2, "names": ["a"]}

    return at, tick


def loop(fake: FakeTime, tick: Callable[[], Any], *, every: float, remaining: float = 70.0,
         event: dict[str, Any] | None = None,
         environ: dict[str, str] | None = None) -> TickReport:
    return run_ticks("cold_to_warm", tick, every=every, event=event,
                     context=Remaining(fake, remaining), clock=fake.clock, sleep=fake.sleep,
                     settings=Settings.from_environ(environ or {}))


def test_ticks_every_interval_for_max_seconds() -> None:
    fake = FakeTime()
    at, tick = ticker(fake)
    report = loop(fake, tick, every=5.0)
    assert [t - 1000.0 for t in at] == [5.0 * i for i in range(11)]  # 0, 5, …, 50 (< 55)
    assert report.ticks == 11 and report.failed_ticks == 0
    assert report.totals == {"moved": 22, "names": 11}
    assert max(fake.sleeps) <= 0.25  # waits in slices, so a stop is seen quickly


def test_stops_before_the_timeout_with_the_safety_margin() -> None:
    fake = FakeTime()
    at, tick = ticker(fake)
    report = loop(fake, tick, every=1.0, remaining=20.0)  # 20 s left, 10 s margin
    assert len(at) == 10
    assert fake.now - 1000.0 <= 10.0
    assert report.duration_ms <= 10_000


def test_the_tick_settings_bound_the_invocation() -> None:
    fake = FakeTime()
    at, tick = ticker(fake)
    loop(fake, tick, every=1.0, environ={"TIERQ_TICK_MAX_SECONDS": "4.5"})
    assert [t - 1000.0 for t in at] == [0.0, 1.0, 2.0, 3.0, 4.0]
    fake = FakeTime()
    at, tick = ticker(fake)
    loop(fake, tick, every=1.0, remaining=20.0, environ={"TIERQ_TICK_SAFETY_SECONDS": "15"})
    assert len(at) == 5  # 20 s left, 15 s margin


def test_event_overrides_duration_and_interval() -> None:
    fake = FakeTime()
    at, tick = ticker(fake)
    loop(fake, tick, every=5.0, event={"source": "tierq.scheduler", "job": "cold_to_warm",
                                       "max_seconds": 2, "every_seconds": 0.5})
    assert [round(t - 1000.0, 3) for t in at] == [0.0, 0.5, 1.0, 1.5]


def test_an_overrunning_tick_does_not_pile_up_missed_ticks() -> None:
    fake = FakeTime()
    at, tick = ticker(fake, duration=2.5)
    loop(fake, tick, every=1.0, event={"max_seconds": 10})
    gaps = [b - a for a, b in itertools.pairwise(at)]
    assert gaps and all(g == pytest.approx(2.5) for g in gaps)


def test_failed_ticks_are_counted_and_the_loop_goes_on() -> None:
    fake = FakeTime()
    _, tick = ticker(fake, fail=lambda n: n % 2 == 0)
    report = loop(fake, tick, every=1.0, event={"max_seconds": 4})
    assert report.ticks == 2 and report.failed_ticks == 2


def test_an_invocation_whose_every_tick_failed_raises() -> None:
    fake = FakeTime()
    _, tick = ticker(fake, fail=lambda n: True)
    with pytest.raises(RuntimeError, match="tick 3 failed"):
        loop(fake, tick, every=1.0, event={"max_seconds": 3})


@pytest.mark.parametrize("event", [
    {"job": "reaper"},
    {"max_seconds": -1},
    {"max_seconds": "10"},
    {"every_seconds": 0},
    {"every_seconds": True},
])
def test_bad_events_are_refused(event: dict[str, Any]) -> None:
    fake = FakeTime()
    at, tick = ticker(fake)
    with pytest.raises(ValueError):
        loop(fake, tick, every=1.0, event=event)
    assert at == []


# ----------------------------------------------------------------------- handlers


def test_delayed_mover_with_an_eventbridge_rule_event(call: Invoke,
                                                      pg: psycopg.Connection[Any]) -> None:
    made = call("POST", "/v1/queues/jobs/tasks", {"payload": 1, "delay_seconds": 0.5}).body
    assert made["state"] == "delayed"
    time.sleep(0.6)
    event = load_event("scheduled_event.json") | {"max_seconds": 1, "every_seconds": 0.2}
    report = invoke("delayed_mover", event)
    assert report["job"] == "delayed_mover"
    assert report["totals"]["moved"] == 1
    assert report["ticks"] >= 2
    assert pg.execute("SELECT state FROM tierq_tasks WHERE id = %s",
                      (made["id"],)).fetchone()[0] == "warm"


def test_cold_to_warm_promotes_when_the_warm_set_has_room(call: Invoke) -> None:
    call("PUT", "/v1/queues/jobs", {"warm_max": 10})
    call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": i} for i in range(15)]})
    assert call("GET", "/v1/queues/jobs").body["counts"]["cold"] == 5
    report = invoke("cold_to_warm", scheduler_event("cold_to_warm", max_seconds=0.5))
    assert report["totals"]["promoted"] == 0  # warm is full: nothing to promote
    # 8 of 10: the 2 left are not below the claims' low-water mark (a quarter of warm_max),
    # so the claim does not refill inline and the promotion is the scheduled job's
    got = call("POST", "/v1/queues/jobs/claims", {"max": 8}).body["tasks"]
    assert len(got) == 8
    report = invoke("cold_to_warm", scheduler_event("cold_to_warm", max_seconds=0.5))
    assert report["totals"]["promoted"] == 5
    counts = call("GET", "/v1/queues/jobs").body["counts"]
    assert counts == {"warm": 7, "waiting": 0, "held": 0, "cold": 0, "delayed": 0, "leased": 8,
                      "dead": 0}


def test_reaper_expires_leases_and_emits_gauges_and_dead_letters(
        call: Invoke, capsys: pytest.CaptureFixture[str]) -> None:
    # configured by an admin: its metrics carry its name (an unconfigured one's: ~other)
    assert call("PUT", "/v1/queues/jobs", {}).status == 200
    call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": 1, "max_attempts": 1},
                                                     {"payload": 2}]})
    claimed = call("POST", "/v1/queues/jobs/claims", {"max": 2, "lease_seconds": 1}).body["tasks"]
    assert len(claimed) == 2
    time.sleep(1.1)
    capsys.readouterr()
    report = invoke("reaper", scheduler_event("reaper", max_seconds=0.3))
    assert report["totals"]["expired"] == 2
    assert report["totals"]["dead"] == 1
    assert report["totals"]["gauged_queues"] == 1
    # what the pass passed over, counted (none here)
    assert {name: report["totals"][name] for name in (
        "failed_pairs", "purge_failed", "groups_failed", "ready_index_failed",
        "waits_kept")} == dict.fromkeys(("failed_pairs", "purge_failed", "groups_failed",
                                         "ready_index_failed", "waits_kept"), 0)
    counts = call("GET", "/v1/queues/jobs").body["counts"]
    assert counts["dead"] == 1 and counts["warm"] == 1 and counts["leased"] == 0
    blobs = emf_lines(capsys.readouterr().out)
    dead = [b for b in blobs if "DeadLettered" in b]
    assert [(b["queue"], b["DeadLettered"]) for b in dead] == [("jobs", [1.0])]
    [gauges] = [b for b in blobs if "OldestReadyAgeSeconds" in b]
    assert gauges["queue"] == "jobs" and gauges["service"] == "tierq"
    assert gauges["Dead"] == [1.0] and gauges["Warm"] == [1.0] and gauges["Leased"] == [0.0]
    assert gauges["OldestReadyAgeSeconds"][0] >= 0
    names = {m["Name"] for m in gauges["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert names == {"Warm", "Waiting", "Held", "Cold", "Delayed", "Leased", "Dead",
                     "OldestReadyAgeSeconds"}


def test_two_reaper_invocations_at_once_do_no_harm(
        call: Invoke, pg: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]) -> None:
    call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": i, "max_attempts": 2}
                                                     for i in range(20)]})
    claimed = call("POST", "/v1/queues/jobs/claims", {"max": 20, "lease_seconds": 1}).body["tasks"]
    assert len(claimed) == 20
    time.sleep(1.1)
    reports: list[dict[str, Any]] = []

    def run() -> None:
        reports.append(invoke("reaper", scheduler_event("reaper", max_seconds=0.5,
                                                        every_seconds=0.1)))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r["totals"]["requeued"] for r in reports) == 20  # each lease requeued once
    attempts = [r[0] for r in pg.execute(
        "SELECT attempts FROM tierq_tasks WHERE queue = 'jobs'").fetchall()]
    assert attempts == [1] * 20  # each expiry counted once
    assert call("GET", "/v1/queues/jobs").body["counts"]["warm"] == 20


def test_a_schedule_wired_to_the_wrong_function_fails_loudly(lambda_env: None) -> None:
    with pytest.raises(ValueError, match="names 'reaper'"):
        invoke("delayed_mover", scheduler_event("reaper"))


def test_an_invocation_returns_before_its_timeout(lambda_env: None) -> None:
    started = time.monotonic()
    report = invoke("delayed_mover", scheduler_event("delayed_mover"), timeout=11.0)
    assert time.monotonic() - started < 1.5  # 11 s left minus the 10 s margin
    assert report["ticks"] >= 1
