"""Smoke run of bench.push (seconds): it hands every task to the no-op consumer, writes its
JSON and ends with the line a caller reads. Numbers are not judged here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.bench.test_bench_smoke import run_bench
from tierq.local.services import LocalServices


def test_push_bench_acks_every_task_and_prints_push_tasks_per_s(
        services: LocalServices, tmp_path: Path) -> None:
    lines, result = run_bench("bench.push", services, tmp_path / "push.json",
                              "--tasks", "300", "--repeats", "2", "--batch-size", "7")
    assert re.fullmatch(r"push_tasks_per_s=\d+", lines[-1]), lines[-1]
    assert len(result["repeats"]) == 2
    for repeat in result["repeats"]:  # the benchmark fails unless all 300 were acked once
        assert repeat["push_tasks_per_s"] > 0 and repeat["batches"] >= 300 / 7
