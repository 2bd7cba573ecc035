"""When the feeder counts a queue's backlog again (``BacklogGauge``), counted against a real
PostgreSQL and Valkey: before the first round, when the figure leaves less room than a round
wants, and once the time since the last count is 20 times what that count took (30 s at
most); in between, the last count plus the tasks the run created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tierq_feeder.backlog
from tierq_feeder.backlog import (
    RECOUNT_AFTER_DURATIONS,
    RECOUNT_AT_MOST_AFTER_SECONDS,
    Backlog,
    BacklogGauge,
    queue_backlog,
)

from tests.spark.data import write_parquet
from tierq.engine import Tierq
from tierq.models import TaskIn

pytestmark = pytest.mark.spark


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def counting(engine: Tierq) -> tuple[list[Backlog], Clock, BacklogGauge]:
    """A gauge over queue ``g`` whose counts each take 0.5 s of the test's clock."""
    clock = Clock()
    counts: list[Backlog] = []

    def count() -> Backlog:
        clock.now += 0.5
        counts.append(queue_backlog(engine.ctx, "g", cap=1000))
        return counts[-1]

    return counts, clock, BacklogGauge(count, max_backlog=100, clock=clock)


def test_counts_first_then_adds_what_the_run_created(
        engine: Tierq, counting: tuple[list[Backlog], Clock, BacklogGauge]) -> None:
    counts, clock, gauge = counting
    engine.enqueue("g", [TaskIn(payload={}, key=f"o{i}") for i in range(5)])
    first = gauge.look(wanted=20)
    assert (first.total, first.room(100), len(counts)) == (5, 95, 1)

    gauge.created(20)
    engine.enqueue("g", [TaskIn(payload={}, key=f"p{i}") for i in range(3)])
    clock.now += RECOUNT_AFTER_DURATIONS * 0.5 - 0.01  # just short of 20 x 0.5 s: no count
    second = gauge.look(wanted=20)
    assert (second.total, second.added, len(counts)) == (25, 20, 1)
    assert "created since: 20" in str(second)

    clock.now += 0.01  # 20 x the count's 0.5 s since it ended: counted again
    third = gauge.look(wanted=20)
    assert (third.total, third.added, len(counts)) == (8, 0, 2)  # the test created none
    assert gauge.counts == 2


def test_counts_again_when_the_figure_leaves_too_little_room(
        engine: Tierq, counting: tuple[list[Backlog], Clock, BacklogGauge]) -> None:
    counts, _clock, gauge = counting
    assert gauge.look(wanted=40).total == 0
    gauge.created(70)  # the figure says 70: room 30 < 40 wanted, so it counts again
    engine.enqueue("g", [TaskIn(payload={}, key=f"k{i}") for i in range(10)])
    again = gauge.look(wanted=40)
    assert (again.total, again.added, len(counts)) == (10, 0, 2)
    # a smaller round fits the figure: no count
    gauge.created(60)
    assert (gauge.look(wanted=30).total, len(counts)) == (70, 2)
    assert gauge.look(wanted=31).total == 10 and len(counts) == 3


def test_a_slow_count_is_trusted_for_30_seconds_at_most(engine: Tierq) -> None:
    clock = Clock()
    counts = 0

    def slow_count() -> Backlog:
        nonlocal counts
        counts += 1
        clock.now += 10.0  # 20 x 10 s would be 200 s
        return queue_backlog(engine.ctx, "slow", cap=1000)

    gauge = BacklogGauge(slow_count, max_backlog=100, clock=clock)
    gauge.look(wanted=1)
    clock.now += RECOUNT_AT_MOST_AFTER_SECONDS - 0.01
    gauge.look(wanted=1)
    assert counts == 1
    clock.now += 0.01
    gauge.look(wanted=1)
    assert counts == 2


def test_a_run_between_counts_stops_at_the_limit_with_what_it_created(
        feed: Any, spark: Any, tmp_path: Path, database_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts made only where the figure leaves too little room: the run's own tasks,
    added to the first count, bring it to the limit, and one count there confirms it."""
    monkeypatch.setattr(tierq_feeder.backlog, "RECOUNT_AFTER_DURATIONS", 10**9)
    monkeypatch.setattr(tierq_feeder.backlog, "RECOUNT_AT_MOST_AFTER_SECONDS", 1e9)
    folder = write_parquet(spark, tmp_path / "rows", [{"id": f"k{i}"} for i in range(12)])
    result = feed("--queue", "gauge", "--source", f"rows={folder}", "--key-column", "id",
                  "--max-backlog", "10", "--batch-rows", "2", "--no-warm")
    assert (result.created, result.deferred, result.stopped_by) == (10, 2, "backlog")
    assert (result.rounds, result.backlog_counts) == (5, 2)  # before round 1, at the limit
