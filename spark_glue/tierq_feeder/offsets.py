"""Where each feed stopped (``tierq_feeder_offsets``), and one run per feed at a time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from tierq.dal.postgres import Database, run
from tierq_feeder.sources import Offset


class FeedBusy(RuntimeError):
    """Another run of the same feed holds its lock."""


@dataclass(frozen=True)
class OffsetRow:
    source: str
    part: str
    rows_done: int
    last_value: str | None = None


def load_offsets(db: Database, feed: str) -> dict[tuple[str, str], Offset]:
    return {(r["source"], r["part"]): Offset(r["rows_done"], r["last_value"])
            for r in db.fetch("feeder_offsets", {"feed": feed})}


def save_offsets(db: Database, feed: str, rows: Sequence[OffsetRow]) -> None:
    """Record progress, in one statement (one short transaction)."""
    if not rows:
        return
    db.fetch("feeder_save_offsets", {
        "feed": feed,
        "sources": [r.source for r in rows],
        "parts": [r.part for r in rows],
        "rows_done": [r.rows_done for r in rows],
        "last_values": [r.last_value for r in rows],
    })


def reset_offsets(db: Database, feed: str) -> None:
    db.fetch("feeder_reset_offsets", {"feed": feed})


@contextmanager
def feed_lock(db: Database, feed: str) -> Iterator[None]:
    """Hold the feed's advisory lock (a session lock on one pooled connection; no
    transaction stays open)."""
    with db.connection() as conn:
        if not run(conn, "feeder_try_lock", {"feed": feed})[0]["locked"]:
            raise FeedBusy(f"another run of feed {feed!r} is in progress")
        try:
            yield
        finally:
            run(conn, "feeder_unlock", {"feed": feed})
