"""The reaper function's per-queue gauges, as EMF on stdout, over real stores: queues with
tasks only (not the idle pairs of the registry), an emptied queue's zeros once in the next
invocation, then nothing for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
import pytest

from tests.handlers.support import Invoke, emf_lines, invoke, scheduler_event
from tests.maintenance.helpers import seed_idle_pairs
from tierq.aws import metrics
from tierq.aws.runtime import engine
from tierq.aws.scheduled import jobs
from tierq.dal.postgres import execute_text

GAUGE_NAMES = {"Warm", "Waiting", "Held", "Cold", "Delayed", "Leased", "Dead",
               "OldestReadyAgeSeconds"}


def reaper_gauges(capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any],
                                                                dict[str, dict[str, Any]]]:
    """One reaper invocation (one tick): its totals, and its gauge blobs by queue."""
    capsys.readouterr()
    report = invoke("reaper", scheduler_event("reaper", max_seconds=0.3))
    assert report["ticks"] == 1
    blobs = [b for b in emf_lines(capsys.readouterr().out) if "OldestReadyAgeSeconds" in b]
    by_queue = {b["queue"]: b for b in blobs}
    assert len(by_queue) == len(blobs), "a queue was gauged twice"
    for blob in blobs:
        names = {m["Name"] for m in blob["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
        assert names == GAUGE_NAMES and blob["_aws"]["CloudWatchMetrics"][0][
            "Namespace"] == "Tierq"
    return report["totals"], by_queue


def a_minute_later() -> None:
    """The next gauge round is due (the process's round outlives the invocation)."""
    state = jobs.gauge_round_of(engine())
    assert state.last_began_at is not None and not state.under_way
    state.last_began_at -= engine().job_config("reaper").gauges_every_seconds


def test_reaper_gauges_queues_with_tasks_and_an_emptied_queue_once(
        call: Invoke, pg: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]) -> None:
    seed_idle_pairs(pg, 200)
    for queue in ("alpha", "beta"):  # configured: gauged under their own names
        assert call("PUT", f"/v1/queues/{queue}", {}).status == 200
    call("POST", "/v1/queues/alpha/tasks", {"tasks": [{"payload": i} for i in range(3)]})
    call("POST", "/v1/queues/beta/tasks", {"tasks": [{"payload": 1}]})
    totals, gauges = reaper_gauges(capsys)
    assert sorted(gauges) == ["alpha", "beta"]  # not the 200 idle queues
    assert (totals["gauged_queues"], totals["zeroed_queues"]) == (2, 0)
    assert gauges["alpha"]["Warm"] == [3.0] and gauges["beta"]["Warm"] == [1.0]

    # not due again within the minute: no gauges at all
    totals, gauges = reaper_gauges(capsys)
    assert gauges == {} and totals["gauged_queues"] == 0

    claimed = call("POST", "/v1/queues/beta/claims", {"max": 5}).body["tasks"]
    acks = [{"id": t["id"], "lease_token": t["lease_token"]} for t in claimed]
    assert call("POST", "/v1/queues/beta/acks", {"acks": acks}).status == 200
    a_minute_later()
    totals, gauges = reaper_gauges(capsys)
    assert sorted(gauges) == ["alpha", "beta"]
    assert (totals["gauged_queues"], totals["zeroed_queues"]) == (1, 1)
    assert all(gauges["beta"][name] == [0.0] for name in GAUGE_NAMES)
    assert gauges["alpha"]["Warm"] == [3.0] and gauges["alpha"]["Leased"] == [0.0]

    a_minute_later()
    totals, gauges = reaper_gauges(capsys)
    assert sorted(gauges) == ["alpha"]  # beta is idle now: silent
    assert (totals["gauged_queues"], totals["zeroed_queues"]) == (1, 0)


def test_the_gauge_walk_runs_under_the_reapers_timeouts(
        call: Invoke, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not the pool's (15 s / 5 s): the reaper's 10 s / 2 s, like its pass."""
    assert call("PUT", "/v1/queues/alpha", {}).status == 200
    call("POST", "/v1/queues/alpha/tasks", {"tasks": [{"payload": 1}]})
    seen: list[dict[str, Any] | None] = []
    emit = metrics.queue_gauge

    def emit_and_look(queue: str, values: Mapping[str, float]) -> None:
        with engine().db.connection() as conn:
            seen.append(execute_text(conn, "SELECT current_setting('statement_timeout') AS s,"
                                           " current_setting('lock_timeout') AS l").fetchone())
        emit(queue, values)

    monkeypatch.setattr(metrics, "queue_gauge", emit_and_look)
    totals, gauges = reaper_gauges(capsys)
    assert totals["gauged_queues"] == 1 and sorted(gauges) == ["alpha"]
    assert seen == [{"s": "10s", "l": "2s"}]
