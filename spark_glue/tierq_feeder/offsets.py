"""Where each feed stopped (``tierq_feeder_offsets``), and one run per feed at a time
(``feed_lock``; both kept by the engine: ``tierq.logic.feed``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tierq.dal.store.rows import FeedOffsetRow
from tierq.logic import feed
from tierq.logic.context import Context
from tierq.logic.feed import FeedBusy, feed_lock
from tierq_feeder.sources import Offset

__all__ = ["FeedBusy", "OffsetRow", "feed_lock", "load_offsets", "reset_offsets",
           "save_offsets"]


@dataclass(frozen=True)
class OffsetRow:
    source: str
    part: str
    rows_done: int
    last_value: str | None = None


def load_offsets(ctx: Context, feed_name: str) -> dict[tuple[str, str], Offset]:
    return {(r.source, r.part): Offset(r.rows_done, r.last_value)
            for r in feed.load_offsets(ctx, feed_name)}


def save_offsets(ctx: Context, feed_name: str, rows: Sequence[OffsetRow]) -> None:
    """Record progress, in one statement (one short transaction)."""
    feed.save_offsets(ctx, feed_name, [
        FeedOffsetRow(r.source, r.part, r.rows_done, r.last_value) for r in rows])


def reset_offsets(ctx: Context, feed_name: str) -> None:
    feed.reset_offsets(ctx, feed_name)
