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
    assert any(re.fullmatch(r"feeder / write path alone = \d+\.\d\d \(whole job; its rounds "
                            r"only: \d+\.\d\d\)", x) for x in lines)
    assert any(re.fullmatch(r"driver_peak_rss_mb=\d+ \(feeder, 20,000 rows\)", x)
               for x in lines)
    result = json.loads(out.read_text())
    assert sorted(r["leg"] for r in result["runs"]) == ["alone", "feeder", "spark_jdbc"]
    assert all(r["rows"] == 20_000 and r["rate"] > 0 for r in result["runs"])
    (feeder,) = [r for r in result["runs"] if r["leg"] == "feeder"]
    assert 0 < feeder["rounds_seconds"] < feeder["seconds"]
    assert result["feeder_rounds_vs_alone"] > result["feeder_vs_alone"]


def test_without_the_jdbc_driver_it_stops_before_starting_anything(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from bench import spark_ingest

    monkeypatch.setattr(spark_ingest, "JDBC_JAR", str(tmp_path / "absent.jar"))
    monkeypatch.setattr(spark_ingest, "open_stores", lambda args: pytest.fail("started"))
    with pytest.raises(SystemExit) as stopped:
        spark_ingest.main(["--quick"])
    assert stopped.value.code == 2
    assert "install-test-deps.sh" in capsys.readouterr().err
