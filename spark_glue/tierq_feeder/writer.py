"""The write path, run by each Spark partition of a round (on the executors), through the
engine's bulk API (``Tierq.bulk_writer``; tierq.logic.bulk owns the staging table, the
insert and the admission of the rows).

The JVM hands each partition's rows over as Arrow batches (``mapInArrow``): a column of
finished COPY lines (the staged row, built in Spark SQL: id, place in the load, tenant,
key, priority, payload, run_at), the row's tenant, and for rows that cannot become tasks
the reason and what the rejects output needs. Nothing is done per row in Python: a
chunk's COPY text is the lines' Arrow data buffer as it is, and its tenants are one
``unique`` of a column. Rejected rows come back out of the partition as output rows.

A partition writes its chunks (``chunk_rows`` rows, one short transaction each) on
``connections`` PostgreSQL connections at once, one thread each: a round with fewer Spark
partitions than writers still keeps every writer busy, and never more connections than
``--write-partitions`` are open.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tierq.config import Settings
from tierq.engine import Tierq
from tierq.logic.bulk import BulkLoad

LINE = "__tq_line"  # the staged row as COPY text (null for a rejected row)
# what the writers give back: one "stats" row per partition, one "reject" row per reject
OUT_SCHEMA = ("kind string, staged long, created long, rejected long, source string, "
              "part string, row long, reason string, row_json string")
REJECT_COLUMNS = ("source", "part", "row", "reason", "row_json")


@dataclass(frozen=True)
class StoreConfig:
    """Where the stores are, resolved once on the driver and shipped to executors."""

    database_url: str
    valkey_url: str
    valkey_cluster: bool = False

    def engine(self, pool_size: int = 1) -> Tierq:
        return Tierq(settings=Settings(database_url=self.database_url,
                                       valkey_url=self.valkey_url,
                                       valkey_cluster=self.valkey_cluster,
                                       db_pool_max=pool_size))


@dataclass(frozen=True)
class RoundWrite:
    """What every partition of one round needs to know."""

    stores: StoreConfig
    load: BulkLoad
    chunk_rows: int
    connections: int = 1                  # writers (threads, connections) per partition
    tenant: str | None = None             # the only tenant of the round, when known
    tenant_column: str = ""               # else: the column holding each row's tenant
    reason_column: str = "reason"         # the reject reason (null: the row maps)


@dataclass
class Chunk:
    pieces: list[bytes]
    tenants: set[str]


def line_bytes(column: Any) -> bytes:
    """The concatenated values of an Arrow string column without nulls: its data buffer
    between the first and the last offset (the values are whole COPY lines)."""
    buffers = column.buffers()
    offsets = memoryview(buffers[1]).cast("q" if column.type.equals(_large_string())
                                          else "i")
    first, last = offsets[column.offset], offsets[column.offset + len(column)]
    return bytes(memoryview(buffers[2])[first:last]) if last > first else b""


def _large_string() -> Any:
    import pyarrow as pa

    return pa.large_string()


class ChunkWriters:
    """``connections`` bulk writers, one thread and one engine each, taking chunks from a
    short queue (at most one waiting per writer: memory stays a few chunks)."""

    def __init__(self, job: RoundWrite) -> None:
        self.job = job
        self.created = 0
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._queue: queue.Queue[Chunk | None] = queue.Queue(maxsize=job.connections)
        self._threads = [threading.Thread(target=self._run, daemon=True,
                                          name=f"tierq-bulk-writer-{i}")
                         for i in range(job.connections)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        try:
            with self.job.stores.engine() as tq, tq.bulk_writer(self.job.load) as writer:
                while True:
                    chunk = self._queue.get()
                    if chunk is None:
                        return
                    if self.errors:
                        continue  # another writer failed: drain, write nothing more
                    created = writer.write(chunk.pieces, tenants=chunk.tenants)
                    with self._lock:
                        self.created += created
        except BaseException as exc:
            with self._lock:
                self.errors.append(exc)
            while self._queue.get() is not None:  # keep the producer from blocking
                pass

    def submit(self, chunk: Chunk) -> None:
        if self.errors:
            raise self.errors[0]
        self._queue.put(chunk)

    def finish(self) -> int:
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        if self.errors:
            raise self.errors[0]
        return self.created


def _stats(staged: int, created: int, rejected: int) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(
        {"kind": ["stats"], "staged": [staged], "created": [created], "rejected": [rejected],
         "source": [None],
         "part": [None], "row": [None], "reason": [None], "row_json": [None]},
        schema=_out_schema())


def _out_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("kind", pa.string()), ("staged", pa.int64()), ("created", pa.int64()),
                      ("rejected", pa.int64()), ("source", pa.string()), ("part", pa.string()),
                      ("row", pa.int64()),
                      ("reason", pa.string()), ("row_json", pa.string())])


def _rejects(batch: Any) -> Any:
    import pyarrow as pa

    n = batch.num_rows
    return pa.RecordBatch.from_arrays(
        [pa.array(["reject"] * n, pa.string()), pa.nulls(n, pa.int64()),
         pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64()),
         *[batch.column(name).cast(field.type) for name, field in
           zip(REJECT_COLUMNS, list(_out_schema())[4:], strict=True)]],
        schema=_out_schema())


def write_partition(job: RoundWrite, batches: Iterable[Any]) -> Iterator[Any]:
    """``mapInArrow`` body: write the partition's rows, yield its rejects and one stats
    row (rows staged, tasks created)."""
    import pyarrow.compute as pc

    staged = rejected_rows = 0
    writers: ChunkWriters | None = None
    chunk = Chunk([], set())
    rows_in_chunk = 0
    try:
        for batch in batches:
            reasons = batch.column(job.reason_column)
            if reasons.null_count < batch.num_rows:
                rejected = pc.is_valid(reasons)
                rejects = batch.filter(rejected)
                rejected_rows += rejects.num_rows
                yield _rejects(rejects)
                batch = batch.filter(pc.invert(rejected))
            staged += batch.num_rows
            while batch.num_rows:
                piece = batch.slice(0, job.chunk_rows - rows_in_chunk)
                batch = batch.slice(piece.num_rows)
                chunk.pieces.append(line_bytes(piece.column(LINE)))
                if job.tenant is not None:
                    chunk.tenants.add(job.tenant)
                else:
                    chunk.tenants.update(
                        pc.unique(piece.column(job.tenant_column)).to_pylist())
                rows_in_chunk += piece.num_rows
                if rows_in_chunk >= job.chunk_rows:
                    writers = writers or ChunkWriters(job)
                    writers.submit(chunk)
                    chunk, rows_in_chunk = Chunk([], set()), 0
        if rows_in_chunk:
            writers = writers or ChunkWriters(job)
            writers.submit(chunk)
        created = writers.finish() if writers is not None else 0
        writers = None
    finally:
        if writers is not None:  # failed midway: stop the threads, keep the first error
            with contextlib.suppress(BaseException):  # the error in flight is the one to raise
                writers.finish()
    yield _stats(staged, created, rejected_rows)
