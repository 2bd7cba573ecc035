"""Bulk loads: many rows into one queue through a staging table, with the admission rules
every other way in follows (docs/architecture.md §11). The Glue feeder
(spark_glue/tierq_feeder) drives it; any other bulk producer can.

A load is driven in three steps, each a method of the engine (``Tierq.bulk_load``,
``Tierq.bulk_writer``, ``Tierq.bulk_warm_up``):

1. ``load`` (one process, the driver): the load's (queue, tenant) pairs turn cold and
   register the load as in flight (``admission.begin(..., force_cold=True)``), so nothing
   enqueued meanwhile goes warm and jumps ahead of these rows; then the load's places in
   line are reserved, in blocks of ``SEQ_BLOCK`` (``tierq_task_seq`` steps by 512, migration
   0004: a block is the caller's alone). The yielded ``BulkLoad`` is a small picklable
   ticket; the admission ends when the block exits, after every writer has committed.
2. ``BulkWriter.write`` (any number of writers, each with one connection, in any process):
   per chunk one short transaction: the chunk's pairs admitted cold and registered (as an
   enqueue registers them, under the per-tenant cap), ``COPY`` into the connection's
   staging table, one ``INSERT … SELECT … ORDER BY seq ON CONFLICT DO NOTHING`` into
   ``tierq_tasks``. A row's place in line is its ``ord`` (0-based place in the load) mapped
   onto the reserved blocks in SQL, so writers may commit in any order and the line still
   follows ``ord``. A live task with the same key keeps its place, payload and id.
3. ``warm_up`` (the driver, after the load): one ``tiering.refill`` per pair promotes the
   first batch, as the scheduled cold -> warm mover would.

Staged rows are COPY text (tab-separated, ``\\N`` for null, backslashes doubled) of
``STAGE_COLUMNS``: a UUIDv7 ``id`` (``uuid7_prefix`` + the tail of any random UUID makes
one), ``ord``, ``tenant``, ``key``, ``priority`` (0-9), ``payload`` (JSON text) and
``run_at_us`` (epoch microseconds, or null for now). Ready rows land ``cold``
(``ready_since`` = the chunk's commit time), rows due later land ``delayed``. Producers
that build rows in Python use ``copy_text``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from tierq.core.ids import uuid7_strings
from tierq.dal.task_store import Conn
from tierq.logic import admission, pairs, tiering
from tierq.logic.context import Context, to_datetime

# tierq_task_seq's step (migration 0004): one value is a block of this many places
SEQ_BLOCK = 512
STAGE_COLUMNS = ("id", "ord", "tenant", "key", "priority", "payload", "run_at_us")


@dataclass(frozen=True)
class BulkLoad:
    """One load (or one round of a longer one): what every writer needs, picklable."""

    queue: str
    rows: int                  # ords 0 .. rows-1 have places
    blocks: tuple[int, ...]    # first seq of each reserved block, increasing
    max_attempts: int          # the queue's setting, as an enqueue would store it
    id_prefix: str             # ``uuid7_prefix`` of the load's start

    def seq(self, ord_: int) -> int:
        """The place in line of row ``ord_`` (what the insert computes in SQL)."""
        if not 0 <= ord_ < self.rows:
            raise IndexError(f"the load has places for ords 0..{self.rows - 1}, not {ord_}")
        return self.blocks[ord_ // SEQ_BLOCK] + ord_ % SEQ_BLOCK


def uuid7_prefix(now_ms: int) -> str:
    """The first 15 characters of a UUIDv7 of ``now_ms``: ``tttttttt-tttt-7``. Followed by
    the last 21 characters of a random (v4) UUID string (``xxx-Vxxx-xxxxxxxxxxxx``, whose
    variant digit V is already RFC 9562's), it is a UUIDv7 with 74 random bits."""
    hex_ms = f"{now_ms & ((1 << 48) - 1):012x}"
    return f"{hex_ms[:8]}-{hex_ms[8:]}-7"


@contextmanager
def load(ctx: Context, queue: str, rows: int, tenants: Iterable[str]) -> Iterator[BulkLoad]:
    """Admit a load of ``rows`` rows for these tenants of ``queue`` and reserve its places
    in line; the admission ends when the block exits (after the last writer's commit)."""
    if rows < 1:
        raise ValueError(f"a bulk load needs at least one row, got {rows}")
    wanted = sorted(set(tenants))
    if not wanted:
        raise ValueError("a bulk load needs the tenants it writes to")
    max_attempts = ctx.queue_settings.get(queue).max_attempts
    ticket = admission.begin(ctx, {(queue, t) for t in wanted}, force_cold=True)
    try:
        blocks = ctx.store.feeder_reserve_blocks(math.ceil(rows / SEQ_BLOCK))
        yield BulkLoad(queue=queue, rows=rows, blocks=tuple(blocks), max_attempts=max_attempts,
                       id_prefix=uuid7_prefix(int(ctx.now() * 1000)))
    finally:
        admission.close(ctx, ticket)


class BulkWriter:
    """Writes chunks of a load on one connection (its staging table lives there)."""

    def __init__(self, ctx: Context, conn: Conn, load: BulkLoad) -> None:
        self.ctx = ctx
        self.conn = conn
        self.load = load
        ctx.store.feeder_create_stage(conn)

    def write(self, copy_text: bytes | bytearray | memoryview | Sequence[bytes | memoryview],
              tenants: Iterable[str]) -> int:
        """Write one chunk (COPY text of ``STAGE_COLUMNS``, or its pieces in order) whose
        rows belong to ``tenants``, in one short transaction; returns how many tasks were
        created (a live task with the same key keeps its place: the row is ignored). A new
        queue beyond a tenant's cap fails the chunk (QuotaExceeded) before anything is
        written."""
        ctx, queue = self.ctx, self.load.queue
        wanted = sorted(set(tenants))
        now = ctx.now()
        # the chunk's own admission: its pairs stay cold while it writes, even if the
        # load's registration has lapsed meanwhile
        ticket = admission.begin(ctx, {(queue, t) for t in wanted}, force_cold=True)
        try:
            # psycopg's own transaction (as the feeder has always written): tierq's
            # statement timeouts are not set on it
            with self.conn.transaction():
                pairs.register(ctx.store, self.conn, queue, wanted, now=now,
                               cap=ctx.settings.max_queues_per_tenant)
                pieces = ([copy_text] if isinstance(copy_text, bytes | bytearray | memoryview)
                          else copy_text)
                ctx.store.feeder_copy_stage(self.conn, pieces)
                return ctx.store.feeder_insert_from_stage(
                    self.conn, queue, to_datetime(now), self.load.max_attempts,
                    list(self.load.blocks), SEQ_BLOCK)
        finally:
            admission.close(ctx, ticket)


@contextmanager
def writer(ctx: Context, load: BulkLoad) -> Iterator[BulkWriter]:
    """A writer on a pooled connection of its own."""
    with ctx.db.connection() as conn:
        yield BulkWriter(ctx, conn, load)


def warm_up(ctx: Context, queue: str, tenants: Iterable[str]) -> int:
    """Promote what a load wrote for these tenants now, as the mover would; returns how
    many tasks went warm."""
    return sum(tiering.refill(ctx, queue, tenant).promoted for tenant in sorted(set(tenants)))


def _copy_escaped(text: str) -> str:
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "\t" in text or "\n" in text or "\r" in text:
        raise ValueError("staged text may not hold a tab, newline or carriage return")
    return text


def copy_text(rows: Iterable[tuple[int, str, str, int, str, int | None]],
              now_ms: int | None = None) -> bytes:
    """COPY text of ``STAGE_COLUMNS`` for rows ``(ord, tenant, key, priority, payload JSON,
    run_at_us or None)``, with fresh UUIDv7 ids (for producers that build rows in Python;
    keys and tenants are those the API accepts, payloads JSON text as ``json.dumps`` or
    orjson writes it)."""
    materialised = list(rows)
    ids = uuid7_strings(len(materialised), now_ms)
    null = "\\N"
    lines = [
        f"{task_id}\t{ord_}\t{_copy_escaped(tenant)}\t{_copy_escaped(key)}\t{priority}\t"
        f"{_copy_escaped(payload)}\t{null if run_at_us is None else run_at_us}\n"
        for task_id, (ord_, tenant, key, priority, payload, run_at_us)
        in zip(ids, materialised, strict=True)
    ]
    return "".join(lines).encode("utf-8")
