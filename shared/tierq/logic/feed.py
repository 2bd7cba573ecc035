"""The bulk feeder's bookkeeping in the engine (the Glue job, spark_glue/tierq_feeder,
drives it): one run per feed at a time, where each feed stopped, and the backlog it
watches. Its rows go in through the engine's bulk path (``tierq.logic.bulk``:
``Tierq.bulk_load``), which owns staging, the insert and the admission of bulk rows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

from tierq.dal.store.rows import FeedOffsetRow
from tierq.logic.context import Context


class FeedBusy(RuntimeError):
    """Another run of the same feed holds its lock."""


@contextmanager
def feed_lock(ctx: Context, feed: str) -> Iterator[None]:
    """Hold the feed's advisory lock (a session lock on one pooled connection; no
    transaction stays open); FeedBusy when another run holds it."""
    with ctx.db.connection() as conn:
        if not ctx.store.feeder_try_lock(conn, feed):
            raise FeedBusy(f"another run of feed {feed!r} is in progress")
        try:
            yield
        finally:
            ctx.store.feeder_unlock(conn, feed)


def load_offsets(ctx: Context, feed: str) -> list[FeedOffsetRow]:
    """Where every source (and part) of the feed stopped."""
    return ctx.store.feeder_offsets(feed)


def save_offsets(ctx: Context, feed: str, rows: Sequence[FeedOffsetRow]) -> None:
    """Record progress, in one statement (one short transaction)."""
    if rows:
        ctx.store.feeder_save_offsets(feed, rows)


def reset_offsets(ctx: Context, feed: str) -> None:
    ctx.store.feeder_reset_offsets(feed)


class FeedBacklog(NamedTuple):
    """A queue's backlog: cold and delayed rows (each counted up to a cap), warm ready and
    leased tasks."""

    cold: int
    delayed: int
    warm: int
    leased: int


def backlog(ctx: Context, queue: str, cap: int) -> FeedBacklog:
    """The queue's backlog: cold and delayed rows counted in Postgres on their partial
    indexes (up to ``cap`` each), warm ready and leased tasks in Valkey, tenant by tenant."""
    counted = ctx.store.feeder_backlog_pg(queue, cap)
    warm = leased = 0
    for tenant in ctx.store.tenants_of_queue(queue):
        ready, leased_now, _mode = ctx.warm.stats(queue, tenant)
        warm += ready
        leased += leased_now
    return FeedBacklog(counted.cold, counted.delayed, warm, leased)
