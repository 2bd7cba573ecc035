"""A queue's backlog as the feeder sees it: ready + delayed + leased tasks.

Cold and delayed rows are counted in Postgres, each on its partial index and capped (the
feeder only needs to know how far below its limit the queue is); warm ready and leased
tasks are counted in Valkey, per tenant.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierq.logic import feed
from tierq.logic.context import Context


@dataclass(frozen=True)
class Backlog:
    cold: int
    delayed: int
    warm: int
    leased: int

    @property
    def total(self) -> int:
        return self.cold + self.delayed + self.warm + self.leased

    def room(self, max_backlog: int) -> int:
        """How many tasks may still be written before the backlog reaches the limit."""
        return max(0, max_backlog - self.total)

    def __str__(self) -> str:
        return (f"{self.total} (cold {self.cold}, delayed {self.delayed}, warm {self.warm}, "
                f"leased {self.leased})")


def queue_backlog(ctx: Context, queue: str, cap: int) -> Backlog:
    """Counts of ``queue``; the Postgres counts stop at ``cap`` each."""
    counted = feed.backlog(ctx, queue, cap)
    return Backlog(cold=counted.cold, delayed=counted.delayed, warm=counted.warm,
                   leased=counted.leased)
