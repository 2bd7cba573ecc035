"""The schedule arithmetic (pure Python) and its Spark form agree with the documented
orders."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pyspark.sql import functions as F
from tierq_feeder.feeder import rank_column
from tierq_feeder.schedule import PartProgress, Schedule, advance, part_bases

pytestmark = pytest.mark.spark


def names(schedule: Schedule) -> list[str]:
    return [f"{'abcd'[s]}{j}" for s, j in schedule.order()]


def test_fair_is_round_robin_and_skips_empty_sources() -> None:
    assert names(Schedule((3, 1, 2))) == ["a0", "b0", "c0", "a1", "c1", "a2"]
    assert names(Schedule((0, 2, 0, 1))) == ["b0", "d0", "b1"]


def test_prefer_takes_one_source_first_then_fair() -> None:
    assert names(Schedule((3, 1, 2), preferred=2)) == ["c0", "c1", "a0", "b0", "a1", "a2"]
    assert names(Schedule((2, 2, 2), preferred=1)) == ["b0", "b1", "a0", "c0", "a1", "c1"]
    assert names(Schedule((2, 0, 1), preferred=1)) == ["a0", "c0", "a1"]


def all_small_schedules() -> list[Schedule]:
    out = []
    for counts in itertools.product(range(4), repeat=3):
        out.append(Schedule(counts))
        out += [Schedule(counts, preferred=p) for p in range(3)]
    return out


def test_ranks_are_a_permutation_and_consumed_before_counts_them() -> None:
    for schedule in all_small_schedules():
        cells = schedule.order()
        assert sorted(schedule.rank(s, j) for s, j in cells) == list(range(schedule.total))
        for end in range(schedule.total + 1):
            expected = [sum(1 for s, _ in cells[:end] if s == i)
                        for i in range(len(schedule.counts))]
            assert schedule.consumed_before(end) == expected


def test_rank_column_matches_the_python_rank(spark: Any) -> None:
    schedules = [Schedule(c, p) for c, p in [
        ((3, 1, 2), None), ((0, 2, 0), None), ((4, 4, 4), None), ((1, 5, 2), None),
        ((3, 1, 2), 2), ((3, 1, 2), 0), ((2, 0, 3), 1), ((5, 2, 1), 1), ((0, 0, 3), 2)]]
    rows = [(index, s, j) for index, schedule in enumerate(schedules)
            for s, n in enumerate(schedule.counts) for j in range(n)]
    frame = spark.createDataFrame(rows, "schedule int, source int, j long")
    rank = None
    for index, schedule in enumerate(schedules):
        for source in range(3):
            here = (F.col("schedule") == index) & (F.col("source") == source)
            value = rank_column(schedule, source, F.col("j"))
            rank = F.when(here, value) if rank is None else rank.when(here, value)
    assert rank is not None
    got = frame.select("schedule", "source", "j", rank.alias("rank")).collect()
    assert len(got) == len(rows)
    for r in got:
        assert r["rank"] == schedules[r["schedule"]].rank(r["source"], r["j"])


def test_advance_fills_parts_in_order() -> None:
    parts = [PartProgress("f1", 2, 5), PartProgress("f2", 0, 4), PartProgress("f3", 4, 4)]
    assert part_bases(parts) == {"f1": 0, "f2": 3, "f3": 7}
    assert advance(parts, 5) == [PartProgress("f1", 5, 5), PartProgress("f2", 2, 4),
                                 PartProgress("f3", 4, 4)]
    with pytest.raises(ValueError, match="only 7 remaining"):
        advance(parts, 8)
