"""The write path, run by each Spark partition of a round (on the executors), through the
engine's bulk API (``Tierq.bulk_writer``; tierq.logic.bulk owns the staging table, the
insert and the admission of the rows).

The JVM hands each partition's rows over as Arrow batches (``mapInArrow``): a column of
finished COPY lines (the staged row, built in Spark SQL: id, place in the load, tenant,
key, priority, payload, run_at), the row's tenant, and for a row that cannot become a task
its reject reason. Nothing is done per row in Python: a chunk's COPY text is the lines'
Arrow data buffer as it is, and its tenants are one ``unique`` of a column. A rejected
row is counted and dropped: the partition's one output row is its stats (the driver
writes the rejects' file from the source rows, only in a round that has rejects).

A partition writes its chunks on its share of the round's ``--write-partitions``
PostgreSQL connections at once, one thread each. A chunk is ``chunk_rows`` rows in one short
transaction; a partition's first ones are smaller, so that writing starts soon after its
first rows arrive. A partition's share is ``connections``, one more in the first
``spare_connections`` partitions. So a round read by fewer Spark tasks than there are
writers still uses them all, as long as its partitions' rows are as many, and never are
more connections open.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tierq.config import Settings
from tierq.contract import Deployment
from tierq.dal.shards import parse_shard_urls
from tierq.engine import Tierq
from tierq.logic.bulk import BulkLoad, ShardedBulkLoad
from tierq.sharded import ShardedTierq

if TYPE_CHECKING:  # imported where used: pyarrow is needed on the executors only
    import pyarrow as pa

LINE = "__tq_line"  # the staged row as COPY text (null for a rejected row)
# what a partition gives back: one stats row. Its times, in seconds: ``input_s`` waiting
# for the next Arrow batch (Spark reading and mapping the rows), ``blocked_s`` waiting for
# a free writer, ``write_s`` the writers' time in their transactions (summed over
# connections); ``began_at``/``ended_at`` when the partition's Python side started and
# ended (epoch seconds)
STATS_COLUMNS = ("staged", "created", "rejected", "settled", "retried", "input_s",
                 "blocked_s", "write_s", "began_at", "ended_at")
_COUNTS = ("staged", "created", "rejected", "settled", "retried")
OUT_SCHEMA = ", ".join(f"{name} {'long' if name in _COUNTS else 'double'}"
                       for name in STATS_COLUMNS)


@dataclass(frozen=True)
class StoreConfig:
    """Where the stores are, resolved once on the driver and shipped to executors."""

    database_url: str
    valkey_url: str
    valkey_cluster: bool = False
    # TIERQ_SHARD_URLS: with more than one database, each pair's rows go to its home shard
    shard_urls: str = ""
    # the cache's user authenticated with IAM tokens (on AWS; tierq.dal.valkey_auth): each
    # executor signs its own with the job's role. Empty: none (a password is in valkey_url).
    valkey_iam_user: str = ""
    valkey_cache_name: str = ""
    valkey_iam_region: str = ""
    # the tenant's warm share (Settings.tenant_warm_bound): a bulk warm-up promotes within it
    warm_capacity_bytes: int = 0
    tenant_warm_max_bytes: int | None = None

    def settings(self, pool_size: int = 1) -> Settings:
        """The settings an engine over these stores runs with."""
        return Settings(database_url=self.database_url, valkey_url=self.valkey_url,
                        valkey_cluster=self.valkey_cluster, db_pool_max=pool_size,
                        valkey_iam_user=self.valkey_iam_user or None,
                        valkey_cache_name=self.valkey_cache_name or None,
                        valkey_iam_region=self.valkey_iam_region or None,
                        warm_capacity_bytes=self.warm_capacity_bytes,
                        tenant_warm_max_bytes=self.tenant_warm_max_bytes)

    def engine(self, pool_size: int = 1) -> Deployment:
        settings = self.settings(pool_size)
        specs = parse_shard_urls(self.shard_urls) if self.shard_urls.strip() else []
        if len(specs) > 1:
            return ShardedTierq(specs, settings=settings)
        if specs:  # one shard named: that database, exactly as without shards
            return Tierq(settings=settings.replace(database_url=specs[0].url))
        return Tierq(settings=settings)


@dataclass(frozen=True)
class RoundWrite:
    """What every partition of one round needs to know."""

    stores: StoreConfig
    load: BulkLoad | ShardedBulkLoad
    chunk_rows: int
    connections: int = 1                  # writers (threads, connections) per partition
    spare_connections: int = 0            # partitions 0 .. this-1 take one more
    tenant: str | None = None             # the only tenant of the round, when known
    tenant_column: str = ""               # else: the column holding each row's tenant
    reason_column: str = "reason"         # the reject reason (null: the row maps)

    def connections_of(self, partition: int) -> int:
        """The connections partition ``partition`` of the round writes on."""
        return self.connections + (1 if partition < self.spare_connections else 0)


@dataclass
class Chunk:
    pieces: list[bytes]
    tenants: set[str]


def line_bytes(column: pa.Array) -> bytes:
    """The concatenated values of an Arrow string column without nulls: its data buffer
    between the first and the last offset (the values are whole COPY lines)."""
    buffers = column.buffers()
    offsets = memoryview(buffers[1]).cast("q" if column.type.equals(_large_string())
                                          else "i")
    first, last = offsets[column.offset], offsets[column.offset + len(column)]
    return bytes(memoryview(buffers[2])[first:last]) if last > first else b""


def _large_string() -> pa.DataType:
    import pyarrow as pa

    return pa.large_string()


class ChunkWriters:
    """``connections`` bulk writers, one thread and one engine each, taking chunks from a
    short queue (at most one waiting per writer: memory stays a few chunks)."""

    def __init__(self, job: RoundWrite, connections: int) -> None:
        self.job = job
        self.created = self.settled = self.retried = 0
        self.write_seconds = 0.0
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._queue: queue.Queue[Chunk | None] = queue.Queue(maxsize=connections)
        self._threads = [threading.Thread(target=self._run, daemon=True,
                                          name=f"tierq-bulk-writer-{i}")
                         for i in range(connections)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        try:
            with (self.job.stores.engine() as tq,
                  tq.bulk_writer(self.job.load) as writer):
                while True:
                    chunk = self._queue.get()
                    if chunk is None:
                        break
                    if self.errors:
                        continue  # another writer failed: drain, write nothing more
                    began = time.monotonic()
                    created = writer.write(chunk.pieces, tenants=chunk.tenants)
                    with self._lock:
                        self.created += created
                        self.write_seconds += time.monotonic() - began
                with self._lock:
                    self.settled += writer.settled
                    self.retried += writer.retried
        except BaseException as exc:
            with self._lock:
                self.errors.append(exc)
            while self._queue.get() is not None:  # keep the producer from blocking
                pass

    def submit(self, chunk: Chunk) -> None:
        if self.errors:
            raise self.errors[0]
        self._queue.put(chunk)

    def finish(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        if self.errors:
            raise self.errors[0]


@dataclass
class PartitionStats:
    staged: int = 0
    created: int = 0
    rejected: int = 0
    settled: int = 0
    retried: int = 0
    input_s: float = 0.0
    blocked_s: float = 0.0
    write_s: float = 0.0
    began_at: float = 0.0
    ended_at: float = 0.0


def _stats(stats: PartitionStats) -> pa.RecordBatch:
    import pyarrow as pa

    schema = pa.schema([(name, pa.int64() if name in _COUNTS else pa.float64())
                        for name in STATS_COLUMNS])
    return pa.RecordBatch.from_pydict({name: [getattr(stats, name)] for name in STATS_COLUMNS},
                                      schema=schema)


def _partition() -> int:
    """The running Spark partition's number (0 outside a Spark task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def warm_up(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of a job that only starts Python workers: unpickling it imports
    this module (the engine with it), and it imports what ``write_partition`` imports."""
    import pyarrow.compute  # noqa: F401

    for _ in batches:
        pass
    yield from ()


def write_partition(job: RoundWrite,
                    batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: write the partition's rows (its rejects counted and left out),
    yield one stats row (rows staged and rejected, tasks created, where the time went)."""
    import pyarrow.compute as pc

    stats = PartitionStats(began_at=time.time())
    connections = job.connections_of(_partition())
    writers: ChunkWriters | None = None
    chunk = Chunk([], set())
    rows_in_chunk = 0
    # the first chunks are smaller, so that a connection starts writing soon after the
    # partition's first rows arrive: an eighth of ``chunk_rows``, doubling up to it
    chunk_limit = max(1, job.chunk_rows // 8)
    clock = time.monotonic

    def submit(chunk: Chunk) -> None:
        nonlocal writers
        writers = writers or ChunkWriters(job, connections)
        began = clock()
        writers.submit(chunk)
        stats.blocked_s += clock() - began

    incoming = iter(batches)
    try:
        while True:
            began = clock()
            batch = next(incoming, None)
            stats.input_s += clock() - began
            if batch is None:
                break
            reasons = batch.column(job.reason_column)
            if reasons.null_count < batch.num_rows:
                stats.rejected += batch.num_rows - reasons.null_count
                batch = batch.filter(pc.is_null(reasons))
            stats.staged += batch.num_rows
            while batch.num_rows:
                piece = batch.slice(0, chunk_limit - rows_in_chunk)
                batch = batch.slice(piece.num_rows)
                chunk.pieces.append(line_bytes(piece.column(LINE)))
                if job.tenant is not None:
                    chunk.tenants.add(job.tenant)
                else:
                    chunk.tenants.update(
                        pc.unique(piece.column(job.tenant_column)).to_pylist())
                rows_in_chunk += piece.num_rows
                if rows_in_chunk >= chunk_limit:
                    submit(chunk)
                    chunk, rows_in_chunk = Chunk([], set()), 0
                    chunk_limit = min(job.chunk_rows, 2 * chunk_limit)
        if rows_in_chunk:
            submit(chunk)
        if writers is not None:
            began = clock()
            done, writers = writers, None
            done.finish()
            stats.blocked_s += clock() - began
            stats.created, stats.settled, stats.retried = (done.created, done.settled,
                                                           done.retried)
            stats.write_s = done.write_seconds
    finally:
        if writers is not None:  # failed midway: stop the threads, keep the first error
            with contextlib.suppress(BaseException):  # the error in flight is the one to raise
                writers.finish()
    stats.ended_at = time.time()
    yield _stats(stats)
