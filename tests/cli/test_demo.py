"""``tierq demo``, the README's main command, end to end and small: it starts its own local
stack over this session's PostgreSQL and Redis, shows every step, and exits 0 only when it
saw all of them (burst drained through the hysteresis within warm_max, delayed task,
schedule occurrence, dead letter replayed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.e2e
def test_demo_runs_end_to_end(database_url: str, valkey_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": database_url, "VALKEY_URL": valkey_url,
           "COLUMNS": "160"}
    result = subprocess.run(
        [sys.executable, "-c", "from tierq.cli import app; app()", "demo", "--tasks", "600",
         "--warm-max", "100", "--workers", "1", "--concurrency", "8", "--timeout", "90"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "/dashboard" in output
    assert "tierq demo: summary" in output
    assert "600 / 600" in output
    assert "cold → warm" in output  # turned cold by the burst, back to warm
    assert "✗" not in output
    assert "waiting" in output and "held" in output  # (the counts table's columns)


def test_the_counts_table_shows_every_state_tierq_stats_shows() -> None:
    from rich.console import Console

    from tierq.cli.stats import COUNTS
    from tierq.local.demo import DemoProgress, counts_table

    progress = DemoProgress()
    progress.counts = {"warm": 11, "cold": 12, "waiting": 13, "held": 14, "delayed": 15,
                       "leased": 16, "dead": 17}
    console = Console(width=200, record=True)
    console.print(counts_table(progress, 100))
    text = console.export_text()
    header = next(line for line in text.splitlines() if "warm" in line and "cold" in line)
    columns = header.split()
    columns = columns[:columns.index("peak")]  # (then "peak warm", "peak cold")
    assert [c for c in columns if c in COUNTS] == list(COUNTS)
    for n in range(11, 18):
        assert str(n) in text
