"""Smoke run of bench.batch_row_size (seconds): both layouts run every step at two sizes (the
benchmark itself fails unless each layout's tasks went the way it names and were all acked
and swept), and the run ends with a ratio a size and the smallest size that pays. Numbers
are not judged here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.bench.test_bench_smoke import run_bench
from tierq.local.services import LocalServices


def test_batch_row_size_bench_prints_a_ratio_a_size_and_where_batch_rows_pay(
        services: LocalServices, tmp_path: Path) -> None:
    lines, result = run_bench("bench.batch_row_size", services, tmp_path / "brs.json",
                              "--sizes", "1", "8", "--rounds", "1", "--tasks", "200")
    ratios = {}
    for line, size in zip(lines[-3:-1], (1, 8), strict=True):
        match = re.fullmatch(rf"batch_vs_rows_n{size}=(\d+\.\d\d)", line)
        assert match, line
        ratios[size] = float(match.group(1))
    pays = re.fullmatch(r"smallest_batch_row_that_pays=(1|8|none)", lines[-1])
    assert pays, lines[-1]
    expected = "none" if ratios[8] >= 1 else "8" if ratios[1] >= 1 else "1"
    assert pays.group(1) == expected, (ratios, lines[-1])
    assert result["smallest_batch_row_that_pays"] == (None if expected == "none"
                                                      else int(expected))
    cycles = result["cycles"]
    assert sorted((c["size"], c["layout"]) for c in cycles) == [
        (1, "batch rows"), (1, "rows"), (8, "batch rows"), (8, "rows")]
    for cycle in cycles:
        assert cycle["tasks"] == 200 and cycle["enqueues"] == 200 // cycle["size"], cycle
        assert cycle["reaper_passes"] >= 1, cycle
        assert list(cycle["steps"]) == ["enqueue", "ack", "sweep", "vacuum"]
        for name, step in cycle["steps"].items():
            assert step["pg_us"] > 0, (cycle["layout"], cycle["size"], name, step)
        assert cycle["steps"]["enqueue"]["wal_bytes"] > 0, cycle
