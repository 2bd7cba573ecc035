"""cron_tick: keep every schedule's next occurrences installed as keyed delayed tasks, and
withdraw the pending occurrences of outdated, disabled or removed schedules (the rules are
in :mod:`tierq.logic.schedules`; a schedule is (tenant, name)). One transaction per schedule;
a schedule another tick (or a PUT) is installing right now is left to that one, and two
ticks at once never install an occurrence twice. Only schedules with work to do are visited
(an occurrence became due, the installed ones end within the lookahead, or occurrences of
another config remain), so an idle schedule costs no write per tick."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from tierq.dal.postgres import Database
from tierq.errors import DatabaseTimedOut, Unavailable
from tierq.logic import schedules
from tierq.logic.context import Context, to_ms
from tierq.logic.pairs import Budget
from tierq.maintenance.registry import JobConfig, MaintenanceJob
from tierq.models.names import DEFAULT_TENANT

logger = logging.getLogger(__name__)

# Where the last pass that ran out of budget stopped, per database (in this process): the
# next pass starts after it and wraps round, so that schedules late in (tenant, name) order
# are not starved by earlier ones that keep having work (an occurrence due but not run yet).
_resume_after: WeakKeyDictionary[Database, tuple[str, str]] = WeakKeyDictionary()


@dataclass
class CronTickSummary:
    schedules: int = 0  # schedules with work to do (see the schedules_to_tick query)
    installed: int = 0  # occurrences inserted
    withdrawn: int = 0  # pending occurrences of outdated, disabled or removed schedules
    busy: int = 0  # schedules another tick or a PUT held at that moment
    failed: list[str] = field(default_factory=list)  # schedules whose install raised


class CronTickConfig(JobConfig):
    """``TIERQ_CRON_TICK_<FIELD>``: the pass's budget (checked between schedules; the
    schedules left have work still and come first in the next pass) and timeouts."""


def run(ctx: Context, config: CronTickConfig | None = None,
        **overrides: Any) -> CronTickSummary:
    """One pass under its config's timeouts (``JOB.run``)."""
    return JOB.run(ctx, config, **overrides)


def run_pass(ctx: Context, config: CronTickConfig) -> CronTickSummary:
    summary = CronTickSummary()
    budget = Budget(config.budget_seconds)
    due = list(ctx.store.schedules_to_tick(to_ms(ctx.now()), schedules.lookahead_ms(ctx)))
    after = _resume_after.pop(ctx.db, None)
    if after is not None:
        due = [s for s in due if s > after] + [s for s in due if s <= after]
    for i, (tenant, name) in enumerate(due):
        if i and budget.spent:  # (at least one schedule per pass)
            _resume_after[ctx.db] = due[i - 1]
            break
        summary.schedules += 1
        try:
            result = schedules.tick_schedule(ctx, tenant, name)
        except DatabaseTimedOut as exc:
            # a row held or a slow statement (its transaction rolled back): this schedule
            # waits for the next tick, the others go on
            logger.warning("cron tick timed out for schedule %r of tenant %r: %s", name,
                           tenant, exc.detail or exc.message)
            summary.failed.append(name if tenant == DEFAULT_TENANT else f"{tenant}/{name}")
            continue
        except Unavailable:
            raise  # a store is down: every schedule would fail; let the caller retry
        except Exception:
            # one broken schedule must not stop the others; it is retried next tick
            logger.exception("cron tick failed for schedule %r of tenant %r", name, tenant)
            summary.failed.append(name if tenant == DEFAULT_TENANT else f"{tenant}/{name}")
            continue
        if result is None:
            summary.busy += 1
            continue
        summary.installed += result.installed
        summary.withdrawn += result.withdrawn
    return summary


JOB = MaintenanceJob(
    name="cron_tick", run_pass=run_pass, config=CronTickConfig, schedule_setting="cron_every",
    summary=CronTickSummary,
    description="install cron schedules' next occurrences, withdraw outdated ones")
