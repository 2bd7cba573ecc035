"""Smoke run of bench.flows (seconds): a parent's ack releases its waiting children, every
child is claimed once carrying the parent's result, and the run ends with the line a caller
reads. Numbers are not judged here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.bench.test_bench_smoke import run_bench
from tierq.local.services import LocalServices


def test_flows_bench_releases_every_child_and_prints_the_release_time(
        services: LocalServices, tmp_path: Path) -> None:
    lines, result = run_bench("bench.flows", services, tmp_path / "flows.json",
                              "--children", "1200")
    assert re.fullmatch(r"fan_out_release_ms=\d+", lines[-1]), lines[-1]
    # (the benchmark fails unless each of the 1,200 children was claimed once, with the
    # parent's result, and no wait is left)
    assert result["children"] == 1200 and result["ack_ms"] > 0
