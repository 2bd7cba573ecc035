"""delayed_mover: delayed tasks whose run_at has come become ready (warm or cold) at the back
of their line, in batches shared fairly among the (queue, tenant) pairs with rows due.

A pass first looks for the pairs with a row due (``pairs_come_due``: the due range of
tierq_tasks_delayed_due, read whole once a pass; each later batch reads only the rows come
due since the one before). Each batch then takes from each of those pairs its share, from
the front of the pair's line, oldest due first (``lock_due_of_pairs``: one descent of
tierq_tasks_delayed_line per pair, ``FOR UPDATE SKIP LOCKED``). One pair's due backlog so
never holds back another pair's due rows, and the cost is what is due (rows and pairs),
never the delayed backlog not due yet:

| pairs with rows due, n      | each pair's share of a batch of ``batch`` rows           |
| --------------------------- | -------------------------------------------------------- |
| n <= ``pairs`` (100)        | an equal share; what a pair has not got (it has fewer    |
|                             | rows due) is shared again among the others, so one pair  |
|                             | alone fills a batch                                      |
| n > ``pairs``               | the next ``pairs`` pairs in turn share it so; the room   |
|                             | they leave goes to the next ones in turn (one row each   |
|                             | past ``batch`` pairs), then to those that have more      |

The pairs take turns in (queue, tenant) order, kept across passes (cursor ``delayed_mover``):
a batch starts after the last pair in turn the batch before took rows of, or, when that one
reached every pair, after the pair whose row came last in it. So no pair waits behind pairs
served again, the rows left over when a batch does not divide evenly go round, and so do
the first places of a batch cut short by its bytes.
A batch lists its rows one of each pair, then a second of each, and so on. It is bounded by
the bytes it reads back (``batch_bytes``) as well as by rows, so big payloads due at once
never take a pass past its function's memory: it keeps the rows of that list that fit, the
first ones.

A batch mixes pairs whose keys live on different Valkey masters (cluster mode), so each pair
is admitted and pushed on its own. Whichever way a pair fails, the other pairs' tasks become
ready, and the pass reports the failed pairs:

| when                                  | the pair's rows                                       |
| ------------------------------------- | ----------------------------------------------------- |
| its master does not answer before the | are left out of the batch: they stay delayed, in      |
| commit                                | place, and later batches of the pass do not read them |
| its push fails after the commit       | stay warm in PostgreSQL with their seq (their place   |
|                                       | in line), for the reaper's reconciler to push         |

A script of the pair's that Valkey answers with an error (its keys in a state no script
expects) fails that pair the same way, without passing over the other pairs of its master;
so does a queue whose stored settings the settings model refuses (checked before the rows
move: they stay delayed, listed and logged until an operator fixes the row).
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import zip_longest
from typing import Any

import psycopg
import redis
from pydantic import Field, ValidationError

from tierq.dal.store.base import Conn
from tierq.dal.store.rows import DueRow, ReadyRow
from tierq.dal.store.tasks import NEVER
from tierq.errors import Unavailable, WarmTierUnavailable
from tierq.logic import admission, flows
from tierq.logic.admission import PushItem, Ticket
from tierq.logic.context import Context, Pair, to_datetime
from tierq.logic.pairs import START, Budget, load_cursors, save_cursor
from tierq.maintenance.pair_failures import PairFailures
from tierq.maintenance.registry import JobConfig, MaintenanceJob

logger = logging.getLogger(__name__)

WALK = "delayed_mover"  # its cursor: the pair whose row came last in the last batch


class DelayedMoverConfig(JobConfig):
    """``TIERQ_DELAYED_MOVER_<FIELD>``: rows locked per batch (one transaction each), the
    bytes of payload a batch reads back at most, batches per pass at most, and the pairs a
    batch shares its rows among at once; the budget is checked between batches."""

    batch: int = Field(default=1000, ge=1, le=10_000)
    # a batch's rows are read back whole (payloads, parents) and held until their push: at
    # 1000 payloads of 256 KiB one batch took about 500 MB, past a 512 MB function's memory,
    # and the same oldest rows came first again in every pass
    batch_bytes: int = Field(default=32 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024)
    max_batches: int = Field(default=50, ge=1, le=10_000)
    # each pair a batch takes rows of costs it a Valkey round trip (its push): a batch of
    # 1000 rows over 1000 pairs took about 1 s where one pair's 1000 took 50 ms, so a batch
    # shares its rows among this many pairs at once, and asks the next ones in turn only
    # for the room they leave
    pairs: int = Field(default=100, ge=1, le=10_000)


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

    def usable(pair: Pair) -> bool:  # (a pair of a master that failed in this pass: not)
        if pair in failed:
            return False
        if failures.skip(pair):
            failed.add(pair)
            return False
        return True

    due = DuePairs()
    begin: Pair | None = None
    cursor = START
    for _ in range(config.max_batches):
        tickets: dict[Pair, Ticket] = {}
        rows: list[ReadyRow] = []
        warm_by_pair: dict[Pair, list[PushItem]] = {}
        try:
            with ctx.db.transaction() as conn:
                now = to_datetime(ctx.now())
                due.look(ctx, conn, now, failed)
                if not due.pairs:
                    break
                if begin is None:  # (read once something is due, on this connection)
                    begin = cursor = load_cursors(ctx.store, conn).get(WALK, START)
                got = take(ctx, conn, filter(usable, due.after(cursor)), limit,
                           config.pairs, now)
                taken = got.rows
                if not taken:
                    due.drop(got.drained | failed)
                    break
                # the rows past batch_bytes stay delayed, in place (unlocked at the commit)
                kept = within_bytes(taken, config.batch_bytes)
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
                        ["delayed"], now)
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
        cursor = got.cursor(kept)
        # a pair that had fewer rows due than asked has none left, unless some were cut
        due.drop((got.drained - {(r.queue, r.tenant) for r in taken[len(kept):]}) | failed)
        if not due.pairs or budget.spent:
            break  # none left due, or out of time (what is left waits for the next pass)
        # big payloads: lock about what the bytes allow (twice the rows kept), so a batch
        # does not read the sizes of many rows it leaves; back to ``batch`` as they shrink
        limit = min(batch, 2 * len(kept) if len(kept) < len(taken) else 2 * limit)
    if begin is not None and cursor != begin:
        save_cursor(ctx.store, WALK, cursor)
    return summary


class DuePairs:
    """The pairs with rows due as far as a pass knows, in (queue, tenant) order: every row
    due is looked at once, by the pass's first batch, then only the rows come due since
    the batch before (a pair that gets rows due again after it ran out is found then)."""

    def __init__(self) -> None:
        self.pairs: list[Pair] = []
        self.known: set[Pair] = set()
        self.until: datetime = NEVER  # rows due up to here have been looked at

    def look(self, ctx: Context, conn: Conn, now: datetime, failed: set[Pair]) -> None:
        """Add the pairs with rows come due since the last look (``failed`` left out)."""
        come = ctx.store.pairs_come_due(conn, self.until, now)
        self.until = now
        new = [p for p in come if p not in self.known and p not in failed]
        if new:
            self.known.update(new)
            self.pairs = sorted(self.pairs + sorted(new))  # (two sorted runs: merged)

    def drop(self, gone: set[Pair]) -> None:
        if gone & self.known:
            self.known -= gone
            self.pairs = [p for p in self.pairs if p not in gone]

    def after(self, cursor: Pair) -> Iterator[Pair]:
        """The pairs in turn: those after ``cursor``, then round to the start."""
        i = bisect_right(self.pairs, cursor)
        yield from self.pairs[i:]
        yield from self.pairs[:i]


@dataclass
class Taken:
    """A batch's rows (one of each pair in turn, then a second of each, and so on) and what
    ``take`` learned of its pairs."""

    rows: list[DueRow]
    drained: set[Pair]  # asked for more rows than they had due (or than were not locked)
    position: dict[Pair, int]  # each pair asked, by its place in turn
    reached_all: bool  # every pair in turn was asked

    def cursor(self, kept: Sequence[DueRow]) -> Pair:
        """Where the next batch starts, given the rows kept of ``rows`` (at least one):
        after the last pair in turn that has a row kept, or, when every pair was asked,
        after the pair of the last row kept (so the odd rows go round)."""
        if self.reached_all:
            return (kept[-1].queue, kept[-1].tenant)
        return max(((r.queue, r.tenant) for r in kept), key=self.position.__getitem__)


def take(ctx: Context, conn: Conn, turns: Iterable[Pair], limit: int, at_once: int,
         now: datetime) -> Taken:
    """Lock up to ``limit`` due rows of the pairs of ``turns`` (in turn order), shared
    among them (the table of the module's docstring).

    Each round asks the next pairs in turn, up to ``at_once`` and no more than there is
    room for, an equal share of the room each. Once every pair was asked, the room left
    goes to those that got all they were asked for (``shares``), each read on after the
    last row taken of it."""
    taken: dict[Pair, list[DueRow]] = {}
    position: dict[Pair, int] = {}  # (the order the pairs were first asked in: turn order)
    drained: set[Pair] = set()
    fresh = iter(turns)
    pending = next(fresh, None)  # the next pair in turn not asked yet
    more: list[Pair] = []  # asked, and got all they were asked for: may have more rows due
    room = limit
    while room > 0:
        asked: list[Pair] = []
        while pending is not None and len(asked) < min(room, at_once):
            asked.append(pending)
            pending = next(fresh, None)
        for pair in asked:
            taken[pair], position[pair] = [], len(position)
        if pending is None:  # every pair was asked: those with more rows take the rest
            asked = sorted(more, key=position.__getitem__) + asked
            more = []
        if not asked:
            break
        wanted = shares([len(taken[p]) for p in asked], room)
        more.extend(p for p, n in zip(asked, wanted, strict=True) if n == 0)
        asking = [(p, n, taken[p][-1] if taken[p] else None)
                  for p, n in zip(asked, wanted, strict=True) if n > 0]
        got = ctx.store.lock_due_of_pairs(conn, now, asking)
        for row in got:
            taken[(row.queue, row.tenant)].append(row)
        counted = Counter((r.queue, r.tenant) for r in got)
        for pair, n, _ in asking:
            if counted[pair] < n:
                drained.add(pair)
            else:
                more.append(pair)
        room -= len(got)
    in_turn = [r for level in zip_longest(*taken.values()) for r in level if r is not None]
    return Taken(in_turn, drained, position, reached_all=pending is None)


def shares(have: Sequence[int], room: int) -> list[int]:
    """How many more rows each pair is asked for, given how many it has (``have``, the
    pairs in turn order): the room shared so that the pairs with the fewest come out level,
    the first in turn one more where it does not divide."""
    n = len(have)
    order = sorted(range(n), key=have.__getitem__)  # (stable: turn order among equals)
    k, level, left = 0, have[order[0]], room
    while True:
        while k < n and have[order[k]] <= level:
            k += 1
        if k == n or (have[order[k]] - level) * k > left:
            break
        left -= (have[order[k]] - level) * k
        level = have[order[k]]
    up, extra = divmod(left, k)
    lifted = sorted(order[:k])
    wanted = [0] * n
    for rank, i in enumerate(lifted):
        wanted[i] = level + up + (1 if rank < extra else 0) - have[i]
    return wanted


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
