"""The order of a ready line: priority first (9 before 0), then enqueue order (seq).

Valkey sorted sets order by a double, exact up to 2^53, so the score packs both:
``(9 - priority) * 2^49 + seq``. seq must stay below 2^49 (5.6e14 enqueues).
"""

from __future__ import annotations

PRIORITY_MIN = 0
PRIORITY_MAX = 9
SEQ_BITS = 49
SEQ_LIMIT = 1 << SEQ_BITS


def score(priority: int, seq: int) -> int:
    """The ready-set score: lower pops first."""
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"priority must be {PRIORITY_MIN}..{PRIORITY_MAX}, got {priority}")
    if not 0 <= seq < SEQ_LIMIT:
        raise ValueError(f"seq must be 0..2^{SEQ_BITS}-1, got {seq}")
    return (PRIORITY_MAX - priority) * SEQ_LIMIT + seq


def unpack(value: float | int) -> tuple[int, int]:
    """(priority, seq) of a score."""
    bucket, seq = divmod(int(value), SEQ_LIMIT)
    return PRIORITY_MAX - bucket, seq
