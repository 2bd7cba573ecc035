"""One run of the feeder (docs/architecture.md §11).

1. Read every source once and place each remaining row (``sources``); map columns to task
   fields, rejecting what cannot be mapped (``mapping``).
2. Merge the sources into one schedule by the strategy (``schedule``): every row gets a
   rank. Within the run, a key's first occurrence wins; later ones in the same round are
   ignored without moving anything.
3. Rounds: read the queue's backlog, write at most ``max_backlog - backlog`` rows (and at
   most ``batch_rows``), the next ranks in line, through the partition writers
   (``writer``); record where each source stopped. Stop when the backlog is full (after
   waiting up to ``max_wait_seconds`` for room) or the sources are drained.
4. Warm the first batch of each (queue, tenant) written to (the scheduled cold -> warm mover
   would do it anyway), report created / ignored / deferred / rejected.
"""

from __future__ import annotations

import atexit
import bisect
import logging
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial, reduce
from pathlib import Path

from pyspark import StorageLevel
from pyspark.rdd import RDD
from pyspark.serializers import UTF8Deserializer
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

import tierq_feeder
from tierq.engine import Tierq
from tierq.logic import feed
from tierq_feeder.backlog import queue_backlog
from tierq_feeder.config import FeedConfig
from tierq_feeder.mapping import (
    COPY_TEXT,
    KEY,
    REASON,
    ROW_JSON,
    RUN_AT_US,
    TENANT,
    check_columns,
    map_tasks,
)
from tierq_feeder.metrics import FeedResult, MetricsSink, Progress
from tierq_feeder.offsets import OffsetRow, feed_lock, load_offsets, save_offsets
from tierq_feeder.schedule import Schedule, advance
from tierq_feeder.sources import (
    CURSOR,
    PART,
    ROW,
    J,
    Loader,
    PositionedSource,
    SparkLoader,
    position,
)
from tierq_feeder.writer import FIELD, PartitionStats, RoundWrite, StoreConfig, write_partition

log = logging.getLogger("tierq.feeder")

RUN_CONF = {"spark.sql.session.timeZone": "UTC",
            "spark.sql.inMemoryColumnarStorage.compressed": "false"}
SOURCE = "__tq_source"
RANK = "__tq_rank"


def rank_column(schedule: Schedule, source: int, j: Column) -> Column:
    """Spark form of ``Schedule.rank`` for the rows of one source."""
    counts = schedule.counts
    if schedule.preferred is None:
        return _fair_column(counts, source, j)
    if source == schedule.preferred:
        return j
    others = [n for i, n in enumerate(counts) if i != schedule.preferred]
    position_ = source if source < schedule.preferred else source - 1
    return F.lit(counts[schedule.preferred]).cast("long") + _fair_column(others, position_, j)


def _fair_column(counts: Sequence[int], source: int, j: Column) -> Column:
    terms = [F.least(F.lit(n).cast("long"), j) for n in counts]
    terms += [(F.lit(n).cast("long") > j).cast("long") for n in counts[:source]]
    return reduce(lambda a, b: a + b, terms, F.lit(0).cast("long"))


def strings(frame: DataFrame) -> RDD[str]:
    """A one-column string DataFrame as Python strings, decoded straight from UTF-8 (the
    way ``DataFrame.toJSON`` hands its strings over): no Row object per row."""
    jvm = frame.sparkSession.sparkContext._jvm
    assert jvm is not None
    typed = getattr(frame._jdf, "as")(jvm.org.apache.spark.sql.Encoders.STRING())
    return RDD(typed.toJavaRDD(), frame.sparkSession.sparkContext, UTF8Deserializer())


_shipped: set[str] = set()


def ship_package(spark: SparkSession) -> None:
    """Make ``tierq_feeder`` importable on the executors when it runs from a checkout (on
    Glue it arrives as a zip through ``--extra-py-files``; the tierq wheel is installed on
    every worker)."""
    folder = Path(tierq_feeder.__file__).parent
    sc = spark.sparkContext
    if not folder.is_dir() or sc.applicationId in _shipped:
        return
    scratch = tempfile.mkdtemp(prefix="tierq-feeder-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    target = Path(scratch) / "tierq_feeder.zip"
    with zipfile.ZipFile(target, "w") as bundle:
        for path in sorted(folder.rglob("*.py")):
            bundle.write(path, Path("tierq_feeder") / path.relative_to(folder))
    sc.addPyFile(str(target))
    _shipped.add(sc.applicationId)


def _line(positioned: Sequence[PositionedSource], schedule: Schedule, config: FeedConfig,
          limit: int, max_payload_chars: int) -> DataFrame:
    """Every row this run may feed (ranks below ``limit``), mapped and ranked; held in
    memory (and disk) while the rounds take their slices of it."""
    frames = []
    now = time.time()
    for index, source in enumerate(positioned):
        if source.frame is None or schedule.counts[index] == 0:
            continue
        mapped = map_tasks(source.frame, source.columns, config.mapping,
                           max_payload_chars=max_payload_chars, now_seconds=now)
        rank = rank_column(schedule, index, F.col(J))
        frames.append(
            mapped.where(F.col(J) < schedule.counts[index])  # rows that appeared meanwhile wait
            .select(F.lit(source.spec.name).alias(SOURCE), PART, ROW, J, CURSOR,
                    rank.alias(RANK), KEY, TENANT, RUN_AT_US, REASON, ROW_JSON, COPY_TEXT)
            .where(F.col(RANK) < limit)
        )
    line = reduce(lambda a, b: a.unionByName(b), frames)
    return line.persist(StorageLevel.MEMORY_AND_DISK)


@dataclass
class LineSummary:
    """What the driver needs to know about the line before the rounds: which tenants it
    touches between which ranks, which ranks are rejects, and which rows repeat a key seen
    earlier in the line (rank -> rank of the previous occurrence)."""

    tenant_spans: dict[str, tuple[int, int]]
    reject_ranks: list[int]
    repeats: dict[int, int]

    def skipped_in(self, start: int, end: int) -> frozenset[int]:
        """Ranks in [start, end) whose key occurred earlier in the same round: ignored
        (the first occurrence wins; nothing moves)."""
        return frozenset(rank for rank, previous in self.repeats.items()
                         if start <= rank < end and previous >= start)


def summarize(spark: SparkSession, line: DataFrame) -> LineSummary:
    valid = line.where(F.col(REASON).isNull())
    spans = {r[TENANT]: (r["lo"], r["hi"]) for r in valid.groupBy(TENANT)
             .agg(F.min(RANK).alias("lo"), F.max(RANK).alias("hi")).collect()}
    rejects = sorted(r[0] for r in line.where(F.col(REASON).isNotNull()).select(RANK).collect())
    # keys that may occur more than once: a 64-bit hash of (tenant, key) seen twice (a narrow
    # aggregation, usually empty); then the exact keys of those rows, on the driver
    hashed = valid.select(F.xxhash64(TENANT, KEY).alias("__tq_hash"), TENANT, KEY, RANK)
    candidates = [r[0] for r in hashed.groupBy("__tq_hash").count()
                  .where(F.col("count") > 1).select("__tq_hash").collect()]
    repeats: dict[int, int] = {}
    if candidates:
        wanted = spark.createDataFrame([(h,) for h in candidates], "__tq_hash long")
        occurrences: dict[tuple[str, str], list[int]] = {}
        for r in hashed.join(F.broadcast(wanted), on="__tq_hash").select(TENANT, KEY, RANK) \
                .collect():
            occurrences.setdefault((r[TENANT], r[KEY]), []).append(r[RANK])
        for ranks in occurrences.values():
            ranks.sort()
            repeats.update(zip(ranks[1:], ranks[:-1], strict=True))
    return LineSummary(spans, rejects, repeats)


def _offset_rows(line: DataFrame, positioned: Sequence[PositionedSource],
                 consumed: Sequence[int], saved: dict[tuple[str, str], int]) -> list[OffsetRow]:
    """Progress of each source after its first ``consumed[i]`` remaining rows; only what
    changed since the last save."""
    rows: list[OffsetRow] = []
    for index, source in enumerate(positioned):
        name = source.spec.name
        if source.spec.is_jdbc:
            done = source.parts[0].done + consumed[index] if source.parts else 0
            if consumed[index] == 0 or saved.get((name, "")) == done:
                continue
            last = (line.where((F.col(SOURCE) == name) & (F.col(J) == consumed[index] - 1))
                    .select(CURSOR).first())
            if last is None:
                raise RuntimeError(f"source {name}: row {consumed[index] - 1} vanished")
            rows.append(OffsetRow(name, "", done, last[0]))
            saved[(name, "")] = done
            continue
        for part in advance(source.parts, consumed[index]):
            if saved.get((name, part.part), -1) != part.done and part.done > 0:
                rows.append(OffsetRow(name, part.part, part.done))
                saved[(name, part.part)] = part.done
    return rows


def _count_in(sorted_values: Sequence[int], start: int, end: int) -> int:
    return bisect.bisect_left(sorted_values, end) - bisect.bisect_left(sorted_values, start)


def run_feed(spark: SparkSession, config: FeedConfig, stores: StoreConfig, *,
             loader: Loader | None = None, rejects_path: str | None = None,
             metrics: Sequence[MetricsSink] = (), engine: Tierq | None = None,
             sleep: Callable[[float], None] = time.sleep) -> FeedResult:
    """Run the feed once; returns its counts. ``engine`` (driver side) defaults to one
    built from ``stores``."""
    started = time.monotonic()
    ship_package(spark)
    # the run's line is held once and read by every round: keep it in the cache as is
    # (compressing a million payloads costs more CPU than the whole mapping)
    session_conf = {name: spark.conf.get(name, None) for name in RUN_CONF}
    for name, value in RUN_CONF.items():
        spark.conf.set(name, value)
    rejects = rejects_path or config.rejects_path or os.path.abspath(
        os.path.join("tierq-rejects", config.feed_name))
    result = FeedResult(queue=config.queue, feed=config.feed_name, rejects_path=rejects)
    tq = engine or stores.engine(pool_size=4)
    try:
        with feed_lock(tq.ctx, config.feed_name):
            _run(spark, config, stores, loader or SparkLoader(), tq, result, sleep, started)
        if config.warm_after:
            promoted = feed.warm_up(tq.ctx, config.queue, result.ready_tenants)
            if result.ready_tenants:
                log.info("warmed %d task(s) across %d tenant(s)", promoted,
                         len(result.ready_tenants))
    finally:
        if engine is None:
            tq.close()
        for name, previous in session_conf.items():
            if previous is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, previous)
    result.seconds = time.monotonic() - started
    log.info("%s", result.summary())
    for sink in metrics:
        sink.emit(result)
    return result


def _run(spark: SparkSession, config: FeedConfig, stores: StoreConfig, loader: Loader,
         tq: Tierq, result: FeedResult, sleep: Callable[[float], None],
         started: float) -> None:
    ctx = tq.ctx
    feed, queue = config.feed_name, config.queue
    offsets = load_offsets(ctx, feed)
    positioned: list[PositionedSource] = []
    line: DataFrame | None = None
    try:
        for spec in config.sources:
            raw = loader.load(spark, spec, offsets)
            if raw is not None:
                check_columns(spec.name, raw.columns, config.mapping)
            positioned.append(position(spark, spec, raw, offsets))
        names = config.source_names()
        preferred = (names.index(config.strategy.preferred)
                     if config.strategy.preferred is not None else None)
        schedule = Schedule(tuple(p.remaining for p in positioned), preferred)
        limit = min(schedule.total, config.max_rows or schedule.total)
        log.info("feed %r -> queue %r, strategy %s: %s (read in %.1f s)", feed, queue,
                 config.strategy,
                 ", ".join(f"{p.spec.name}={p.remaining:,} rows left "
                           f"({sum(1 for x in p.parts if x.remaining)} part(s))"
                           for p in positioned), time.monotonic() - started)
        result.deferred = schedule.total
        if limit == 0:
            result.stopped_by = "nothing_to_do"
            return

        backlog = queue_backlog(ctx, queue, cap=config.max_backlog)
        if backlog.room(config.max_backlog) == 0 and config.max_wait_seconds == 0:
            log.info("backlog %s is at the limit %d: nothing written", backlog,
                     config.max_backlog)
            result.stopped_by = "backlog"
            return

        line = _line(positioned, schedule, config, limit, ctx.settings.max_payload_bytes)
        summary = summarize(spark, line)
        for source in positioned:  # the line holds what the rounds need now
            source.unpersist()
        log.info("%s rows mapped, ranked and checked for repeated keys (%d repeat(s), "
                 "%d reject(s); %.1f s so far)", f"{limit:,}", len(summary.repeats),
                 len(summary.reject_ranks), time.monotonic() - started)

        max_attempts = ctx.queue_settings.get(queue).max_attempts
        writers = config.write_partitions or spark.sparkContext.defaultParallelism
        progress = Progress(limit)
        saved: dict[tuple[str, str], int] = {
            (source, part): o.rows_done for (source, part), o in offsets.items()}
        start = 0
        waited = 0.0
        while start < limit:
            backlog = queue_backlog(ctx, queue, cap=config.max_backlog)
            room = backlog.room(config.max_backlog)
            if room == 0:
                if waited < config.max_wait_seconds:
                    pause = min(config.poll_seconds or 1.0, config.max_wait_seconds - waited)
                    log.info("backlog %s is at the limit %d: waiting %.1f s for room",
                             backlog, config.max_backlog, pause)
                    sleep(pause)
                    waited += pause
                    continue
                result.stopped_by = "backlog"
                break
            waited = 0.0
            end = min(limit, start + min(room, config.batch_rows))
            skipped = summary.skipped_in(start, end)
            stats = _write_round(spark, tq, line, stores, queue, max_attempts, start, end,
                                 writers, config.chunk_rows, summary.tenant_spans, skipped)
            staged = sum(s.staged for s in stats)
            created = sum(s.created for s in stats)
            dups = len(skipped)
            rejected = _count_in(summary.reject_ranks, start, end)
            if rejected:
                _write_rejects(line, start, end, feed, result.rejects_path or "")
            result.created += created
            result.ignored += staged - created + dups
            result.rejected += rejected
            for s in stats:
                result.ready_tenants.update(s.ready_tenants)
            save_offsets(ctx, feed, _offset_rows(line, positioned,
                                                   schedule.consumed_before(end), saved))
            result.rounds += 1
            result.consumed = end
            result.deferred = schedule.total - end
            elapsed = time.monotonic() - started
            progress.round(result.rounds, end, str(backlog), room, created,
                           staged - created + dups, rejected,
                           end / elapsed if elapsed > 0 else 0.0)
            start = end
        else:
            result.stopped_by = "max_rows" if limit < schedule.total else "drained"
    finally:
        if line is not None:
            line.unpersist()
        for source in positioned:
            source.unpersist()


def _write_round(spark: SparkSession, tq: Tierq, line: DataFrame, stores: StoreConfig,
                 queue: str, max_attempts: int, start: int, end: int, partitions: int,
                 chunk_rows: int, tenant_spans: dict[str, tuple[int, int]],
                 skipped: frozenset[int]) -> list[PartitionStats]:
    """Write ranks [start, end): reserve their places in line, then let every partition
    COPY its share. The (queue, tenant) pairs of the round stay cold from before the places
    are taken until the last partition has committed."""
    tenants = [tenant for tenant, (lo, hi) in tenant_spans.items() if lo < end and hi >= start]
    with feed.admitted_round(tq.ctx, queue, tenants, end - start) as seqs:
        shared = spark.sparkContext.broadcast((seqs, skipped))
        try:
            record = F.concat_ws(FIELD, F.col(RANK).cast("string"), F.col(TENANT),
                                 F.coalesce(F.col(RUN_AT_US).cast("string"), F.lit("")),
                                 F.col(COPY_TEXT))
            rows = (line.where((F.col(RANK) >= start) & (F.col(RANK) < end)
                               & F.col(REASON).isNull())
                    .select(record).coalesce(partitions))
            job = RoundWrite(stores=stores, queue=queue, max_attempts=max_attempts,
                             first_rank=start, chunk_rows=chunk_rows)
            return strings(rows).mapPartitions(partial(write_partition, job, shared)).collect()
        finally:
            shared.destroy()


def _write_rejects(line: DataFrame, start: int, end: int, feed: str, path: str) -> None:
    (line.where((F.col(RANK) >= start) & (F.col(RANK) < end) & F.col(REASON).isNotNull())
     .select(F.lit(feed).alias("feed"), F.col(SOURCE).alias("source"), F.col(PART).alias("part"),
             F.col(ROW).alias("row"), F.col(REASON).alias("reason"),
             F.col(ROW_JSON).alias("row_json"), F.current_timestamp().alias("rejected_at"))
     .coalesce(1).write.mode("append").json(path))

