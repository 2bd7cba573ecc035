"""bench.pg_routines as a smoke run on a private server (it reads its backends in /proc):
every step is measured all three ways, every ack finds its rows, the figures end the
output. Numbers are not judged here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.pg_routines import STEPS, WAYS, key_of

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_pg_routines_measures_every_step_every_way(session_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "pg_routines.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.pg_routines", "--rounds", "1", "--scale", "0.05",
         "--state-dir", str(session_dir / "bench-pg-routines"), "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    last = dict(line.partition("=")[::2]
                for line in run.stdout.strip().splitlines()[-2 * len(STEPS):])
    measured = json.loads(out.read_text())["us_per_task"]
    for step in STEPS:
        for ratio in ("routine_vs_proxy", "routine_vs_prepared"):
            assert float(last[f"{ratio}_{key_of(step)}"]) > 0, (ratio, step.name)
        for way in WAYS:
            assert measured[f"{key_of(step)}|{way}"] > 0, (step.name, way)
