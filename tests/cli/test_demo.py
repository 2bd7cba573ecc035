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
