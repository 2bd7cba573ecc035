"""The write path, run by each Spark partition (on the executors).

Per partition: one small engine (one Postgres connection, one Valkey client). Per chunk of
``chunk_rows`` rows, one short transaction (``tierq.logic.feed.write_chunk``):

1. admission: the chunk's (queue, tenant) pairs turn cold and register the write as in
   flight (Valkey), so nothing enqueued meanwhile can go warm and jump ahead of these rows;
2. ``COPY`` into a temporary staging table, then one ``INSERT … SELECT … ON CONFLICT DO
   NOTHING`` into ``tierq_tasks`` (a live task with the same key keeps its place);
3. commit, then end the admission.

Ready rows land ``cold`` and delayed ones ``delayed``; each row's place in line (``seq``)
was reserved by the driver in schedule order, so partitions may write in any order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any

from tierq.config import Settings
from tierq.core.ids import uuid7_strings
from tierq.engine import Tierq
from tierq.logic import feed
from tierq.logic.context import Context

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
    queue: str
    max_attempts: int
    first_rank: int
    chunk_rows: int


@dataclass(frozen=True)
class PartitionStats:
    staged: int = 0
    created: int = 0
    ready_tenants: tuple[str, ...] = ()


# Between a record's fields (rank, tenant, run_at, COPY text): validated keys and tenants
# hold no control character, and JSON text escapes them all.
FIELD = "\x1f"


def parse_record(record: str) -> tuple[int, str, int | None, str]:
    """(rank, tenant, run_at in epoch microseconds or None, COPY text) of one record."""
    rank, tenant, run_at, text = record.split(FIELD, 3)
    return int(rank), tenant, int(run_at) if run_at else None, text


def _timestamp(us: int) -> str:
    return (EPOCH + timedelta(microseconds=us)).isoformat()


def copy_lines(rows: Sequence[Any], seqs: Sequence[int], first_rank: int,
               now_us: int) -> tuple[str, set[str], set[str]]:
    """COPY text for rows (rank, tenant, run_at_us, text) where ``text`` is the row's
    tenant, key, priority and payload, already escaped (see ``mapping.COPY_TEXT``).
    Returns it with the tenants that got ready rows, and all tenants."""
    lines: list[str] = []
    ready: set[str] = set()
    tenants: set[str] = set()
    ids = uuid7_strings(len(rows))
    for task_id, (rank, tenant, run_at_us, text) in zip(ids, rows, strict=True):
        if run_at_us is None:
            tail = "cold\t\\N\n"
            ready.add(tenant)
        elif run_at_us > now_us:
            tail = f"delayed\t{_timestamp(run_at_us)}\n"
        else:
            tail = f"cold\t{_timestamp(run_at_us)}\n"
            ready.add(tenant)
        tenants.add(tenant)
        lines.append(f"{task_id}\t{seqs[rank - first_rank]}\t{text}\t{tail}")
    return "".join(lines), ready, tenants


def write_chunk(ctx: Context, conn: Any, job: RoundWrite, seqs: Sequence[int],
                rows: Sequence[Any]) -> PartitionStats:
    now = ctx.now()
    text, ready, tenants = copy_lines(rows, seqs, job.first_rank, int(now * 1_000_000))
    created = feed.write_chunk(ctx, conn, job.queue, text.encode("utf-8"), tenants=tenants,
                               ready_tenants=ready, max_attempts=job.max_attempts, now=now)
    return PartitionStats(staged=len(rows), created=created, ready_tenants=tuple(sorted(ready)))


def write_partition(job: RoundWrite, shared: Any, records: Iterable[str]
                    ) -> Iterator[PartitionStats]:
    """Spark ``mapPartitions`` body over the partition's records (see ``FIELD``): yields
    one PartitionStats. ``shared`` is a broadcast of the round's reserved places in line
    and the ranks to skip (later occurrences of a key inside the round)."""
    values, skip = shared.value
    rows = map(parse_record, records)
    it = rows if not skip else (r for r in rows if r[0] not in skip)
    first = list(islice(it, job.chunk_rows))
    if not first:
        yield PartitionStats()
        return
    staged = created = 0
    ready: set[str] = set()
    with job.stores.engine() as tq, tq.db.connection() as conn:
        feed.prepare_writer(tq.ctx, conn)
        chunk = first
        while chunk:
            stats = write_chunk(tq.ctx, conn, job, values, chunk)
            staged += stats.staged
            created += stats.created
            ready.update(stats.ready_tenants)
            chunk = list(islice(it, job.chunk_rows))
    yield PartitionStats(staged=staged, created=created, ready_tenants=tuple(sorted(ready)))
