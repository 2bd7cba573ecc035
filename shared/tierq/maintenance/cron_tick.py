"""cron_tick: keep every schedule's next occurrences installed as keyed delayed tasks, and
withdraw the pending occurrences of outdated, disabled or removed schedules (the rules are
in :mod:`tierq.logic.schedules`; a schedule is (tenant, name)). One transaction per
``SCHEDULES_PER_TRANSACTION`` due schedules, so one commit (a wait for the WAL flush) per 50
schedules, not per schedule; their locks are taken and their rows read in two statements,
then each schedule installs in a savepoint, so what one meets costs it alone:

| what one schedule meets                           | the schedule                            |
| ------------------------------------------------- | --------------------------------------- |
| a held row, a statement past its timeout          | rolled back, listed, next tick again    |
| a broken row                                      | rolled back, listed, next tick again    |
| a Valkey master down for a pair it withdraws from | rolled back, listed, next tick again    |
| its queue's registry row held (registering)       | listed, next tick again                 |
| its pair's master down (registering)              | installed: occurrences are delayed rows |

A master found down, by a registration or a withdrawal, is not asked again for
``masters_down.WARM_DOWN_SECONDS`` (one minute): the later schedules that need it meet it
down without a call (a hung master would cost each a socket timeout).

Each savepoint that writes takes a transaction id of its own, and PostgreSQL caches 64 of
them per transaction: past that every other session's snapshot reads ``pg_subtrans``, a
slowdown every tenant would share, hence 50. A schedule another tick (or a PUT) is
installing right now is left to that one, and two ticks at once never install an occurrence
twice; a PUT of a schedule a tick holds waits for the slice's commit.

Only the schedules due are read: each install records when the tick next has work for its
schedule (``tick_at_ms``: its next occurrence fires, its installed ones end within the
lookahead, or occurrences of another config remain), and a pass reads ``tick_at_ms <= now``
on an index, soonest due first, in slices of ``slice_size`` after a cursor, until
``max_schedules`` or its time budget. An idle schedule costs a pass nothing, read or write;
the schedules left when a pass stops are the soonest due of the next one."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from pydantic import Field

from tierq.dal.store.rows import ScheduleDue
from tierq.errors import DatabaseTimedOut, Unavailable, WarmTierUnavailable
from tierq.logic import masters_down, schedules
from tierq.logic.context import Context, to_ms
from tierq.logic.pairs import Budget
from tierq.maintenance.registry import MaintenanceJob, SlicedWalkConfig
from tierq.models.names import DEFAULT_TENANT

logger = logging.getLogger(__name__)

# schedules installed in one transaction, each in a savepoint: under PostgreSQL's 64 cached
# subtransactions (PGPROC_MAX_CACHED_SUBXIDS) per transaction
SCHEDULES_PER_TRANSACTION = 50


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
        if due:
            cursor = (due[-1].tick_at_ms, due[-1].tenant, due[-1].name)
        fresh = [e for e in due if (e.tenant, e.name) not in seen]
        seen.update((e.tenant, e.name) for e in fresh)
        for start in range(0, len(fresh), SCHEDULES_PER_TRANSACTION):
            part = fresh[start:start + SCHEDULES_PER_TRANSACTION]
            if not _tick_slice(ctx, part, summary, budget):
                return summary  # the budget is spent: the schedules left come first next pass
        if len(due) < limit:
            break
    return summary


def _tick_slice(ctx: Context, entries: Sequence[ScheduleDue], summary: CronTickSummary,
                budget: Budget) -> bool:
    """Tick due schedules (at most ``SCHEDULES_PER_TRANSACTION``) in one transaction, one
    commit (a commit waits for the WAL flush), each schedule in a savepoint of its own: one
    that fails is rolled back alone and listed in ``failed``, the others are kept. The lock and read
    statements run for all of it: one past its timeout ends the pass (the next starts
    with the soonest due again). Registering a schedule's queue first (``prepare_tick``)
    that times out (its registry row held by another transaction) fails that schedule
    alone, and the slice's other schedules of the same pair without a second wait; the
    next tick tries them again. A registration whose pair's Valkey master does not answer
    installs the schedule all the same. A master that failed a registration or a
    withdrawal is not asked for ``WARM_DOWN_SECONDS`` (``masters_down``): the pairs of
    that master are registered without it, and a withdrawal from it fails at once. Returns
    False when the budget ran out first (checked between schedules, registrations included,
    at least one per pass): a timeout costs its wait, so held rows of many pairs end the
    pass at its budget, not one wait each."""
    ready: list[ScheduleDue] = []
    held: set[tuple[str | None, str]] = set()  # pairs whose registration timed out
    registered = 0  # registrations tried in this slice (each may wait on a store)
    stopped = False  # the budget ran out among the registrations
    for entry in entries:
        if (summary.schedules or registered) and budget.spent:
            stopped = True  # (the ones left are ticked next pass, first in line)
            break
        pair = (entry.queue, entry.tenant)
        if pair in held:  # (its registry row held: not waited for again in this slice)
            summary.schedules += 1
            _failed(summary, entry, "registering its queue timed out earlier in the slice")
            continue
        master = ctx.warm.master_of(entry.queue, entry.tenant) if entry.queue else None
        registered += 1
        try:
            schedules.prepare_tick(ctx, entry.queue, entry.tenant, bool(entry.enabled),
                                   set_mode=not masters_down.known_down(ctx, master))
        except WarmTierUnavailable as exc:
            # the master of its pair is down: the pair is registered in PostgreSQL, and
            # installing occurrences (delayed rows) needs no Valkey; the cold -> warm mover
            # sets its mode once the master is back
            masters_down.note_down(ctx, master)
            logger.warning("cron tick of schedule %r of tenant %r: Valkey failed for its "
                           "queue's pair (%s); installing without it", entry.name,
                           entry.tenant, exc.detail or exc.message)
        except DatabaseTimedOut as exc:
            # its queue's registry row held by another transaction, or a slow statement:
            # this schedule waits for the next tick, the others go on
            held.add(pair)
            summary.schedules += 1
            _failed(summary, entry, f"registering its queue timed out: "
                    f"{exc.detail or exc.message}")
            continue
        except Unavailable:
            raise  # a store is down: every schedule would fail; let the caller retry
        except Exception:
            summary.schedules += 1
            _failed(summary, entry, "registering its queue failed", exc_info=True)
            continue
        ready.append(entry)
    if not ready or (stopped and summary.schedules):
        return not stopped  # (else the pass's first schedule is ticked: one at least)
    if stopped:
        ready = ready[:1]  # (the one ticked: the others' locks are not taken)
    finished = not stopped
    down: Unavailable | None = None
    with ctx.db.transaction() as conn:
        locked = schedules.lock_for_tick(ctx, conn, [(e.tenant, e.name) for e in ready])
        attempts: dict[str, int] = {}  # each queue's max_attempts, read once a slice
        for entry in ready:
            if summary.schedules and budget.spent:
                finished = False
                break
            summary.schedules += 1
            key = (entry.tenant, entry.name)
            if key not in locked:
                summary.busy += 1  # another tick or a PUT holds it and does the work
                continue
            try:
                with conn.transaction():  # a savepoint: what fails here is rolled back alone
                    result = schedules.tick_locked(ctx, conn, entry.tenant, entry.name,
                                                   locked[key], attempts)
            except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable,
                    DatabaseTimedOut) as exc:
                # a row held or a slow statement: this schedule waits for the next tick
                _failed(summary, entry, f"timed out: {str(exc).strip()}")
                continue
            except WarmTierUnavailable as exc:
                # the master of a pair it withdraws from is down, or remembered down (not
                # asked): this schedule waits for a later tick (rolled back: its
                # occurrences taken out of Valkey are still warm rows, which the reconciler
                # pushes again), the others go on
                _failed(summary, entry, f"Valkey failed: {exc.detail or exc.message}")
                continue
            except Unavailable as exc:
                # a store is down: keep what is done (the commit may fail too), then raise
                down = exc
                break
            except psycopg.OperationalError:
                raise  # the connection is lost: the slice with it (the next pass retries)
            except Exception:
                # one broken schedule must not stop the others; it is retried next tick
                _failed(summary, entry, "failed", exc_info=True)
                continue
            summary.installed += result.installed
            summary.withdrawn += result.withdrawn
    if down is not None:
        raise down
    return finished


def _failed(summary: CronTickSummary, entry: ScheduleDue, why: str, *,
            exc_info: bool = False) -> None:
    logger.warning("cron tick of schedule %r of tenant %r %s", entry.name, entry.tenant, why,
                   exc_info=exc_info)
    summary.failed.append(entry.name if entry.tenant == DEFAULT_TENANT
                          else f"{entry.tenant}/{entry.name}")


JOB = MaintenanceJob(
    name="cron_tick", run_pass=run_pass, config=CronTickConfig, schedule_setting="cron_every",
    summary=CronTickSummary,
    description="install cron schedules' next occurrences, withdraw outdated ones")
