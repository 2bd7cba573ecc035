"""A queue's backlog as the feeder sees it: ready + delayed + leased tasks.

Cold and delayed rows are counted in Postgres, each on its partial index and capped (the
feeder only needs to know how far below its limit the queue is); warm ready and leased
tasks are counted in Valkey, per tenant.

A count reads the queue's cold and delayed rows up to the limit (about 0.3 s a million
rows on a small server). With a limit far above the round size, counting before every
round would make a long feed's counting grow with the square of its rows. So
``BacklogGauge`` counts again whenever the last figure leaves less room than the round
wants. Otherwise it counts at most every ``RECOUNT_AT_MOST_AFTER_SECONDS``, and at least
often enough that the counting stays a small share of the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from tierq.logic import feed
from tierq.logic.context import Context

# a new count once this many times the last count's duration has passed since it (the
# counts then take at most about 1/20 of the run, whatever the backlog) ...
RECOUNT_AFTER_DURATIONS = 20
# ... and never later than this: tasks another producer (HTTP, schedules, another feed of
# the queue) adds meanwhile are seen within it, however slow one count was
RECOUNT_AT_MOST_AFTER_SECONDS = 30.0


@dataclass(frozen=True)
class Backlog:
    cold: int
    delayed: int
    warm: int
    leased: int
    added: int = 0  # tasks the run created since the counts were taken

    @property
    def total(self) -> int:
        return self.cold + self.delayed + self.warm + self.leased + self.added

    def room(self, max_backlog: int) -> int:
        """How many tasks may still be written before the backlog reaches the limit."""
        return max(0, max_backlog - self.total)

    def __str__(self) -> str:
        counted = (f"cold {self.cold}, delayed {self.delayed}, warm {self.warm}, "
                   f"leased {self.leased}")
        if self.added:
            return f"{self.total} (counted: {counted}; created since: {self.added})"
        return f"{self.total} ({counted})"


def queue_backlog(ctx: Context, queue: str, cap: int) -> Backlog:
    """Counts of ``queue``; the Postgres counts stop at ``cap`` each."""
    counted = feed.backlog(ctx, queue, cap)
    return Backlog(cold=counted.cold, delayed=counted.delayed, warm=counted.warm,
                   leased=counted.leased)


class BacklogGauge:
    """The backlog each round is sized by. It is counted before the first round, whenever
    the figure leaves less room than the round wants (so a run near its limit, or waiting
    for room, always looks at a fresh count: with the default limit, that is every round),
    and once ``RECOUNT_AFTER_DURATIONS`` times the last count's duration, or at most
    ``RECOUNT_AT_MOST_AFTER_SECONDS``, has passed. In between, it is the last count plus
    the tasks the run has created since: workers can only make the real backlog smaller,
    and another producer's tasks are seen at the next count."""

    def __init__(self, count: Callable[[], Backlog], max_backlog: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._count = count
        self._max_backlog = max_backlog
        self._clock = clock
        self._last: Backlog | None = None
        self._counted_at = 0.0  # when the last count ended
        self._count_seconds = 0.0
        self.counts = 0  # how many times the backlog was counted

    def look(self, wanted: int) -> Backlog:
        """The backlog before a round that would write ``wanted`` rows given room."""
        began = self._clock()
        last = self._last
        stale_after = min(RECOUNT_AFTER_DURATIONS * self._count_seconds,
                          RECOUNT_AT_MOST_AFTER_SECONDS)
        if (last is None or last.room(self._max_backlog) < wanted
                or began - self._counted_at >= stale_after):
            last = self._last = self._count()
            self._counted_at = self._clock()
            self._count_seconds = self._counted_at - began
            self.counts += 1
        return last

    def created(self, tasks: int) -> None:
        """The run created ``tasks`` tasks (they are part of the backlog until the next
        count sees them)."""
        if self._last is not None:
            self._last = replace(self._last, added=self._last.added + tasks)
