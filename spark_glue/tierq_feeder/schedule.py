"""The order in which a run feeds its sources' rows (pure arithmetic, no Spark).

Every row a run may feed has a *source ordinal* ``j``: its place among the rows its source
still has (0 = the next row after where the previous run stopped). The strategy merges the
sources into one line, the *schedule*; a row's place in it is its *rank*:

* ``fair``: round-robin, row by row, in the order the sources were given —
  ``a0 b0 c0 a1 b1 c1 …``; a source that runs dry drops out and the others go on alternating.
* ``prefer:p``: every row of ``p`` first, then the rest fairly.

Rounds take the next slice of ranks; back pressure decides how long each slice is.
Because rank is a closed formula of ``(source, j)`` and the sources' row counts, Spark
computes it per row without a shuffle, and the driver computes, for any rank ``end``, how
many rows of each source lie before it (``consumed_before``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    """``counts[i]``: rows source ``i`` still has; ``preferred``: index of the preferred
    source, or None for fair."""

    counts: tuple[int, ...]
    preferred: int | None = None

    @property
    def total(self) -> int:
        return sum(self.counts)

    def rank(self, source: int, j: int) -> int:
        """Place in the schedule of row ``j`` of source ``source``."""
        if not 0 <= j < self.counts[source]:
            raise IndexError(f"source {source} has {self.counts[source]} rows, not row {j}")
        if self.preferred is None:
            return fair_rank(self.counts, source, j)
        if source == self.preferred:
            return j
        others = [n for i, n in enumerate(self.counts) if i != self.preferred]
        position = source if source < self.preferred else source - 1
        return self.counts[self.preferred] + fair_rank(others, position, j)

    def consumed_before(self, end: int) -> list[int]:
        """How many rows of each source have a rank below ``end``."""
        out = []
        for source, n in enumerate(self.counts):
            lo, hi = 0, n  # find the first j whose rank is >= end
            while lo < hi:
                mid = (lo + hi) // 2
                if self.rank(source, mid) < end:
                    lo = mid + 1
                else:
                    hi = mid
            out.append(lo)
        return out

    def order(self) -> list[tuple[int, int]]:
        """The whole schedule as (source, j), rank by rank (for tests and small runs)."""
        cells = [(self.rank(s, j), s, j) for s, n in enumerate(self.counts) for j in range(n)]
        return [(s, j) for _, s, j in sorted(cells)]


def fair_rank(counts: Sequence[int], source: int, j: int) -> int:
    """Round-robin rank: every source's rows before round ``j`` (at most ``j`` each), plus
    the sources before this one that still have a row in round ``j``."""
    before_round = sum(min(n, j) for n in counts)
    ahead_in_round = sum(1 for n in counts[:source] if n > j)
    return before_round + ahead_in_round


@dataclass(frozen=True)
class PartProgress:
    """One part of a source (a file, or the whole JDBC result): rows already consumed by
    earlier runs (``done``) and rows it has now (``total``)."""

    part: str
    done: int
    total: int

    @property
    def remaining(self) -> int:
        return max(0, self.total - self.done)


def advance(parts: Sequence[PartProgress], consumed: int) -> list[PartProgress]:
    """Where each part stands once the first ``consumed`` remaining rows of the source (in
    part order) are done."""
    out = []
    left = consumed
    for p in parts:
        take = min(p.remaining, left)
        left -= take
        out.append(PartProgress(p.part, p.done + take, p.total))
    if left:
        raise ValueError(f"consumed {consumed} rows but the source had only "
                         f"{consumed - left} remaining")
    return out


def part_bases(parts: Sequence[PartProgress]) -> dict[str, int]:
    """For each part, the source ordinal of its first remaining row."""
    bases = {}
    running = 0
    for p in parts:
        bases[p.part] = running
        running += p.remaining
    return bases
