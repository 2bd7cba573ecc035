"""Smoke run of bench.throughput_counts (seconds): it measures every variant, writes its JSON
and ends with the line a caller reads. Numbers are not judged here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.bench.test_bench_smoke import run_bench
from tierq.local.services import LocalServices


def test_throughput_counts_bench_prints_the_ack_overhead(services: LocalServices,
                                                         tmp_path: Path) -> None:
    lines, result = run_bench("bench.throughput_counts", services, tmp_path / "tc.json",
                              "--calls", "100")
    assert re.fullmatch(r"ack_count_overhead_us=-?\d+", lines[-1]), lines[-1]
    assert result["calls"] == 100
    assert len(result["median_us"]) == 9
    assert all(us > 0 for us in result["median_us"].values())
