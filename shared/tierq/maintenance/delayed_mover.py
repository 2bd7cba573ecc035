"""delayed_mover: delayed tasks whose run_at has come become ready (warm or cold) at the back
of their line. Bounded batches selected with FOR UPDATE SKIP LOCKED from the due index, so
the cost is proportional to what is due, not to the delayed backlog (codeQ).

A batch mixes pairs whose keys live on different Valkey masters (cluster mode), so each pair
is admitted and pushed on its own. Whichever way a pair fails, the other pairs' tasks become
ready, and the pass reports the failed pairs:

| when                                  | the pair's rows                                      |
| ------------------------------------- | ---------------------------------------------------- |
| its master does not answer before the | are left out of the batch: they stay delayed, in     |
| commit                                | place, and later batches of the pass skip the pair   |
| its push fails after the commit       | stay warm in PostgreSQL with their seq (their place  |
|                                       | in line), for the reaper's reconciler to push        |
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from tierq.dal.store.rows import ReadyRow
from tierq.errors import WarmTierUnavailable
from tierq.logic import admission, flows
from tierq.logic.admission import PushItem, Ticket
from tierq.logic.context import Context, Pair, to_datetime
from tierq.logic.pairs import Budget
from tierq.maintenance.pair_failures import PairFailures
from tierq.maintenance.registry import JobConfig, MaintenanceJob

logger = logging.getLogger(__name__)


class DelayedMoverConfig(JobConfig):
    """``TIERQ_DELAYED_MOVER_<FIELD>``: rows locked per batch (one transaction each) and
    batches per pass at most; the budget is checked between batches."""

    batch: int = Field(default=1000, ge=1, le=10_000)
    max_batches: int = Field(default=50, ge=1, le=10_000)


@dataclass
class DelayedMoverSummary:
    moved: int = 0
    warm: int = 0
    cold: int = 0
    batches: int = 0
    failed: list[str] = field(default_factory=list)  # "queue|tenant" whose Valkey failed
    waited_too_long: int = 0  # waiting tasks dead-lettered past their wait_timeout_seconds


def run(ctx: Context, config: DelayedMoverConfig | None = None,
        **overrides: Any) -> DelayedMoverSummary:
    """One pass under its config's timeouts (``JOB.run``)."""
    return JOB.run(ctx, config, **overrides)


def run_pass(ctx: Context, config: DelayedMoverConfig) -> DelayedMoverSummary:
    summary = DelayedMoverSummary()
    batch = config.batch
    budget = Budget(config.budget_seconds)
    failed: set[Pair] = set()  # left alone for the rest of this pass
    failures = PairFailures("delayed mover", ctx, summary.failed)
    summary.waited_too_long = flows.expire(ctx, limit=batch)  # (logic/flows.py)
    for _ in range(config.max_batches):
        tickets: dict[Pair, Ticket] = {}
        rows: list[ReadyRow] = []
        warm_by_pair: dict[Pair, list[PushItem]] = {}
        try:
            with ctx.db.transaction() as conn:
                due = ctx.store.lock_due_skipping(conn, to_datetime(ctx.now()), batch,
                                                  sorted(failed))
                if not due:
                    break
                for pair in dict.fromkeys((r.queue, r.tenant) for r in due):
                    if failures.skip(pair):
                        failed.add(pair)
                        continue
                    try:
                        tickets[pair] = admission.begin(ctx, [pair])
                    except WarmTierUnavailable as exc:
                        failed.add(pair)
                        failures.record(pair, exc, when="before its rows moved")
                ready = [r for r in due if (r.queue, r.tenant) in tickets]
                if ready:
                    rows = ctx.store.make_ready(
                        conn, (str(r.id) for r in ready),
                        [tickets[(r.queue, r.tenant)].state_for((r.queue, r.tenant))
                         for r in ready],
                        ["delayed"], to_datetime(ctx.now()))
                    # (their push items before the commit: admission.warm_items)
                    warm_by_pair = admission.warm_items(rows)
        except BaseException:
            for ticket in tickets.values():
                _close_quietly(ctx, ticket)
            raise
        summary.batches += 1
        summary.moved += len(rows)
        summary.cold += sum(1 for r in rows if r.state != "warm")
        for pair, ticket in tickets.items():
            items = warm_by_pair.get(pair, [])
            try:
                refused = admission.dispatch(ctx, ticket, {pair: items} if items else {})
            except WarmTierUnavailable as exc:
                # committed warm, not pushed: the reconciler pushes them after its grace
                failed.add(pair)
                failures.record(pair, exc, when="after its rows were made ready")
                summary.warm += len(items)
                continue
            summary.warm += len(items) - len(refused)
            summary.cold += len(refused)
        if len(due) < batch or budget.spent:  # (what is left waits for the next pass)
            break
    return summary


JOB = MaintenanceJob(
    name="delayed_mover", run_pass=run_pass, config=DelayedMoverConfig,
    schedule_setting="delayed_every", summary=DelayedMoverSummary,
    description="make due delayed tasks ready, in batches locked with SKIP LOCKED")


def _close_quietly(ctx: Context, ticket: Ticket) -> None:
    """End a ticket's admissions after a failed transaction; a master that does not answer
    lets its registration go stale on its own (admission_stale_seconds)."""
    try:
        admission.close(ctx, ticket)
    except WarmTierUnavailable as exc:
        logger.warning("delayed mover: could not end an admission: %s",
                       exc.detail or exc.message)
