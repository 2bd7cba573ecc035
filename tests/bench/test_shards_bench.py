"""bench.shards as a smoke run: both legs finish every task and the closing figures come
last (the sizes that mean something belong to the benchmark itself)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_shards_bench_runs_both_legs_and_ends_with_its_figures(session_dir: Path) -> None:
    state = session_dir / "bench-shards"
    run = subprocess.run(
        [sys.executable, "-m", "bench.shards", "--tasks", "400", "--workers", "2",
         "--repeats", "1", "--state-dir", str(state)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    lines = run.stdout.strip().splitlines()
    assert [line.split("=")[0] for line in lines[-4:]] == [
        "tasks_per_s_1_shard", "tasks_per_s_2_shards", "shard_ratio", "shard_balance"]
    assert "[2 shards, run 1]" in run.stdout and "tasks per shard" in run.stdout
    balance = float(lines[-1].split("=")[1])
    assert 1.0 <= balance < 10.0  # both shards took tasks
