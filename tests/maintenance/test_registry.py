"""The registry of maintenance jobs: each job declared once and found there, its config read
from settings, environment and overrides with bad values named, and every pass run under
its own statement and lock timeouts (on the real PostgreSQL)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tierq.config import Settings, SettingsError
from tierq.dal.postgres import execute_text, scoped_timeouts
from tierq.engine import Tierq
from tierq.errors import DatabaseTimedOut
from tierq.logic.context import Context
from tierq.maintenance import registry
from tierq.maintenance.registry import JobConfig, JobConfigError, MaintenanceJob

REPO = Path(__file__).resolve().parents[2]


def timeouts_seen(tq: Tierq) -> dict[str, str]:
    """The timeouts a statement and a transaction of this thread run with."""
    with tq.db.connection() as conn:
        statement = execute_text(conn, "SELECT current_setting('statement_timeout') AS s,"
                                       " current_setting('lock_timeout') AS l").fetchone()
    with tq.db.transaction() as conn:
        in_transaction = execute_text(conn, "SELECT current_setting('statement_timeout') AS s,"
                                            " current_setting('lock_timeout') AS l").fetchone()
    assert statement is not None and in_transaction is not None
    return {"statement": f"{statement['s']}/{statement['l']}",
            "transaction": f"{in_transaction['s']}/{in_transaction['l']}"}


def probe(run_pass: Any) -> MaintenanceJob[JobConfig, Any]:
    return MaintenanceJob(name="probe", run_pass=run_pass, config=JobConfig,
                          schedule_setting="reaper_every", summary=dict, description="a probe")


def test_the_registry_holds_one_job_per_scheduled_function() -> None:
    jobs = registry.jobs()
    assert sorted(jobs) == ["cold_to_warm", "cron_tick", "delayed_mover", "dispatcher",
                            "reaper"]
    for name, job in jobs.items():
        assert job.name == name and issubclass(job.config, JobConfig)
        assert (REPO / "functions" / name / "app.py").is_file()
        assert job.schedule_env.startswith("TIERQ_") and job.schedule_env.endswith("_EVERY")
    with pytest.raises(KeyError, match=r"unknown maintenance job 'nope'.*cold_to_warm"):
        registry.job("nope")


def test_a_job_names_a_setting_that_exists() -> None:
    with pytest.raises(ValueError, match="no setting 'nope_every'"):
        MaintenanceJob(name="x", run_pass=lambda ctx, config: None, config=JobConfig,
                       schedule_setting="nope_every", summary=dict, description="")


def test_config_comes_from_settings_then_environment_then_overrides() -> None:
    job = registry.job("reaper")
    settings = Settings(maintenance_budget_seconds=1.5, maintenance_slice=50)
    base = job.configure(settings, environ={})
    assert (base.budget_seconds, base.slice_size, base.expired_batch) == (1.5, 50, 500)
    env = {"TIERQ_REAPER_BUDGET_SECONDS": "0.5", "TIERQ_REAPER_EXPIRED_BATCH": " 20 "}
    from_env = job.configure(settings, environ=env)
    assert (from_env.budget_seconds, from_env.slice_size, from_env.expired_batch) == (0.5, 50, 20)
    overridden = job.configure(settings, environ=env, expired_batch=7)
    assert overridden.expired_batch == 7
    assert job.every(Settings(reaper_every=3.0)) == 3.0


def test_the_shared_budget_has_the_jobs_bound_and_is_refused_at_startup_beyond_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a value Settings took would fail every pass later, in configure
    monkeypatch.setenv("TIERQ_MAINTENANCE_BUDGET_SECONDS", "601")
    with pytest.raises(SettingsError, match="TIERQ_MAINTENANCE_BUDGET_SECONDS"):
        Settings()
    monkeypatch.setenv("TIERQ_MAINTENANCE_BUDGET_SECONDS", "600")
    settings = Settings()
    for job in registry.jobs().values():
        assert job.configure(settings, environ={}).budget_seconds == 600


@pytest.mark.parametrize(("environ", "named"), [
    ({"TIERQ_REAPER_EXPIRED_BATCH": "0"}, "TIERQ_REAPER_EXPIRED_BATCH='0'"),
    ({"TIERQ_REAPER_PURGE_BATCH": "many"}, "TIERQ_REAPER_PURGE_BATCH='many'"),
    ({"TIERQ_REAPER_LOCK_TIMEOUT_MS": "20000"},
     "lock_timeout_ms (20000) must not exceed statement_timeout_ms (10000)"),
])
def test_a_bad_value_is_refused_with_its_variable_named(environ: dict[str, str],
                                                        named: str) -> None:
    with pytest.raises(JobConfigError) as refused:
        registry.job("reaper").configure(Settings(), environ=environ)
    assert named in str(refused.value) and "maintenance job 'reaper'" in str(refused.value)


def test_a_bad_shared_setting_or_override_is_named_too() -> None:
    with pytest.raises(JobConfigError, match=r"reaper\.forget_slice=-1"):
        registry.job("reaper").configure(Settings(), environ={}, forget_slice=-1)
    with pytest.raises(JobConfigError, match="unknown_field"):
        registry.job("reaper").configure(Settings(), environ={}, unknown_field=1)


def test_a_pass_runs_under_its_timeouts_and_only_it(tq: Tierq) -> None:
    pool = timeouts_seen(tq)
    assert pool == {"statement": "15s/5s", "transaction": "15s/5s"}
    seen: list[dict[str, str]] = []
    job = probe(lambda ctx, config: seen.append(timeouts_seen(tq)))
    job.run(tq.ctx, job.configure(tq.settings, statement_timeout_ms=3000, lock_timeout_ms=250))
    assert seen == [{"statement": "3s/250ms", "transaction": "3s/250ms"}]
    assert timeouts_seen(tq) == pool  # after the pass: the pool's again

    # another thread's statements keep the pool's while a pass runs
    during: list[dict[str, str]] = []

    def other_thread(ctx: Context, config: JobConfig) -> None:
        worker = threading.Thread(target=lambda: during.append(timeouts_seen(tq)))
        worker.start()
        worker.join()

    probe(other_thread).run(tq.ctx, statement_timeout_ms=3000, lock_timeout_ms=250)
    assert during == [pool]


def test_a_lock_wait_in_a_pass_gives_up_at_the_jobs_lock_timeout(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    def wait_for_the_lock(ctx: Context, config: JobConfig) -> None:
        with ctx.db.transaction() as conn:
            execute_text(conn, "LOCK TABLE tierq_queues IN SHARE MODE")

    with pg.transaction():
        pg.execute("LOCK TABLE tierq_queues IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(DatabaseTimedOut, match="did not finish in time"):
            probe(wait_for_the_lock).run(tq.ctx, lock_timeout_ms=200)
        waited = time.monotonic() - started
    assert 0.15 < waited < 2.0  # the pool's lock timeout is 5 s


def test_a_slow_statement_in_a_pass_is_cancelled_at_the_jobs_statement_timeout(
        tq: Tierq) -> None:
    def sleep(ctx: Context, config: JobConfig) -> None:
        with ctx.db.connection() as conn:
            execute_text(conn, "SELECT pg_sleep(3)")

    started = time.monotonic()
    with pytest.raises(DatabaseTimedOut) as raised:
        probe(sleep).run(tq.ctx, statement_timeout_ms=300, lock_timeout_ms=100)
    assert "statement timeout" in (raised.value.detail or "")
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize(("pool", "job", "seen"), [
    # the operator's limits are tighter than the job's defaults (10 s / 2 s): they stay
    ((3000, 500), {}, "3s/500ms"),
    # each timeout the shorter of the two
    ((3000, 500), {"lock_timeout_ms": 250}, "3s/250ms"),
    ((15_000, 5000), {}, "10s/2s"),
    # 0 is no limit: the pool's without one takes the job's, a job without one the pool's
    ((0, 0), {}, "10s/2s"),
    ((0, 500), {}, "10s/500ms"),
    ((3000, 500), {"statement_timeout_ms": 0, "lock_timeout_ms": 0}, "3s/500ms"),
    ((0, 0), {"statement_timeout_ms": 0, "lock_timeout_ms": 0}, "0/0"),
])
def test_a_pass_can_only_shorten_the_pools_timeouts(
        make_tq: Any, pool: tuple[int, int], job: dict[str, int], seen: str) -> None:
    tq: Tierq = make_tq(statement_timeout_ms=pool[0], lock_timeout_ms=pool[1])
    seen_in_pass: list[dict[str, str]] = []
    probe(lambda ctx, config: seen_in_pass.append(timeouts_seen(tq))).run(tq.ctx, **job)
    assert seen_in_pass == [{"statement": seen, "transaction": seen}]


def test_a_scope_inside_a_scope_can_only_shorten_it(tq: Tierq) -> None:
    with scoped_timeouts(3000, 400):
        with scoped_timeouts(8000, 200):
            assert timeouts_seen(tq)["statement"] == "3s/200ms"
        with scoped_timeouts(0, 0):
            assert timeouts_seen(tq)["transaction"] == "3s/400ms"
        assert timeouts_seen(tq)["statement"] == "3s/400ms"
    assert timeouts_seen(tq)["statement"] == "15s/5s"


def test_a_job_without_a_statement_timeout_may_have_a_lock_timeout() -> None:
    config = registry.job("reaper").configure(Settings(), environ={
        "TIERQ_REAPER_STATEMENT_TIMEOUT_MS": "0", "TIERQ_REAPER_LOCK_TIMEOUT_MS": "3000"})
    assert (config.statement_timeout_ms, config.lock_timeout_ms) == (0, 3000)


def test_scoped_timeouts_refuse_what_is_not_a_plain_setting() -> None:
    with pytest.raises(ValueError, match="not a plain setting"), scoped_timeouts(-1, 5):
        pass


def test_the_engine_reads_a_jobs_config_once_and_names_a_bad_value(
        make_tq: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_DELAYED_MOVER_BATCH", "0")
    tq = make_tq()
    with pytest.raises(JobConfigError, match="TIERQ_DELAYED_MOVER_BATCH='0'"):
        tq.run_delayed_mover()
    monkeypatch.setenv("TIERQ_DELAYED_MOVER_BATCH", "7")
    assert tq.job_config("delayed_mover").model_dump()["batch"] == 7
    monkeypatch.setenv("TIERQ_DELAYED_MOVER_BATCH", "8")  # read once per engine
    assert tq.job_config("delayed_mover").model_dump()["batch"] == 7
    assert tq.run_job("delayed_mover").summary().moved == 0
