"""The cron tick: schedules with work are visited until its pass's budget is spent (at least
one per pass; those left come in the next pass); its config is validated with the bad
variable named; its pass gives up a lock wait at its own lock timeout."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from tests.maintenance.helpers import TINY_BUDGET, lock_wait_given_up
from tierq.config import Settings
from tierq.engine import Tierq
from tierq.maintenance import cron_tick
from tierq.maintenance.registry import JobConfigError

SCHEDULES = ("s1", "s2", "s3")


def schedules_with_work(tq: Tierq) -> None:
    """Three schedules firing every second, 10 s on: each has 10 occurrences to install."""
    for name in SCHEDULES:
        tq.put_schedule(name, {"queue": "q", "payload": name, "every_seconds": 1})
    tq.ctx.clock.advance(10)


def installed(pg: psycopg.Connection[Any]) -> dict[str, int]:
    """Occurrences installed so far, by schedule."""
    return dict(pg.execute("SELECT schedule, count(*) FROM tierq_schedule_occurrences"
                           " GROUP BY schedule").fetchall())


def test_a_spent_budget_ends_the_pass_and_the_next_goes_on_after_it(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    schedules_with_work(tq)
    before = installed(pg)
    visited = []
    for _ in SCHEDULES:
        assert cron_tick.run(tq.ctx, budget_seconds=TINY_BUDGET).schedules == 1
        now = installed(pg)
        visited += [name for name in SCHEDULES if now[name] > before[name]]
        before = now
    # s1 still has work after its visit (its due occurrences have not run), yet the passes
    # go on after it instead of starting with it again
    assert visited == list(SCHEDULES)


def test_a_pass_with_budget_visits_every_schedule_with_work(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    schedules_with_work(tq)
    summary = cron_tick.run(tq.ctx, budget_seconds=60)
    assert (summary.schedules, summary.failed) == (3, [])
    assert summary.installed >= 30 and min(installed(pg).values()) >= 130


def test_config_defaults_and_the_shared_budget() -> None:
    config = cron_tick.JOB.configure(Settings(maintenance_budget_seconds=0.75), environ={})
    assert (config.budget_seconds, config.statement_timeout_ms, config.lock_timeout_ms) == \
        (0.75, 10_000, 2_000)
    assert cron_tick.JOB.schedule_env == "TIERQ_CRON_EVERY"
    assert cron_tick.JOB.every(Settings(cron_every=4.0)) == 4.0


@pytest.mark.parametrize(("variable", "value"), [
    ("TIERQ_CRON_TICK_BUDGET_SECONDS", "0"),
    ("TIERQ_CRON_TICK_BUDGET_SECONDS", "soon"),
    ("TIERQ_CRON_TICK_LOCK_TIMEOUT_MS", "-5"),
])
def test_a_bad_value_is_refused_with_its_variable_named(variable: str, value: str) -> None:
    with pytest.raises(JobConfigError, match=re.escape(f"{variable}='{value}'")):
        cron_tick.JOB.configure(Settings(), environ={variable: value})


def test_a_field_it_does_not_have_is_refused() -> None:
    with pytest.raises(JobConfigError, match=r"cron_tick\.batch=5"):
        cron_tick.JOB.configure(Settings(), environ={}, batch=5)


def test_a_pass_gives_up_a_lock_wait_at_its_lock_timeout(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    schedules_with_work(tq)
    waited = lock_wait_given_up(pg, "tierq_schedules",
                                lambda: cron_tick.run(tq.ctx, lock_timeout_ms=200))
    assert 0.15 < waited < 2.0  # the pool's lock timeout is 5 s
    assert cron_tick.run(tq.ctx).installed >= 30  # the next pass does the work


def test_a_schedule_whose_tick_times_out_is_listed_failed_and_the_others_go_on(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """A lock wait over the pass's lock timeout costs that schedule alone this tick (not
    the pass, and not as 'PostgreSQL is not answering'); the next tick installs it."""
    schedules_with_work(tq)
    before = installed(pg)
    with pg.transaction():
        pg.execute("SELECT 1 FROM tierq_schedules WHERE name = 's2' FOR UPDATE")
        summary = cron_tick.run(tq.ctx, budget_seconds=60, lock_timeout_ms=200)
    assert (summary.schedules, summary.failed) == (3, ["s2"])
    after = installed(pg)
    assert after["s2"] == before["s2"]
    assert after["s1"] > before["s1"] and after["s3"] > before["s3"]
    again = cron_tick.run(tq.ctx, budget_seconds=60)
    assert again.failed == [] and installed(pg)["s2"] > before["s2"]
