"""bench.pg_writes and bench.pg_layouts as smoke runs on a private server (they read their
backends in /proc): every step and variant is measured, every task is finished, the figures
end the output; and PgProcesses (bench/measure.py), which splits PostgreSQL's CPU by process
in ``bench.vs_bare --breakdown``, tells a backend of the database from the server's own
processes. Numbers are not judged here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from bench.measure import PG_ROLES, PgProcesses, child_pids, pg_process_kind, title_kind
from bench.phases import ROLE_APP_NAME
from bench.stores import with_database
from tierq.local.services import LocalServices

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_pg_writes_measures_every_step_of_both_systems(session_dir: Path,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "pg_writes.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.pg_writes", "--tasks", "1000", "--rounds", "2",
         "--state-dir", str(session_dir / "bench-pg-writes"), "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    last = dict(line.partition("=")[::2] for line in run.stdout.strip().splitlines()[-9:])
    for shape in ("4x400", "8x10", "mixed"):
        for key in ("backend_us_per_task_tierq", "backend_us_per_task_bare", "backend_ratio"):
            assert float(last[f"{key}_{shape}"]) > 0, (key, shape)
    steps = json.loads(out.read_text())["steps"]
    names = {(s["system"], s["name"]) for s in steps}
    for system, name in [("tierq", "4x400: insert"), ("tierq", "4x400: ack (400)"),
                         ("tierq", "8x10: ack (10)"), ("tierq", "mixed: ack (100)"),
                         ("tierq", "cold path: promote (500)"), ("tierq", "cold path: nack (100)"),
                         ("tierq", "cold path: retry (100)"), ("bare", "8x10: claim + ack (10)"),
                         ("bare", "8x10: claim + ack (10): claim"),
                         ("bare", "mixed: claim + ack (100): ack"), ("bare", "mixed: vacuum")]:
        assert (system, name) in names, (system, name)
    assert {s["tasks"] for s in steps} == {2000}  # two rounds of 1000
    for s in steps:
        assert s["backend_us"] > 0, s
        if s["server_us"] is not None:
            assert s["server_us"] >= s["backend_us"] * 0.9, s
        if not s["name"].endswith("vacuum"):
            assert s["statements"] > 0 and s["commits"] > 0, s

@pytest.mark.parametrize("title, kind", [
    ("postgres: walwriter", "walwriter"),
    ("postgres: 15/main: walwriter", "walwriter"),
    ("postgres: 15/main: background writer", "checkpointer+bgwriter"),
    ("postgres: checkpointer", "checkpointer+bgwriter"),
    ("postgres: main: autovacuum worker tierq", "autovacuum"),
    ("postgres: 15/main: autovacuum launcher", "other"),
    ("postgres: 15/main: logical replication launcher", "other"),
    ("postgres: postgres tierq 127.0.0.1(5432) idle", "backends"),
    ("postgres: 15/main: postgres tierq 127.0.0.1(5432) idle", "backends"),
    ("postgres: 15/main: postgres test [local] SELECT", "other backends"),
    ("postgres: my cluster: walwriter", "walwriter"),
    ("/usr/lib/postgresql/15/bin/postgres -D /data", "other"),
])
def test_a_process_title_names_its_kind_with_or_without_a_cluster_name(
        title: str, kind: str) -> None:
    """Debian's clusters set ``cluster_name``, which the server puts in every title."""
    assert title_kind(title, "tierq") == kind


def test_pg_processes_tells_the_database_backends_from_the_server(
        services: LocalServices, database_url: str) -> None:
    if not services.postgres.private:
        pytest.skip("reads the server's processes in /proc: needs a private PostgreSQL")
    postmaster = services.postgres.pid  # type: ignore[attr-defined]
    database = database_url.rsplit("/", 1)[1].split("?")[0]
    sampler = PgProcesses(postmaster, database).start()
    sampler.mark()
    with psycopg.connect(database_url, autocommit=True) as conn:
        backend = conn.info.backend_pid
        conn.execute("SELECT count(*) FROM generate_series(1, 300000)")
        time.sleep(0.1)
        assert pg_process_kind(backend, database) == "backends"
        assert pg_process_kind(backend, "another") == "other backends"
    sampler.stop()
    kinds = {pg_process_kind(pid, database) for pid in child_pids(postmaster)}
    assert "walwriter" in kinds and "checkpointer+bgwriter" in kinds
    assert sampler.started >= 1
    assert sampler.seconds_by_kind()["backends"] > 0


def test_pg_processes_splits_the_backends_by_the_role_their_connection_names(
        services: LocalServices, database_url: str) -> None:
    """A connection named as a producer's, one as a consumer's (``ROLE_APP_NAME``, which a
    phase's processes carry in PGAPPNAME) and one unnamed: each backend's CPU counts for its
    role, the unnamed one's for the rest; nothing is split without ``activity_url``."""
    if not services.postgres.private:
        pytest.skip("reads the server's processes in /proc: needs a private PostgreSQL")
    postmaster = services.postgres.pid  # type: ignore[attr-defined]
    database = database_url.rsplit("/", 1)[1].split("?")[0]
    assert PgProcesses(postmaster, database).seconds_by_role() is None
    sampler = PgProcesses(postmaster, database,
                          activity_url=with_database(database_url, "postgres")).start()
    work = {"producers": 600_000, "consumers": 200_000, "rest": 100_000}
    names = {"producers": ROLE_APP_NAME.format(kind="producer"),
             "consumers": ROLE_APP_NAME.format(kind="consumer"), "rest": ""}
    try:
        sampler.mark()
        for role, rows in work.items():
            with psycopg.connect(database_url, autocommit=True,
                                 application_name=names[role]) as conn:
                time.sleep(0.1)  # (sampled while named, before its work)
                conn.execute("SELECT count(*) FROM generate_series(1, %s)", (rows,))
                time.sleep(0.1)
    finally:
        sampler.stop()
    by_role = sampler.seconds_by_role()
    assert by_role is not None and set(by_role) == set(PG_ROLES)
    assert all(seconds > 0 for seconds in by_role.values()), by_role
    assert by_role["producers"] > by_role["consumers"], by_role
    assert sum(by_role.values()) <= sampler.seconds_by_kind()["backends"] + 1e-9


def test_pg_layouts_measures_every_variant(session_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "pg_layouts.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.pg_layouts", "--rounds", "1",
         "--state-dir", str(session_dir / "bench-pg-layouts"), "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    key, _, value = run.stdout.strip().splitlines()[-1].partition("=")
    assert key == "log_insert_vs_today" and float(value) > 0
    result = json.loads(out.read_text())
    assert all(us > 0 for us in result["per_task"].values()), result["per_task"]
    assert result["rotation"]["rows"] == 1000  # the slot's tasks, every one acked
