"""delayed_mover: delayed tasks whose run_at has come become ready (warm or cold) at the back
of their line. Bounded batches selected with FOR UPDATE SKIP LOCKED from the due index, so
the cost is proportional to what is due, not to the delayed backlog (codeQ). A batch is
bounded by the bytes it reads back (``batch_bytes``) as well as by rows, so big payloads due
at once never take a pass past its function's memory.

A batch mixes pairs whose keys live on different Valkey masters (cluster mode), so each pair
is admitted and pushed on its own. Whichever way a pair fails, the other pairs' tasks become
ready, and the pass reports the failed pairs:

| when                                  | the pair's rows                                      |
| ------------------------------------- | ---------------------------------------------------- |
| its master does not answer before the | are left out of the batch: they stay delayed, in     |
| commit                                | place, and later batches of the pass skip the pair   |
| its push fails after the commit       | stay warm in PostgreSQL with their seq (their place  |
|                                       | in line), for the reaper's reconciler to push        |

A script of the pair's that Valkey answers with an error (its keys in a state no script
expects) fails that pair the same way, without passing over the other pairs of its master;
so does a queue whose stored settings the settings model refuses (checked before the rows
move: they stay delayed, listed and logged until an operator fixes the row).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
import redis
from pydantic import Field, ValidationError

from tierq.dal.store.base import Conn
from tierq.dal.store.rows import DueRow, ReadyRow
from tierq.errors import Unavailable, WarmTierUnavailable
from tierq.logic import admission, flows
from tierq.logic.admission import PushItem, Ticket
from tierq.logic.context import Context, Pair, to_datetime
from tierq.logic.pairs import Budget
from tierq.maintenance.pair_failures import PairFailures
from tierq.maintenance.registry import JobConfig, MaintenanceJob

logger = logging.getLogger(__name__)


class DelayedMoverConfig(JobConfig):
    """``TIERQ_DELAYED_MOVER_<FIELD>``: rows locked per batch (one transaction each), the
    bytes of payload a batch reads back at most, and batches per pass at most; the budget
    is checked between batches."""

    batch: int = Field(default=1000, ge=1, le=10_000)
    # a batch's rows are read back whole (payloads, parents) and held until their push: at
    # 1000 payloads of 256 KiB one batch took about 500 MB, past a 512 MB function's memory,
    # and the same oldest rows came first again in every pass
    batch_bytes: int = Field(default=32 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024)
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
    batch = limit = config.batch
    budget = Budget(config.budget_seconds)
    failed: set[Pair] = set()  # left alone for the rest of this pass
    failures = PairFailures("delayed mover", ctx, summary.failed)
    try:  # one tenant's waits that fail to expire never hold back everyone's delayed tasks
        summary.waited_too_long = flows.expire(ctx, limit=batch)  # (logic/flows.py)
    except (Unavailable, psycopg.Error):
        logger.exception("expiring waits past their wait_timeout_seconds failed; moving on")
    for _ in range(config.max_batches):
        tickets: dict[Pair, Ticket] = {}
        rows: list[ReadyRow] = []
        warm_by_pair: dict[Pair, list[PushItem]] = {}
        try:
            with ctx.db.transaction() as conn:
                due = ctx.store.lock_due_skipping(conn, to_datetime(ctx.now()), limit,
                                                  sorted(failed))
                if not due:
                    break
                # the rows past batch_bytes stay delayed, in place (unlocked at the commit)
                kept = within_bytes(due, config.batch_bytes)
                # (each queue's settings once a batch, on this transaction's connection: its
                # push reads them, and a refused row must fail its own pairs alone)
                refusals: dict[str, ValidationError | None] = {}
                for pair in dict.fromkeys((r.queue, r.tenant) for r in kept):
                    if failures.skip(pair):
                        failed.add(pair)
                        continue
                    if pair[0] not in refusals:
                        refusals[pair[0]] = _settings_refused(ctx, conn, pair[0])
                    refusal = refusals[pair[0]]
                    if refusal is not None:
                        failed.add(pair)
                        failures.refused_settings(pair, refusal)
                        continue
                    try:
                        tickets[pair] = admission.begin(ctx, [pair])
                    except WarmTierUnavailable as exc:
                        failed.add(pair)
                        failures.record(pair, exc, when="before its rows moved")
                    except redis.ResponseError as exc:  # its keys: not every batch's end
                        failed.add(pair)
                        failures.broken(pair, exc)
                ready = [r for r in kept if (r.queue, r.tenant) in tickets]
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
            except (WarmTierUnavailable, redis.ResponseError, ValidationError) as exc:
                # committed warm, not pushed: the reconciler pushes them after its grace
                failed.add(pair)
                if isinstance(exc, WarmTierUnavailable):
                    failures.record(pair, exc, when="after its rows were made ready")
                elif isinstance(exc, ValidationError):  # (settings written since the check)
                    failures.refused_settings(pair, exc)
                else:
                    failures.broken(pair, exc)
                summary.warm += len(items)
                continue
            summary.warm += len(items) - len(refused)
            summary.cold += len(refused)
        if (len(due) < limit and len(kept) == len(due)) or budget.spent:
            break  # none left due, or out of time (what is left waits for the next pass)
        # big payloads: lock about what the bytes allow (twice the rows kept), so a batch
        # does not read the sizes of many rows it leaves; back to ``batch`` as they shrink
        limit = min(batch, 2 * len(kept) if len(kept) < len(due) else 2 * limit)
    return summary


def _settings_refused(ctx: Context, conn: Conn, queue: str) -> ValidationError | None:
    """Why the settings model refuses the queue's stored settings, None when it takes
    them (read on ``conn`` on a cache miss)."""
    try:
        ctx.queue_settings.get(queue, conn=conn)
    except ValidationError as exc:
        return exc
    return None


def within_bytes(due: Sequence[DueRow], most: int) -> Sequence[DueRow]:
    """The first rows of ``due`` whose sizes add up to at most ``most`` bytes (at least
    one row, whatever its size)."""
    total = 0
    for i, row in enumerate(due):
        total += row.size
        if total > most and i > 0:
            return due[:i]
    return due


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
