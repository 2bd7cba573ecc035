"""Per-queue gauges for the alarms and the dashboard (``Warm``, ``Cold``, ``Delayed``,
``Leased``, ``Dead``, ``OldestReadyAgeSeconds``), following work, not the pairs ever seen.

A round of gauges walks only the (queue, tenant) pairs that have rows in a counted state
(``walk_gauge_pairs``: skip scans over the partial indexes), counts them slice by slice and
emits each queue's sums once all its pairs are counted. A queue with none of those rows is
not gauged, with one exception: a queue gauged in the previous round that has nothing now
gets its zeros once, so that alarms on its oldest ready age or dead letters see it clear and
the dashboard shows it empty; after that it is silent like any idle queue.

A round may take several passes: each pass stops once its time budget is spent, and the
next goes on after the last pair counted (a queue whose pairs span two passes is summed
across them). What a process remembers between passes is a :class:`GaugeRound`; a new
process starts with an empty one (it knows no previous round, so it has no zeros to send).

A queue is emitted under its own name only when an admin configured it (at most 500:
tierq.logic.metric_queues); every other queue's counts are summed over the round and
emitted once at its end as ``~other`` (the oldest ready age: their maximum), which then
empties and gets its zeros like any queue.

Each round also reports, once, how much of ``tierq_task_seq`` is used (``TaskSeqUsedPercent``:
its last value as a percentage of its maximum): the one limit on places in line
(core/ordering.py), which the template's alarm watches.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tierq.logic import pairs
from tierq.logic.context import Context
from tierq.logic.metric_queues import OTHER
from tierq.logic.queues import pair_counts
from tierq.models import TenantCounts

GAUGES = ("warm", "waiting", "held", "cold", "delayed", "leased", "dead")
OLDEST = "oldest_ready_age_seconds"

QueueValues = dict[str, float]
Emit = Callable[[str, Mapping[str, float]], None]
# where a round sends the percentage of tierq_task_seq used
EmitSeqUsed = Callable[[float], None]


def zeros() -> QueueValues:
    """The gauges of a queue with nothing in it."""
    return dict.fromkeys((*GAUGES, OLDEST), 0.0)


@dataclass
class GaugeRound:
    """What one process remembers between passes: where the round under way stopped, the
    sums of the queue it stopped inside, the queues gauged so far in this round and in the
    previous complete round, and when the last complete round began."""

    cursor: pairs.Pair = pairs.START
    under_way: bool = False
    began_at: float | None = None
    last_began_at: float | None = None
    partial: dict[str, QueueValues] = field(default_factory=dict)
    # the round's sums of the queues without series of their own (emitted as ~other)
    other: QueueValues | None = None
    gauged_now: set[str] = field(default_factory=set)
    gauged_before: set[str] = field(default_factory=set)
    # held by the pass under way: overlapping invocations in one process (the local stack
    # runs them in threads) leave the round to the first
    busy: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def due(self, now: float, every: float) -> bool:
        """A round under way goes on at every pass; a new one starts ``every`` seconds after
        the last one began."""
        return self.under_way or self.last_began_at is None or now - self.last_began_at >= every


@dataclass
class GaugeSummary:
    gauged: int = 0  # queues with rows whose gauges were emitted by this pass
    zeroed: int = 0  # queues that emptied since the previous round: zeros, once
    pairs: int = 0  # pairs with rows counted
    slices: int = 0  # slices of the walk read
    completed: bool = False  # the round got through every pair with rows


def run(ctx: Context, state: GaugeRound, emit: Emit, *, now: float,
        budget_seconds: float | None = None, slice_size: int | None = None,
        emit_seq_used: EmitSeqUsed | None = None) -> GaugeSummary:
    """One pass of the gauge round in ``state`` (a new round if none is under way): count
    the pairs with rows after the round's cursor, slice by slice, and ``emit`` each queue
    whose pairs are all counted, until the walk ends or the budget is spent (at least one
    slice is read). A new round first sends ``emit_seq_used`` the percentage of
    tierq_task_seq used. A pass that finds another under way on ``state`` does nothing."""
    summary = GaugeSummary()
    if not state.busy.acquire(blocking=False):
        return summary
    try:
        if not state.under_way and emit_seq_used is not None:
            emit_seq_used(seq_used_percent(ctx))
        walk_round(ctx, state, emit, summary, now=now, budget_seconds=budget_seconds,
                   slice_size=slice_size)
    finally:
        state.busy.release()
    return summary


def walk_round(ctx: Context, state: GaugeRound, emit: Emit, summary: GaugeSummary, *,
               now: float, budget_seconds: float | None, slice_size: int | None) -> None:
    budget = pairs.Budget(budget_seconds if budget_seconds is not None
                          else ctx.settings.maintenance_budget_seconds)
    limit = slice_size or ctx.settings.maintenance_slice
    if not state.under_way:
        state.under_way, state.began_at, state.cursor = True, now, pairs.START
        state.partial, state.gauged_now, state.other = {}, set(), None
    while True:
        after = state.cursor
        chunk = ctx.store.walk_gauge_pairs(after, limit)
        summary.slices += 1
        for row in pair_counts(ctx, chunk):
            merge(state.partial.setdefault(row.queue, zeros()), values_of(row))
        summary.pairs += len(chunk)
        at_end = len(chunk) < limit
        if chunk:
            state.cursor = chunk[-1]
        # the slice's last queue may have more pairs in the next slice: it waits for them
        open_queue = None if at_end else state.cursor[0]
        for queue in sorted(q for q in state.partial if q != open_queue):
            values = state.partial.pop(queue)
            if ctx.metric_queues.series(ctx.store, queue) != queue:
                state.other = merge(state.other or zeros(), values)
                continue
            emit(queue, values)
            state.gauged_now.add(queue)
            summary.gauged += 1
        if at_end:
            if state.other is not None:
                emit(OTHER, state.other)
                state.gauged_now.add(OTHER)
                summary.gauged += 1
            finish(state, emit, summary)
            return
        if budget.spent:
            return


def seq_used_percent(ctx: Context) -> float:
    """tierq_task_seq's last value as a percentage of its maximum (migration 0015)."""
    position = ctx.store.task_seq_position()
    return 100.0 * position.last_value / position.max_value


def values_of(row: TenantCounts) -> QueueValues:
    """One pair's counts as gauge values."""
    values: QueueValues = {name: float(getattr(row, name)) for name in GAUGES}
    values[OLDEST] = row.oldest_ready_age_seconds or 0.0
    return values


def merge(total: QueueValues, values: Mapping[str, float]) -> QueueValues:
    """``values`` added into ``total``, which is returned: the counts summed, the oldest
    ready age the maximum (a queue's sums over its pairs, ``~other`` over its queues, a
    queue's over the shards)."""
    for name in GAUGES:
        total[name] += values[name]
    total[OLDEST] = max(total[OLDEST], values[OLDEST])
    return total


def finish(state: GaugeRound, emit: Emit, summary: GaugeSummary) -> None:
    """End of a round: the queues gauged last round and not in this one have emptied; they
    get their zeros now, and are forgotten (not gauged again until they have rows)."""
    for queue in sorted(state.gauged_before - state.gauged_now):
        emit(queue, zeros())
        summary.zeroed += 1
    state.gauged_before, state.gauged_now = state.gauged_now, set()
    state.last_began_at, state.began_at = state.began_at, None
    state.under_way, state.cursor, state.other = False, pairs.START, None
    summary.completed = True
