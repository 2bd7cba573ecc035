"""The bulk feeder's side of the engine (the Glue job, spark_glue/tierq_feeder, drives it):
one run per feed at a time, where each feed stopped, the backlog it watches, and the
admission of its rows. Bulk rows are admitted as ``admission.begin(..., force_cold=True)``
describes: their pairs turn cold and register the write as in flight, so nothing enqueued
meanwhile goes warm and jumps ahead of them; they land ``cold`` (or ``delayed``) and the
cold -> warm mover, or ``warm_up``, promotes them.

A round: ``admitted_round`` turns the round's pairs cold and reserves the round's places in
line (``seq``, in schedule order) before any row is written, and ends the admission once
every partition has committed; each partition writes its chunks with ``write_chunk`` (a
short transaction each: register the pairs, COPY into the staging table, insert from it)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

from tierq.dal.store.rows import FeedOffsetRow
from tierq.dal.task_store import Conn
from tierq.logic import admission, pairs, tiering
from tierq.logic.context import Context, to_datetime


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


@contextmanager
def admitted_round(ctx: Context, queue: str, tenants: Iterable[str],
                   rows: int) -> Iterator[list[int]]:
    """The places in line of a round of ``rows`` rows, in order. The (queue, tenant) pairs
    of the round stay cold, their write registered in flight, from before the places are
    taken until the block ends (after the last partition has committed)."""
    ticket = admission.begin(ctx, {(queue, t) for t in tenants}, force_cold=True)
    try:
        yield ctx.store.feeder_reserve_seqs(rows)
    finally:
        admission.close(ctx, ticket)


def prepare_writer(ctx: Context, conn: Conn) -> None:
    """A partition writer's connection: its staging table."""
    ctx.store.feeder_create_stage(conn)


def write_chunk(ctx: Context, conn: Conn, queue: str, copy_text: bytes, *,
                tenants: Iterable[str], ready_tenants: Iterable[str], max_attempts: int,
                now: float) -> int:
    """Write one chunk of rows (COPY text of the staging table's columns) in one short
    transaction; returns how many were created (a live task with the same key keeps its
    place). The pairs with ready rows are admitted cold for the chunk's duration; every
    pair is registered as an enqueue registers it, so a new queue beyond the tenant's cap
    fails the chunk (QuotaExceeded) before anything is written."""
    ticket = admission.begin(ctx, {(queue, t) for t in ready_tenants}, force_cold=True)
    try:
        # psycopg's own transaction (as the feeder has always written): tierq's timeouts
        # are not set on it
        with conn.transaction():
            pairs.register(ctx.store, conn, queue, tenants, now=now,
                           cap=ctx.settings.max_queues_per_tenant)
            ctx.store.feeder_copy_stage(conn, copy_text)
            return ctx.store.feeder_insert_from_stage(conn, queue, to_datetime(now),
                                                      max_attempts)
    finally:
        admission.close(ctx, ticket)


def warm_up(ctx: Context, queue: str, tenants: Iterable[str]) -> int:
    """Promote what the feed wrote for these tenants now, as the mover would; returns how
    many tasks went warm."""
    return sum(tiering.refill(ctx, queue, tenant).promoted for tenant in sorted(tenants))
