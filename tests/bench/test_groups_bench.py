"""Smoke run of bench.groups (seconds): grouped and plain tasks are all claimed and acked,
each group's in enqueue order, and the run ends with the line a caller reads. Numbers are
not judged here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.bench.test_bench_smoke import run_bench
from tierq.local.services import LocalServices


def test_groups_bench_acks_every_task_and_prints_the_ratio(services: LocalServices,
                                                            tmp_path: Path) -> None:
    lines, result = run_bench("bench.groups", services, tmp_path / "groups.json",
                              "--tasks", "2000", "--groups", "50", "--repeats", "1")
    assert re.fullmatch(r"ratio_groups_vs_plain=\d+\.\d\d", lines[-1]), lines[-1]
    # (the benchmark fails unless every task was acked once and each group kept its order)
    assert [r["grouped"] for r in result["runs"]] == [False, True]
    assert result["groups_tasks_per_s"] > 0 and result["plain_tasks_per_s"] > 0
