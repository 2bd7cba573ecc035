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
   per chunk, the chunk's pairs admitted cold and registered (as an enqueue registers
   them: under the per-tenant cap, in a transaction of their own), then one short
   transaction: ``COPY`` into the connection's staging table, one ``INSERT … SELECT`` into
   ``tierq_tasks``. A row's place in line is its ``ord`` (0-based place in the load)
   mapped onto the reserved blocks in SQL, so writers may commit in any order and the line
   still follows ``ord``. A live task with the same key keeps its place, payload and id.
   A row whose payload is a big payload's pointer is checked and recorded as an enqueue's
   (``logic.payloads.use_bulk``, in the chunk's transaction; the chunk refused otherwise).
   The insert is a plain one (about a third cheaper in PostgreSQL than speculative
   insertion); a key that a live task holds or that the chunk repeats makes it fail on
   ``tierq_tasks_live_key``, and the chunk is written again with
   ``… ORDER BY ord ON CONFLICT DO NOTHING``, as is every later chunk of that writer.
   **Repeated keys**: the first occurrence in the load wins, whichever chunk commits
   first. Inside a chunk the insert's order decides; across chunks, a chunk that created
   fewer tasks than it staged lets its rows take over the tasks of the same load placed
   later (``feeder_settle_repeats``; a task is the load's when its seq lies in the load's
   blocks). Until then the later occurrence waits cold or delayed, where no claim reaches
   it unless the cold -> warm mover promotes it meanwhile (it then stays: a warm task is
   not taken over). Two chunks holding the same keys in crossed orders can deadlock:
   PostgreSQL aborts one, which is written again.
3. ``warm_up`` (the driver, after the load): one ``tiering.refill`` per pair promotes the
   first batch, as the scheduled cold -> warm mover would.

Staged rows are COPY text (tab-separated, ``\\N`` for null, backslashes doubled) of
``STAGE_COLUMNS``: a UUIDv7 ``id`` (``load_id`` makes the ids of a load increase with
``ord``: PostgreSQL appends them to the primary key's index instead of scattering them),
``ord``, ``tenant``, ``key``, ``priority`` (0-9), ``payload`` (JSON text) and
``run_at_us`` (epoch microseconds, or null for now). Ready rows land ``cold``
(``ready_since`` = the chunk's commit time), rows due later land ``delayed``. Producers
that build rows in Python use ``copy_text``.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from tierq.core.ids import uuid7_strings
from tierq.dal.store.rows import LIVE_KEY_INDEX
from tierq.dal.task_store import Conn
from tierq.logic import admission, pairs, payloads, tiering
from tierq.logic.context import Context, to_datetime
from tierq.logic.homes import require_here

# tierq_task_seq's step (migration 0004): one value is a block of this many places
SEQ_BLOCK = 512
# a chunk aborted by a deadlock (chunks holding the same keys in crossed orders) is written
# again up to this many times in all: each abort lets the other chunk through
CHUNK_ATTEMPTS = 5
STAGE_COLUMNS = ("id", "ord", "tenant", "key", "priority", "payload", "run_at_us")


@dataclass(frozen=True)
class BulkLoad:
    """One load (or one round of a longer one): what every writer needs, picklable."""

    queue: str
    rows: int                  # ords 0 .. rows-1 have places
    blocks: tuple[int, ...]    # first seq of each reserved block, increasing
    max_attempts: int          # the queue's setting, as an enqueue would store it
    id_ms: int                 # the load's start (epoch ms) and 16 random hex digits:
    id_tail: str               # row ``ord`` has id ``load_id(id_ms, ord, id_tail)``

    def seq(self, ord_: int) -> int:
        """The place in line of row ``ord_`` (what the insert computes in SQL)."""
        if not 0 <= ord_ < self.rows:
            raise IndexError(f"the load has places for ords 0..{self.rows - 1}, not {ord_}")
        return self.blocks[ord_ // SEQ_BLOCK] + ord_ % SEQ_BLOCK


def load_id(id_ms: int, ord_: int, tail: str) -> str:
    """The id of row ``ord_`` of a load that started at ``id_ms``, as 32 hex digits.

    PostgreSQL reads a uuid without its hyphens. The layout is the engine's own UUIDv7s
    (core/ids.py: 48-bit ms, version 7, a 12-bit counter that carries into the next
    milliseconds, the variant, a clear batch mark, 61 random bits). The row's ord is the
    counter, so a load's ids increase with ord, and the load's ``tail`` (``new_id_tail``)
    is the random bits.
    Two rows of one load differ in ms or counter; of two loads, in the tail."""
    if len(tail) != 16 or tail[0] not in "89ab":
        raise ValueError(f"not an id tail: {tail!r}")
    high = (((id_ms + (ord_ >> 12)) & ((1 << 48) - 1)) << 16) | 0x7000 | (ord_ & 0xFFF)
    return f"{high:016x}{tail}"


def new_id_tail(tag: int | None = None) -> str:
    """16 hex digits: the variant, a batch member's mark clear (``core.batch_ids``) and 61
    random bits, the last four replaced by a shard's ``tag`` when given (as
    ``dal.shards.tag_ids`` marks a shard's ids)."""
    tail = f"{(0b10 << 62) | secrets.randbits(61):016x}"
    return tail if tag is None else f"{tail[:-4]}{tag:04x}"


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
                       id_ms=int(ctx.now() * 1000), id_tail=new_id_tail(ctx.id_tag))
    finally:
        admission.close(ctx, ticket)


class BulkWriter:
    """Writes chunks of a load on one connection (its staging table lives there)."""

    def __init__(self, ctx: Context, conn: Conn, load: BulkLoad) -> None:
        self.ctx = ctx
        self.conn = conn
        self.load = load
        # tasks of the load a later chunk had placed and this writer's rows took over, and
        # chunks written again (a deadlock, or a plain insert that met a live or repeated key)
        self.settled = 0
        self.retried = 0
        # once a chunk met a live key (or repeated one), this writer's chunks skip live
        # keys with ON CONFLICT DO NOTHING
        self.repeats_seen = False
        self._registered: dict[str, float] = {}  # tenant -> when this writer registered it
        ctx.store.feeder_create_stage(conn)

    def write(self, copy_text: bytes | bytearray | memoryview | Sequence[bytes | memoryview],
              tenants: Iterable[str]) -> int:
        """Write one chunk whose rows belong to ``tenants``, in one short transaction, and
        return how many tasks were created.

        The chunk is COPY text of ``STAGE_COLUMNS``, or its pieces in order. A row whose key
        a live task holds is ignored (that task keeps its place); a task of this load placed
        later is taken over. Neither counts as created. A new queue beyond a tenant's cap
        fails the chunk (QuotaExceeded) before anything is written."""
        pieces = ([copy_text] if isinstance(copy_text, bytes | bytearray | memoryview)
                  else copy_text)
        wanted = sorted(set(tenants))
        for attempt in range(1, CHUNK_ATTEMPTS + 1):
            try:
                return self._write_once(pieces, wanted)
            except psycopg.errors.UniqueViolation as exc:
                if self.repeats_seen or exc.diag.constraint_name != LIVE_KEY_INDEX:
                    raise
                self.repeats_seen = True  # the plain insert met a live or repeated key
            except psycopg.errors.DeadlockDetected:
                if attempt == CHUNK_ATTEMPTS:
                    raise
            self.retried += 1
        raise AssertionError("unreachable")

    def _register(self, tenants: list[str], now: float) -> None:
        """Register the chunk's pairs as an enqueue does: in a transaction of their own
        (inside the chunk's, the pair's row would hold every other writer of the pair until
        this chunk commits), again only once the refresh interval has passed."""
        stale_before = now - pairs.refresh_seconds(self.ctx.settings)
        due = [t for t in tenants if self._registered.get(t, float("-inf")) <= stale_before]
        if not due:
            return
        with self.conn.transaction():
            pairs.register(self.ctx.store, self.conn, self.load.queue, due, now=now,
                           cap=self.ctx.settings.max_queues_per_tenant,
                           sharded=self.ctx.id_tag is not None)
        self._registered.update((t, now) for t in due)

    def _write_once(self, pieces: Sequence[bytes | bytearray | memoryview],
                    tenants: list[str]) -> int:
        ctx, queue, load = self.ctx, self.load.queue, self.load
        now = ctx.now()
        # the chunk's own admission: its pairs stay cold while it writes, even if the
        # load's registration has lapsed meanwhile
        ticket = admission.begin(ctx, {(queue, t) for t in tenants}, force_cold=True)
        try:
            self._register(tenants, now)
            # psycopg's own transaction (as the feeder has always written): tierq's
            # statement timeouts are not set on it
            with self.conn.transaction():
                if ctx.id_tag is not None:  # sharded: none of the pairs moved meanwhile
                    # (held until the chunk commits; a feed whose load began before a move
                    # of one of its pairs fails here, and runs again routed anew)
                    require_here(ctx.store, self.conn, queue, tenants)
                staged = ctx.store.feeder_copy_stage(self.conn, pieces)
                created = ctx.store.feeder_insert_from_stage(
                    self.conn, queue, to_datetime(now), load.max_attempts,
                    list(load.blocks), SEQ_BLOCK, plain=not self.repeats_seen)
                # big payloads' pointers: checked as an enqueue's, recorded with their tasks
                payloads.use_bulk(ctx, self.conn)
                settled = 0
                if created < staged:  # a repeated key or a live task: rare, and only then
                    settled = ctx.store.feeder_settle_repeats(
                        self.conn, queue, to_datetime(now), list(load.blocks), SEQ_BLOCK)
            self.settled += settled
            return created
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


# -- loads over shards (tierq.sharded.ShardedTierq.bulk_load) ------------------------------

@dataclass(frozen=True)
class ShardedBulkLoad:
    """A load whose tenants' pairs live on several shards: one ``BulkLoad`` on each home
    shard of any of its tenants (its places reserved there for every ord of the load, so a
    pair's rows keep the load's order on its shard). Rows carry ids made with ``id_ms`` and
    ``id_tail`` as a ``BulkLoad``'s do; a writer gives each the tag of its home shard."""

    queue: str
    rows: int
    id_ms: int
    id_tail: str
    loads: dict[str, BulkLoad]   # home shard -> its load there
    homes: dict[str, str]        # tenant -> its pair's home shard
    tags: dict[str, int]         # home shard -> the tag its ids end with


def split_by_home(load: ShardedBulkLoad, pieces: Sequence[bytes | bytearray | memoryview]
                  ) -> dict[str, tuple[bytes, set[str]]]:
    """A chunk's COPY text cut into one chunk per home shard (each row, in order, to its
    tenant's home), every row's id ending with its home's tag (dal.shards.tag_ids); with
    each part, its tenants."""
    data = b"".join(bytes(piece) for piece in pieces)
    tags = {home: f"{tag:04x}".encode() for home, tag in load.tags.items()}
    homes = {tenant.encode(): home for tenant, home in load.homes.items()}
    lines: dict[str, list[bytes]] = {}
    found_tenants: dict[str, set[bytes]] = {}
    for line in data.split(b"\n")[:-1]:  # COPY text escapes newlines inside a field
        id_end, _, rest = line.partition(b"\t")
        tenant = rest.split(b"\t", 2)[1]
        home = homes.get(tenant)
        if home is None:
            raise ValueError(f"a row's tenant {tenant.decode()!r} is not one of the load's")
        lines.setdefault(home, []).append(id_end[:-4] + tags[home] + b"\t" + rest)
        found_tenants.setdefault(home, set()).add(tenant)
    return {home: (b"\n".join(found) + b"\n", {t.decode() for t in found_tenants[home]})
            for home, found in lines.items()}


class ShardedBulkWriter:
    """``BulkWriter.write`` over the homes of a ``ShardedBulkLoad``: each chunk split by
    home shard, each part written by that shard's writer (opened on first use by
    ``open_writer``) in a transaction of its own."""

    def __init__(self, load: ShardedBulkLoad,
                 open_writer: Callable[[str], BulkWriter]) -> None:
        self.load = load
        self._open_writer = open_writer
        self.writers: dict[str, BulkWriter] = {}

    @property
    def settled(self) -> int:
        return sum(writer.settled for writer in self.writers.values())

    @property
    def retried(self) -> int:
        return sum(writer.retried for writer in self.writers.values())

    def write(self, copy_text: bytes | bytearray | memoryview | Sequence[bytes | memoryview],
              tenants: Iterable[str]) -> int:
        pieces = ([copy_text] if isinstance(copy_text, bytes | bytearray | memoryview)
                  else copy_text)
        del tenants  # the rows tell each part's tenants
        created = 0
        for home, (text, found) in split_by_home(self.load, pieces).items():
            writer = self.writers.get(home)
            if writer is None:
                writer = self.writers[home] = self._open_writer(home)
            created += writer.write(text, tenants=found)
        return created
