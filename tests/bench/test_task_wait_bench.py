"""Smoke run of bench.task_wait (seconds): every wait is answered done by its task's ack,
the figures are written, and the last line is the median the bar is read from. The bar
itself (100 ms) is the benchmark's to judge (``--max-ms``), not this test's."""

from __future__ import annotations

import re
from pathlib import Path

from tests.bench.test_bench_smoke import run_bench
from tierq.local.services import LocalServices


def test_task_wait_bench_prints_the_median_wake(services: LocalServices,
                                                tmp_path: Path) -> None:
    lines, result = run_bench("bench.task_wait", services, tmp_path / "wait.json",
                              "--waits", "5")
    assert re.fullmatch(r"wait_wake_ms_median=\d+\.\d", lines[-1]), lines[-1]
    assert result["waits"] == 5
    assert 0 < result["wake_ms_median"] <= result["wake_ms_max"]
    assert result["task_finished_us_median"] > 0
    assert result["task_finished_bound_us_median"] > 0
