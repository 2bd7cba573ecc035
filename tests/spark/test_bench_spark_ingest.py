"""The ingest benchmark's smoke run (``--quick``): every leg runs as a job of its own and
writes every row, and the run ends with the line a caller reads. Numbers are not judged."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_compares_the_feeder_with_spark_jdbc_and_ends_with_the_ratio(
        database_url: str, valkey_url: str, tmp_path: Path) -> None:
    out = tmp_path / "ingest.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.spark_ingest", "--quick", "--database-url", database_url,
         "--valkey-url", valkey_url, "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert re.fullmatch(r"feeder_vs_spark_jdbc=\d+\.\d\d", lines[-1]), lines[-1]
    assert any(re.fullmatch(r"feeder / write path alone = \d+\.\d\d", x) for x in lines)
    assert any(re.fullmatch(r"driver_peak_rss_mb=\d+ \(feeder, 20,000 rows\)", x)
               for x in lines)
    result = json.loads(out.read_text())
    assert sorted(r["leg"] for r in result["runs"]) == ["alone", "feeder", "spark_jdbc"]
    assert all(r["rows"] == 20_000 and r["rate"] > 0 for r in result["runs"])
