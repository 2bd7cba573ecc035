"""Smoke runs of the benchmarks (seconds): they start, measure, finish every task, write
their JSON and end with the line a caller reads. Numbers are not judged here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.peers.remote import PeerDriver
from bench.peers.venv import peer_python
from tierq.local.services import LocalServices

ROOT = Path(__file__).resolve().parents[2]


def run_bench(module: str, services: LocalServices, out: Path, *args: str
              ) -> tuple[list[str], dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", module, "--database-url", services.postgres.url,
         "--valkey-url", services.valkey.url, "--json", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout.strip().splitlines(), json.loads(out.read_text())


def test_engine_bench_finishes_every_task_and_prints_tasks_per_s(
        services: LocalServices, tmp_path: Path) -> None:
    lines, result = run_bench("bench.engine", services, tmp_path / "engine.json",
                              "--tasks", "300", "--workers", "1")
    assert re.fullmatch(r"tasks_per_s=\d+", lines[-1]), lines[-1]
    (run,) = result["runs"]
    for phase in ("enqueue", "drain", "e2e"):
        assert run[phase]["rate"] > 0
    assert run["drain"]["left"] == 0 and run["e2e"]["left"] == 0
    assert run["e2e"]["claim_p50_ms"] > 0


def test_side_by_side_bench_runs_every_system_and_ends_with_the_ratio(
        services: LocalServices, peers_python: Path, tmp_path: Path) -> None:
    systems = ["tierq-engine", "tierq-http", "pgqueuer", "procrastinate", "bare-table"]
    lines, result = run_bench("bench.vs_peers", services, tmp_path / "peers.json",
                              "--tasks", "200", "--workers", "1", "--systems", *systems)
    assert re.fullmatch(r"ratio_vs_best_peer=\d+\.\d\d", lines[-1]), lines[-1]
    assert sorted(r["system"] for r in result["runs"]) == sorted(systems)
    for run in result["runs"]:
        assert run["drain"]["left"] == 0 and run["e2e"]["left"] == 0, run
    assert result["best_peer"] in ("pgqueuer", "procrastinate")  # the bare table is no peer
    assert any(line.startswith("tierq-engine / bare-table") for line in lines)


def test_side_by_side_bench_runs_the_engine_with_settings_beside_its_defaults(
        services: LocalServices, peers_python: Path, tmp_path: Path) -> None:
    lines, result = run_bench("bench.vs_peers", services, tmp_path / "peers.json",
                              "--tasks", "200", "--workers", "1", "--systems", "tierq-engine",
                              "pgqueuer", "--tierq-setting", "batch_rows=true")
    assert re.fullmatch(r"ratio_vs_best_peer=\d+\.\d\d", lines[-1]), lines[-1]
    assert re.fullmatch(r"ratio_vs_best_peer_with_settings=\d+\.\d\d", lines[-2]), lines[-2]
    assert sorted(r["system"] for r in result["runs"]) == [
        "pgqueuer", "tierq-engine", "tierq-engine+batch_rows=true"]
    assert result["with_settings"] == "tierq-engine+batch_rows=true"
    assert any(line.startswith("tierq-engine+batch_rows=true / pgqueuer") for line in lines)


@pytest.mark.parametrize("args, says", [
    (["--tierq-setting", "no_such_field=1"], "a field of tierq.config.Settings"),
    (["--tierq-setting", "batch_rows=true", "--systems", "pgqueuer"], "name it in --systems"),
    (["--tierq-setting", "database_url=postgresql://elsewhere"], "the benchmark's own"),
    (["--tierq-setting", "db_pool_max=8"], "the benchmark's own"),
    (["--tierq-setting", "batch_rows=true", "--tierq-setting", "batch_rows=false"],
     "named twice"),
])
def test_side_by_side_bench_refuses_settings_it_cannot_run_before_starting(
        args: list[str], says: str) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.vs_peers", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert "side by side" not in done.stdout  # (nothing started)


def test_maintenance_bench_reaps_and_promotes_the_live_work_and_prints_the_idle_pass(
        services: LocalServices, tmp_path: Path) -> None:
    lines, result = run_bench("bench.maintenance", services, tmp_path / "maintenance.json",
                              "--quick", "--sizes", "200", "1000", "--repeat", "1")
    assert re.fullmatch(r"idle_pass_ms_at_1k=\d+", lines[-1]), lines[-1]
    assert [s["pairs"] for s in result["sizes"]] == [200, 1000]
    for size in result["sizes"]:
        (repeat,) = size["repeats"]
        # the benchmark itself fails unless the lease is reaped and the cold work promoted;
        # the idle pairs are never visited: only the live ones are
        assert repeat["expired"] == 1 and repeat["promoted"] >= 1
        assert repeat["reaper_pairs"] <= 2 and repeat["cold_to_warm_pairs"] == 1


def test_delayed_mover_bench_drains_each_case_and_prints_the_rates(
        services: LocalServices, tmp_path: Path) -> None:
    lines, result = run_bench("bench.delayed_mover", services, tmp_path / "delayed.json",
                              "--backlog", "2000", "--backlog-pairs", "200", "--due", "3000",
                              "--pairs", "150", "--repeat", "1")
    assert re.fullmatch(r"delayed_rows_per_s_many_pairs=\d+", lines[-1]), lines[-1]
    assert re.fullmatch(r"delayed_rows_per_s_one_pair=\d+", lines[-2]), lines[-2]
    for case in ("one_pair", "many_pairs"):  # (the benchmark drains each case or fails)
        assert sum(moved for moved, _ in result[case]["passes"]) == 3000, case
    assert result["batches_behind"] == 1
    assert result["index_bytes"]  # tierq_tasks_delayed_*


def test_cron_tick_bench_visits_the_due_schedules_only_and_prints_the_pass(
        services: LocalServices, tmp_path: Path) -> None:
    lines, result = run_bench("bench.cron_tick", services, tmp_path / "cron_tick.json",
                              "--sizes", "500", "--due", "2", "--repeat", "1")
    assert re.fullmatch(r"cron_tick_ms_at_500_schedules=\d+", lines[-1]), lines[-1]
    (size,) = result["sizes"]
    (repeat,) = size["repeats"]
    # the benchmark itself fails unless each pass visits exactly the due schedules
    assert size["schedules"] == 500 and (repeat["visited"], repeat["installed"]) == (2, 2)
    assert repeat["due_pass_ms"] > 0 and repeat["pre_0016_query_ms"] > 0


@pytest.fixture(scope="session")
def peers_python() -> Path:
    """The peers' environment, made first when missing (about a minute), outside the time
    limit of a benchmark run."""
    return peer_python()


def test_the_peers_import_in_their_own_environment_which_has_no_tierq(
        peers_python: Path) -> None:
    probe = subprocess.run(
        [str(peers_python), "-c",
         "import sys, importlib.util, importlib.metadata as md\n"
         "import bench.peers.driver, bench.systems.pgqueuer, bench.systems.procrastinate\n"
         "import pgqueuer.qm, procrastinate\n"
         "assert importlib.util.find_spec('tierq') is None, 'tierq is installed here'\n"
         "print(sorted(m for m in sys.modules if m.partition('.')[0] == 'tierq'))\n"
         "print(md.version('pgqueuer'))"],
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=120, check=False)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.split() == ["[]", "1.6.0"]


def test_a_failure_in_the_peers_driver_comes_back_with_its_traceback(
        peers_python: Path) -> None:
    driver = PeerDriver(())
    try:
        assert driver.request({"op": "call", "target": "importlib.metadata:version",
                               "args": ["pgqueuer"]}) == "1.6.0"
        with pytest.raises(RuntimeError, match="No module named 'no_such_module'"):
            driver.request({"op": "call", "target": "no_such_module:run", "args": []})
        # the driver answers again after a failure
        assert driver.request({"op": "call", "target": "os.path:basename",
                               "args": ["/a/b"]}) == "b"
    finally:
        driver.close()


def test_valkey_commands_bench_runs_every_phase_and_prints_the_slowest_command(
        services: LocalServices, tmp_path: Path) -> None:
    lines, result = run_bench("bench.valkey_commands", services, tmp_path / "valkey.json",
                              "--leases", "800", "--repeat", "2", "--extra", "100")
    assert re.fullmatch(r"slowest_valkey_command_ms=\d+\.\d\d", lines[-1]), lines[-1]
    phases = [p["phase"] for p in result["phases"]]
    assert phases == ["claim 100", "ack 100", "nack 100", "heartbeat 100", "release 100",
                      "task view (leased)", "cancel (leased)", "replace into the future",
                      "reaper + reconciler"]
    assert all(p["commands"] > 0 for p in result["phases"])
    assert set(result["lease_memory"]) == {"leased", "lease_of", "claims"}


def test_request_cost_bench_pages_and_claims_and_prints_both_figures(
        services: LocalServices, tmp_path: Path) -> None:
    lines, result = run_bench("bench.request_cost", services, tmp_path / "cost.json",
                              "--leases", "600", "--idle-tenants", "150", "--repeat", "2")
    assert re.fullmatch(r"running_page_ms_at_600_leases=\d+\.\d\d", lines[-2]), lines[-2]
    assert re.fullmatch(r"admin_claim_ms_at_150_idle_tenants=\d+\.\d\d", lines[-1]), lines[-1]
    assert result["leases"] == 600 and result["idle_tenants"] == 150
    assert set(result["figures_ms"]) == {
        "running page (first 1,000)", "running page (1,000 from the middle)",
        "queue view (admin)", "queue view (the tenant's)",
        "every lease of the pair (for scale)", "admin claim (a window of idle tenants)",
        "admin claim (index empty)"}


def test_pg_routines_bench_measures_every_step_every_way(services: LocalServices,
                                                          tmp_path: Path) -> None:
    """bench.pg_routines: every step measured all three ways (each ack finds its rows: the
    bench asserts it), the ratios end the output."""
    from bench.pg_routines import STEPS, WAYS, key_of

    lines, result = run_bench("bench.pg_routines", services, tmp_path / "pg_routines.json",
                              "--rounds", "1", "--scale", "0.05")
    last = dict(line.partition("=")[::2] for line in lines[-2 * len(STEPS):])
    for step in STEPS:
        for ratio in ("routine_vs_proxy", "routine_vs_prepared"):
            assert float(last[f"{ratio}_{key_of(step)}"]) > 0, (ratio, step.name)
        for way in WAYS:
            assert result["us_per_task"][f"{key_of(step)}|{way}"] > 0, (step.name, way)
