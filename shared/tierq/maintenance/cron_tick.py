"""cron_tick: keep every schedule's next occurrences installed as keyed delayed tasks, and
withdraw the pending occurrences of outdated, disabled or removed schedules (the rules are
in :mod:`tierq.logic.schedules`; a schedule is (tenant, name)). One transaction per schedule;
a schedule another tick (or a PUT) is installing right now is left to that one, and two
ticks at once never install an occurrence twice.

Only the schedules due are read: each install records when the tick next has work for its
schedule (``tick_at_ms``: its next occurrence fires, its installed ones end within the
lookahead, or occurrences of another config remain), and a pass reads ``tick_at_ms <= now``
on an index, soonest due first, in slices of ``slice_size`` after a cursor, until
``max_schedules`` or its time budget. An idle schedule costs a pass nothing, read or write;
the schedules left when a pass stops are the soonest due of the next one."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from tierq.dal.store.rows import ScheduleDue
from tierq.errors import DatabaseTimedOut, Unavailable
from tierq.logic import schedules
from tierq.logic.context import Context, to_ms
from tierq.logic.pairs import Budget
from tierq.maintenance.registry import MaintenanceJob, SlicedWalkConfig
from tierq.models.names import DEFAULT_TENANT

logger = logging.getLogger(__name__)


@dataclass
class CronTickSummary:
    schedules: int = 0  # schedules (and removed ones' remnants) due, visited
    installed: int = 0  # occurrences inserted
    withdrawn: int = 0  # pending occurrences of outdated, disabled or removed schedules
    busy: int = 0  # schedules another tick or a PUT held at that moment
    failed: list[str] = field(default_factory=list)  # schedules whose install raised


class CronTickConfig(SlicedWalkConfig):
    """``TIERQ_CRON_TICK_<FIELD>``: the due schedules read at a time (``slice_size``), the
    most one pass visits (``max_schedules``), the pass's budget (checked between schedules;
    the schedules left are still due and come first in the next pass) and timeouts."""

    max_schedules: int = Field(default=2000, ge=1, le=100_000)


def run(ctx: Context, config: CronTickConfig | None = None,
        **overrides: Any) -> CronTickSummary:
    """One pass under its config's timeouts (``JOB.run``)."""
    return JOB.run(ctx, config, **overrides)


def run_pass(ctx: Context, config: CronTickConfig) -> CronTickSummary:
    summary = CronTickSummary()
    budget = Budget(config.budget_seconds)
    now_ms = to_ms(ctx.now())
    # (tick_at_ms, tenant, name) of the last entry read. A schedule visited is due again at
    # the clock's now at the soonest (schedules.next_tick_ms), which can lie after the
    # cursor: read again in this pass, it is skipped (once: its tick_at_ms stays put).
    cursor: tuple[int, str, str] = (-1, "", "")
    seen: set[tuple[str, str]] = set()
    while summary.schedules < config.max_schedules:
        limit = min(config.slice_size, config.max_schedules - summary.schedules)
        due = ctx.store.schedules_due(now_ms, cursor, limit)
        for entry in due:
            cursor = (entry.tick_at_ms, entry.tenant, entry.name)
            if (entry.tenant, entry.name) in seen:
                continue
            if summary.schedules and budget.spent:  # (at least one schedule per pass)
                return summary
            seen.add((entry.tenant, entry.name))
            _tick_one(ctx, entry, summary)
            if summary.schedules >= config.max_schedules:
                return summary
        if len(due) < limit:
            break
    return summary


def _tick_one(ctx: Context, entry: ScheduleDue, summary: CronTickSummary) -> None:
    tenant, name = entry.tenant, entry.name
    summary.schedules += 1
    try:
        result = schedules.tick_schedule(ctx, tenant, name, queue=entry.queue,
                                         enabled=entry.enabled)
    except DatabaseTimedOut as exc:
        # a row held or a slow statement (its transaction rolled back): this schedule
        # waits for the next tick, the others go on
        logger.warning("cron tick timed out for schedule %r of tenant %r: %s", name,
                       tenant, exc.detail or exc.message)
        summary.failed.append(name if tenant == DEFAULT_TENANT else f"{tenant}/{name}")
        return
    except Unavailable:
        raise  # a store is down: every schedule would fail; let the caller retry
    except Exception:
        # one broken schedule must not stop the others; it is retried next tick
        logger.exception("cron tick failed for schedule %r of tenant %r", name, tenant)
        summary.failed.append(name if tenant == DEFAULT_TENANT else f"{tenant}/{name}")
        return
    if result is None:
        summary.busy += 1
        return
    summary.installed += result.installed
    summary.withdrawn += result.withdrawn


JOB = MaintenanceJob(
    name="cron_tick", run_pass=run_pass, config=CronTickConfig, schedule_setting="cron_every",
    summary=CronTickSummary,
    description="install cron schedules' next occurrences, withdraw outdated ones")
