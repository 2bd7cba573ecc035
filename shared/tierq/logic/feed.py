"""The bulk feeder's bookkeeping in the engine (the Glue job, spark_glue/tierq_feeder,
drives it): one run per feed at a time, where each feed stopped, and the backlog it
watches. Its rows go in through the engine's bulk path (``tierq.logic.bulk``:
``Tierq.bulk_load``), which owns staging, the insert and the admission of bulk rows."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

from tierq.dal.store.rows import FeedOffsetRow
from tierq.logic.context import Context

log = logging.getLogger(__name__)


class FeedBusy(RuntimeError):
    """Another run of the same feed holds its lock."""


@contextmanager
def feed_lock(ctx: Context, feed: str) -> Iterator[None]:
    """Hold the feed's advisory lock for the block; FeedBusy when another run holds it.

    The lock is a session lock on a connection of its own, outside the engine's pool
    (``Database.dedicated_connection``; no transaction stays open): the run takes pooled
    connections while it holds the lock, and a pooled connection held for the lock would
    leave it one fewer (none with a pool of one). The connection is closed on every way
    out, which ends its session and so its lock whatever the release did:

    | the block    | the release                 | ``feed_lock``                           |
    | ------------ | --------------------------- | --------------------------------------- |
    | ends         | done                        | returns                                 |
    | ends         | fails (its connection lost) | raises its error: the lock may have     |
    |              |                             | ended before the run did                |
    | raises       | done or fails (logged)      | raises the block's error                |
    """
    with ctx.db.dedicated_connection() as conn:
        if not ctx.store.feeder_try_lock(conn, feed):
            raise FeedBusy(f"another run of feed {feed!r} is in progress")
        try:
            yield
        except BaseException:
            try:
                ctx.store.feeder_unlock(conn, feed)
            except Exception as exc:  # (the block's error is the one to raise)
                log.warning("releasing the lock of feed %r failed; closing its connection "
                            "ends it: %s", feed, exc)
            raise
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
