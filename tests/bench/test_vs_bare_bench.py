"""bench.vs_bare as a smoke run on private servers (its CPU and statement counts need them),
and the parts of it that decide figures: the rows of the mixed shape and the stages of the
client's profile (bench/breakdown.py). Numbers are not judged here."""

from __future__ import annotations

import cProfile
import json
import math
import pstats
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

import bench.systems
from bench.breakdown import (
    ARGUMENTS,
    BENCH,
    OTHER,
    REPLIES,
    STAGES,
    VALIDATION,
    StageSplit,
    rule_of,
)
from bench.systems import mixed_rows

REPO_ROOT = Path(__file__).resolve().parents[2]
SHAPES = ("4x400", "8x10", "mixed")


def small_run(session_dir: Path, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """A run of 400 tasks, once each, with ``options``, on the session's private servers;
    its JSON in ``out``. It must exit 0."""
    run = subprocess.run(
        [sys.executable, "-m", "bench.vs_bare", "--tasks", "400", "--repeat", "1", *options,
         "--state-dir", str(session_dir / "bench-vs-bare"), "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return run


def test_the_bare_table_bench_runs_every_shape_and_ends_with_the_ratios(
        session_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "vs_bare.json"
    run = small_run(session_dir, out, "--breakdown")
    lines = run.stdout.strip().splitlines()
    last = [line.partition("=") for line in lines[-6:]]
    assert [key for key, _, _ in last] == [f"ratio_vs_bare_{s}" for s in SHAPES] + [
        f"pg_cpu_vs_bare_{s}" for s in SHAPES]
    assert all(float(value) > 0 for _, _, value in last)  # private servers: CPU measured
    for shape in SHAPES:
        for system in ("tierq", "bare"):
            assert f"tasks_per_pg_cpu_s_{system}_{shape}=" in run.stdout
            assert f"claim_ms_p50_p99_{system}_{shape}=" in run.stdout
    result: dict[str, Any] = json.loads(out.read_text())
    assert sorted((r["system"], r["workers"]) for r in result["runs"]) == sorted(
        (system, workers) for system in ("tierq-engine", "bare-table") for workers in (4, 8, 4))
    for r in result["runs"]:
        assert r["drain"]["left"] == 0 and r["e2e"]["left"] == 0, r
        assert r["e2e"]["statements_per_task"] > 0 and r["e2e"]["wal_bytes_per_task"] > 0, r
    assert [b["shape"] for b in result["breakdown"]] == list(SHAPES)
    for b in result["breakdown"]:
        for system in ("tierq-engine", "bare-table"):
            assert b["statements"][system], (b["shape"], system)
            # the database's backends split by role (a backend sampled every 20 ms: in this
            # small run one role's may all live between two samples and show 0)
            work = b["work_per_task"][system]
            assert work["pg_consumers_us"] is not None, work
            assert work["pg_producers_us"] is not None, work
            roles = b["stages"][system]
            # a consumer that acked nothing (others took every task) has no per-task split
            assert "producer" in roles and set(roles) <= {"producer", "consumer"}
            for role in roles.values():
                assert math.isclose(sum(role["share"].values()), 1.0, abs_tol=1e-6)
        # only tierq validates its input
        tierq_producer = b["stages"]["tierq-engine"]["producer"]["share"]
        assert tierq_producer[VALIDATION] > 0
        assert b["stages"]["bare-table"]["producer"]["share"][VALIDATION] == 0


def test_the_mixed_rows_are_the_same_for_every_system_and_phase() -> None:
    spec = {"range": (1000, 1500), "workload": {
        "tenants": 10, "priorities": True, "key_every": 10}}
    rows = mixed_rows(spec, "p-")
    assert rows is not None and rows == mixed_rows(spec, "p-")
    assert set(rows.tenants) == {f"t{i}" for i in range(10)}
    assert set(rows.priorities) == set(range(10))
    keyed = [k for k in rows.keys if k is not None]
    assert len(keyed) == 50 and keyed[0] == "p-1000" and len(set(keyed)) == 50
    assert mixed_rows({"range": (0, 10), "workload": {
        "tenants": 0, "priorities": False, "key_every": 0}}, "") is None
    assert mixed_rows({"range": (0, 10)}, "") is None


def test_a_profile_splits_by_stage_and_builtins_take_their_callers_stage() -> None:
    from tierq.core.ids import uuid7_strings

    def loop() -> None:
        for _ in range(200):
            uuid7_strings(50)  # tierq/core/ids.py: arguments (its builtins too)
            orjson.loads(b'{"a": [1, 2, 3]}')  # replies
            time.sleep(0)  # a builtin called from here, which has no caller: other

    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()
    loop()
    profiler.disable()
    split = StageSplit(pstats.Stats(profiler))
    assert math.isclose(sum(split.seconds.values()), split.total)
    assert split.seconds[ARGUMENTS] > 0 and split.seconds[REPLIES] > 0
    assert any(name == "tierq/core/ids.py:uuid7_strings"
               for name, _ in split.top(ARGUMENTS, 5))
    assert "~:<built-in method time.sleep>" in split.functions[OTHER]
    assert set(split.seconds) == set(STAGES)
    assert rule_of(("/x/site-packages/psycopg/_cursor_base.py", 1, "_execute_gen")) \
        == "round trips"
    assert rule_of(("~", 0, "<method 'gets' of 'hiredis.Reader' objects>")) == REPLIES
    # answers' models made from tierq's own values are replies, not the caller's validation
    assert rule_of(("/w/shared/tierq/models/base.py", 1, "made")) == REPLIES
    assert rule_of(("/w/shared/tierq/logic/claim.py", 1, "_fields")) == REPLIES
    assert rule_of(("/w/shared/tierq/models/tasks.py", 1, "_one_schedule")) == VALIDATION
    assert rule_of((bench.systems.__file__, 1, "claim_and_ack_loop")) == BENCH
    assert rule_of((__file__, 1, "loop")) is None  # a test is not the benchmark
    assert rule_of(("~", 0, "<method 'append' of 'list' objects>")) is None  # inherits


def test_the_designs_sketches_run_beside_the_two_and_print_their_ratios_first(
        session_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "vs_bare_sketch.json"
    run = small_run(session_dir, out, "--shapes", "mixed", "--sketch", "--sketch", "b",
                    "--sketch", "c")
    lines = run.stdout.strip().splitlines()
    keys = [line.partition("=")[0] for line in lines[-8:]]
    assert keys == ["sketch_a_ratio_vs_bare_mixed", "sketch_a_pg_cpu_vs_bare_mixed",
                    "sketch_b_ratio_vs_bare_mixed", "sketch_b_pg_cpu_vs_bare_mixed",
                    "sketch_c_ratio_vs_bare_mixed", "sketch_c_pg_cpu_vs_bare_mixed",
                    "ratio_vs_bare_mixed", "pg_cpu_vs_bare_mixed"]
    result: dict[str, Any] = json.loads(out.read_text())
    assert sorted(r["system"] for r in result["runs"]) == [
        "bare-table", "tierq-batch-sketch", "tierq-engine", "tierq-hot-sketch",
        "tierq-log-sketch"]
    for r in result["runs"]:
        assert r["drain"]["left"] == 0 and r["e2e"]["left"] == 0, r
    shape = result["shapes"]["mixed"]
    assert shape["sketch_a_pg_cpu_vs_bare"] > 0 and shape["sketch_b_pg_cpu_vs_bare"] > 0
    (sketched,) = [r for r in result["runs"] if r["system"] == "tierq-hot-sketch"]
    assert any(note.endswith("rows into tierq_hot") for note in sketched["notes"]), sketched
    (logged,) = [r for r in result["runs"] if r["system"] == "tierq-log-sketch"]
    assert any(note.endswith("rows into the slots") for note in logged["notes"]), logged
    # the rotation emptied the slots after the phases, its cost measured apart and added
    assert logged["pg_us_apart"] > 0, logged
    assert shape["tierq-log-sketch"]["pg_us_apart"] == logged["pg_us_apart"]
    (batched,) = [r for r in result["runs"] if r["system"] == "tierq-batch-sketch"]
    assert any(note.endswith("tasks in batch rows") for note in batched["notes"]), batched
    assert batched["pg_us_apart"] > 0 and shape["sketch_c_pg_cpu_vs_bare"] > 0
    # what they spend after the phases is added to their PostgreSQL figures
    bare_pg = shape["bare-table"]["cpu_us_per_task"]["postgres"]
    for name, letter in (("tierq-log-sketch", "b"), ("tierq-batch-sketch", "c")):
        pg = shape[name]["cpu_us_per_task"]["postgres"] + shape[name]["pg_us_apart"]
        assert shape[f"sketch_{letter}_pg_cpu_vs_bare"] == pytest.approx(pg / bare_pg)


def test_design_d_and_the_two_store_floors_run_beside_the_two_and_print_their_ratios(
        session_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "vs_bare_floor.json"
    run = small_run(session_dir, out, "--shapes", "8x10", "--sketch", "d", "--floor",
                    "--floor", "batches", "--sketch-setting", "ack_group_commit=true")
    keys = [line.partition("=")[0] for line in run.stdout.strip().splitlines()[-8:]]
    assert keys == ["sketch_d_ratio_vs_bare_8x10", "sketch_d_pg_cpu_vs_bare_8x10",
                    "floor_ratio_vs_bare_8x10", "floor_pg_cpu_vs_bare_8x10",
                    "floor_batches_ratio_vs_bare_8x10", "floor_batches_pg_cpu_vs_bare_8x10",
                    "ratio_vs_bare_8x10", "pg_cpu_vs_bare_8x10"]
    result: dict[str, Any] = json.loads(out.read_text())
    runs = {r["system"]: r for r in result["runs"]}
    # (the sketch with its setting, named by it)
    sketch = "tierq-append-sketch+ack_group_commit=true"
    assert sorted(runs) == sorted(["bare-table", "tierq-engine", sketch, "two-store-floor",
                                   "two-store-floor+batch-rows"])
    for r in runs.values():
        assert r["drain"]["left"] == 0 and r["e2e"]["left"] == 0, r
    assert any(note.endswith("tasks in batch rows") for note in runs[sketch]["notes"])
    shape = result["shapes"]["8x10"]
    bare_pg = shape["bare-table"]["cpu_us_per_task"]["postgres"]
    # the sweeps after the phases are added to the figures; the row floor has none
    for name, key in ((sketch, "sketch_d_pg_cpu_vs_bare"),
                      ("two-store-floor+batch-rows", "floor_batches_pg_cpu_vs_bare")):
        assert runs[name]["pg_us_apart"] > 0, runs[name]
        pg = shape[name]["cpu_us_per_task"]["postgres"] + shape[name]["pg_us_apart"]
        assert shape[key] == pytest.approx(pg / bare_pg)
    assert runs["two-store-floor"]["pg_us_apart"] is None
    assert shape["floor_pg_cpu_vs_bare"] == pytest.approx(
        shape["two-store-floor"]["cpu_us_per_task"]["postgres"] / bare_pg)


def small_runs(session_dir: Path, out: Path, *options: str) -> dict[str, Any]:
    """A run of 400 tasks with ``options``: its systems' runs by name."""
    small_run(session_dir, out, *options)
    return {r["system"]: r for r in json.loads(out.read_text())["runs"]}


def test_acks_of_several_claims_and_a_setting_run_beside_the_two_and_finish_every_task(
        session_dir: Path, tmp_path: Path) -> None:
    """``--ack-claims``, ``--tierq-setting`` and ``--ack-and-claim`` in one run (five
    systems taking turns); the acks of several claims and the acks with claims have the
    setting too."""
    runs = small_runs(session_dir, tmp_path / "vs_bare_ack_claims.json", "--shapes", "8x10",
                      "--ack-claims", "4", "--tierq-setting", "claim_window_reuse_ms=0",
                      "--ack-and-claim")
    fused = runs["tierq-engine+ack-and-claim+claim_window_reuse_ms=0"]
    assert fused["drain"]["left"] == 0 and fused["e2e"]["left"] == 0, fused
    held = runs["tierq-engine+acks-of-4-claims+claim_window_reuse_ms=0"]
    assert held["drain"]["left"] == 0 and held["e2e"]["left"] == 0, held
    # (its commits a task are the benchmark's figure, not this test's: at 400 tasks the
    # maintenance jobs' commits, at a fixed rate, outweigh the acks', and the engine beside
    # it gathers its acks' commits too)
    assert held["drain"]["commits_per_task"] > 0
    changed = runs["tierq-engine+claim_window_reuse_ms=0"]
    assert changed["drain"]["left"] == 0 and changed["e2e"]["left"] == 0, changed


def test_the_bare_table_with_custom_plans_runs_beside_the_two_and_plans_each_statement(
        session_dir: Path, tmp_path: Path, database_url: str, valkey_url: str) -> None:
    """``--bare-custom-plans`` adds ``bare-table+custom-plans``, which finishes every task;
    the connections its workers open from its spec plan each statement for its parameters,
    the default's keep PostgreSQL's choice."""
    from bench.stores import Stores
    from bench.systems.bare_table import BareTable, connect

    runs = small_runs(session_dir, tmp_path / "vs_bare_custom_plans.json", "--shapes", "8x10",
                      "--bare-custom-plans")
    custom = runs["bare-table+custom-plans"]
    assert custom["drain"]["left"] == 0 and custom["e2e"]["left"] == 0, custom
    assert "bare-table" in runs
    stores = Stores(postgres_url=database_url, valkey_url=valkey_url)
    try:
        for system, mode in ((BareTable(custom_plans=True), "force_custom_plan"),
                             (BareTable(), "auto")):
            with connect(system.prepare(stores).spec) as conn:
                assert conn.execute("SHOW plan_cache_mode").fetchone() == (mode,)
    finally:
        stores.close()


def test_a_sketch_setting_without_a_sketch_is_refused() -> None:
    run = subprocess.run([sys.executable, "-m", "bench.vs_bare", "--sketch-setting",
                          "ack_group_commit=true"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 2 and "--sketch-setting needs a sketch" in run.stderr


def test_acks_of_no_claim_are_refused() -> None:
    run = subprocess.run([sys.executable, "-m", "bench.vs_bare", "--ack-claims", "0"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 2 and "--ack-claims must be 1 or more, got 0" in run.stderr


@pytest.mark.parametrize(("item", "says"), [
    ("no_such_field=1", "a field of tierq.config.Settings, got 'no_such_field=1'"),
    ("claim_window_reuse_ms", "got 'claim_window_reuse_ms'"),
    ("claim_window_reuse_ms=-1", "TIERQ_CLAIM_WINDOW_REUSE_MS must be greater than or equal"),
])
def test_a_tierq_setting_it_cannot_use_is_refused(item: str, says: str) -> None:
    run = subprocess.run([sys.executable, "-m", "bench.vs_bare", "--tierq-setting", item],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 2 and says in run.stderr, run.stderr
