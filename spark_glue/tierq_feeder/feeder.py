"""One run of the feeder (docs/architecture.md §11).

1. Read every source once and place each remaining row (``sources``): its source ordinal
   ``j``. Parquet sources are not held: each round reads again only the files its rows are
   in; CSV, JSON and JDBC sources are held (memory and disk) while the run lasts.
2. The strategy merges the sources into one line (``schedule``): every row's rank is a
   closed formula of (source, j), so a round — ranks [start, end) — is, per source, one
   range of j, computed by the driver.
3. Rounds: look at the queue's backlog, take at most ``max_backlog - backlog`` rows (and
   at most ``batch_rows``), the next ranks in line. The backlog is counted before the
   first round, whenever it leaves less room than a round wants, and otherwise once the
   counts would take over a twentieth of the time or 30 s have passed; in between it is
   the last count plus what the run created (``backlog.BacklogGauge``). The engine's bulk path
   (``Tierq.bulk_load``) admits the round (its tenants: read in Spark SQL when a tenant
   column is mapped) and reserves its places; every partition maps its rows to COPY lines
   in the JVM and hands them to ``writer`` as Arrow batches. A key repeated inside the
   round is settled in PostgreSQL by the bulk path: the first occurrence wins, later ones
   are ignored without moving anything. Where each source stopped is recorded after the
   round. Stop when the backlog is full (after waiting up to ``max_wait_seconds`` for
   room) or the sources are drained. The executors' first Python workers are started
   while the sources are read.
4. Warm the first batch of each (queue, tenant) written to (the scheduled cold -> warm mover
   would do it anyway), report created / ignored / deferred / rejected.

Nothing the size of the data reaches the driver: it sees counts, tenants, and per round a
number per 512 rows (the reserved blocks of places in line).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial, reduce
from pathlib import Path

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

import tierq_feeder
from tierq.contract import Deployment
from tierq.logic.context import Context
from tierq.models.names import DEFAULT_TENANT, NAME_PATTERN
from tierq_feeder.backlog import Backlog, BacklogGauge, queue_backlog
from tierq_feeder.config import FeedConfig
from tierq_feeder.mapping import (
    KEY,
    PAYLOAD,
    PRIORITY,
    REASON,
    ROW_JSON,
    RUN_AT_US,
    TENANT,
    check_columns,
    copy_fields,
    map_tasks,
    tenant_of,
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
    numbers_row,
    position,
)
from tierq_feeder.writer import (
    LINE,
    OUT_SCHEMA,
    STATS_COLUMNS,
    RoundWrite,
    StoreConfig,
    warm_up,
    write_partition,
)

log = logging.getLogger("tierq.feeder")

RUN_CONF = {"spark.sql.session.timeZone": "UTC",
            # held CSV/JSON/JDBC sources stay as they are: compressing costs more CPU
            "spark.sql.inMemoryColumnarStorage.compressed": "false",
            # a round has no shuffle to adapt; adaptive execution would plan its query
            # again after each small broadcast table (sources.numbers_row)
            "spark.sql.adaptive.enabled": "false",
            # the scans of a round's files generate the same code: without the stage's
            # number in its class name, Spark compiles it (and the JVM optimises it) once
            "spark.sql.codegen.useIdInClassName": "false"}
SOURCE = "__tq_source"
RANK = "__tq_rank"
_START, _ID_MS = "__tq_start", "__tq_id_ms"  # a round's first rank, its load's id_ms
_TENANT_NAME = re.compile(NAME_PATTERN)


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


def load_id_column(id_ms: Column, tail: str, place: Column) -> Column:
    """``tierq.logic.bulk.load_id`` of each row's place in the load, in Spark SQL (one
    ``hex`` of a long: PostgreSQL reads the digits in either case)."""
    high = (F.shiftleft(id_ms + F.shiftright(place, 12), 16)
            + F.lit(0x7000) + place.bitwiseAND(0xFFF))
    return F.concat(F.lpad(F.hex(high), 16, "0"), F.lit(tail))


_shipped: set[str] = set()
_warmed: set[str] = set()


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


def start_python_workers(spark: SparkSession, workers: int) -> threading.Thread | None:
    """Start ``workers`` Python workers on the executors, in a thread, while the driver
    reads the sources: the first Python task of a Spark application waits seconds for its
    worker (a process, pyspark, pyarrow, the engine's modules); the first round's
    partitions then find them running (``spark.python.worker.reuse``, on by default). Once
    per application."""
    sc = spark.sparkContext
    if sc.applicationId in _warmed:
        return None
    _warmed.add(sc.applicationId)

    def run() -> None:
        try:
            spark.range(0, workers, 1, workers).mapInArrow(
                warm_up, "id long").collect()
        except Exception:  # the rounds start their workers themselves
            log.warning("starting the Python workers ahead failed", exc_info=True)

    thread = threading.Thread(target=run, name="tierq-feeder-warm-up", daemon=True)
    thread.start()
    return thread


def _offset_rows(positioned: Sequence[PositionedSource], consumed: Sequence[int],
                 saved: dict[tuple[str, str], int]) -> list[OffsetRow]:
    """Progress of each source after its first ``consumed[i]`` remaining rows; only what
    changed since the last save."""
    rows: list[OffsetRow] = []
    for index, source in enumerate(positioned):
        name = source.spec.name
        if source.spec.is_jdbc:
            done = source.parts[0].done + consumed[index] if source.parts else 0
            if consumed[index] == 0 or saved.get((name, "")) == done or source.frame is None:
                continue
            last = (source.frame.where(F.col(J) == consumed[index] - 1)
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


def run_feed(spark: SparkSession, config: FeedConfig, stores: StoreConfig, *,
             loader: Loader | None = None, rejects_path: str | None = None,
             metrics: Sequence[MetricsSink] = (), engine: Deployment | None = None,
             sleep: Callable[[float], None] = time.sleep) -> FeedResult:
    """Run the feed once; returns its counts. ``engine`` (driver side) defaults to one
    built from ``stores``."""
    started = time.monotonic()
    ship_package(spark)
    run_conf = {**RUN_CONF,
                # the round's small aggregations: one shuffle partition per core
                "spark.sql.shuffle.partitions": str(spark.sparkContext.defaultParallelism)}
    session_conf = {name: spark.conf.get(name, None) for name in run_conf}
    for name, value in run_conf.items():
        spark.conf.set(name, value)
    rejects = rejects_path or config.rejects_path or os.path.abspath(
        os.path.join("tierq-rejects", config.feed_name))
    result = FeedResult(queue=config.queue, feed=config.feed_name, rejects_path=rejects)
    tq = engine or stores.engine(pool_size=4)
    try:
        with feed_lock(_contexts(tq)[0], config.feed_name):
            _run(spark, config, stores, loader or SparkLoader(), tq, result, sleep, started)
        if config.warm_after and result.ready_tenants:
            promoted = tq.bulk_warm_up(config.queue, result.ready_tenants)
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


@dataclass(frozen=True)
class Line:
    """The sources merged by the strategy: any slice of ranks as one DataFrame."""

    positioned: Sequence[PositionedSource]
    schedule: Schedule
    config: FeedConfig
    max_payload_chars: int
    now: float  # the run's start: a run_at more than a year after it is rejected

    def rows(self, start: int, end: int) -> DataFrame:
        """Ranks [start, end), mapped: the source's columns are gone; SOURCE, PART, ROW, J,
        CURSOR, RANK, KEY, TENANT, PRIORITY, PAYLOAD, RUN_AT_US, REASON, ROW_JSON are
        left."""
        first = self.schedule.consumed_before(start)
        last = self.schedule.consumed_before(end)
        frames = []
        for index, source in enumerate(self.positioned):
            rows = source.between(first[index], last[index])
            if rows is None:
                continue
            mapped = map_tasks(rows, source.columns, self.config.mapping,
                               max_payload_chars=self.max_payload_chars, now_seconds=self.now)
            frames.append(mapped.select(
                F.lit(source.spec.name).alias(SOURCE), PART, ROW, J, CURSOR,
                rank_column(self.schedule, index, F.col(J)).alias(RANK), KEY, TENANT,
                PRIORITY, PAYLOAD, RUN_AT_US, REASON, ROW_JSON))
        if not frames:
            raise RuntimeError(f"ranks {start}..{end - 1} have no rows")
        return reduce(lambda a, b: a.unionByName(b), frames)

    def readers(self, start: int, end: int) -> int:
        """How many Spark tasks can read the rows of ``rows(start, end)`` at once."""
        first = self.schedule.consumed_before(start)
        last = self.schedule.consumed_before(end)
        return sum(source.readers(first[index], last[index])
                   for index, source in enumerate(self.positioned))

    def tenants(self, start: int, end: int) -> DataFrame:
        """(TENANT, RANK) of ranks [start, end): only the columns they come from are
        read."""
        first = self.schedule.consumed_before(start)
        last = self.schedule.consumed_before(end)
        frames = []
        mapping = self.config.mapping
        for index, source in enumerate(self.positioned):
            rows = source.between(first[index], last[index])
            if rows is not None:
                frames.append(rows.select(
                    tenant_of(mapping).alias(TENANT),
                    rank_column(self.schedule, index, F.col(J)).alias(RANK)))
        return reduce(lambda a, b: a.unionByName(b), frames)


def _contexts(tq: Deployment) -> list[Context]:
    """The engine's contexts, one a shard, the default shard's first."""
    return [e.ctx for e in tq.engines.values()]


def _backlog(contexts: Sequence[Context], queue: str, cap: int) -> Backlog:
    """The queue's backlog summed over the shards (each counts the pairs it homes)."""
    counts = [queue_backlog(ctx, queue, cap=cap) for ctx in contexts]
    return Backlog(cold=sum(b.cold for b in counts), delayed=sum(b.delayed for b in counts),
                   warm=sum(b.warm for b in counts), leased=sum(b.leased for b in counts))


def _run(spark: SparkSession, config: FeedConfig, stores: StoreConfig, loader: Loader,
         tq: Deployment, result: FeedResult, sleep: Callable[[float], None],
         started: float) -> None:
    contexts = _contexts(tq)
    ctx = contexts[0]  # the feed's lock and offsets: on the default shard
    feed, queue = config.feed_name, config.queue
    offsets = load_offsets(ctx, feed)
    positioned: list[PositionedSource] = []
    writers = config.write_partitions or spark.sparkContext.defaultParallelism
    warming: threading.Thread | None = None
    try:
        # the first Python (and Arrow) job of an application takes seconds: it runs beside
        # the driver's reading of the sources, on one core fewer than the writers take,
        # so that the schemas' job has one (a round forks the other workers in moments)
        warming = start_python_workers(spark, max(1, writers - 1))
        raws = []
        for spec in config.sources:  # their schemas (a parquet schema is a Spark job)
            raw = loader.load(spark, spec, offsets)
            if raw is not None:
                check_columns(spec.name, raw.columns, config.mapping)
            raws.append(raw)
        schemas_read = time.monotonic()
        for spec, raw in zip(config.sources, raws, strict=True):
            positioned.append(position(spark, spec, raw, offsets))
        names = config.source_names()
        preferred = (names.index(config.strategy.preferred)
                     if config.strategy.preferred is not None else None)
        schedule = Schedule(tuple(p.remaining for p in positioned), preferred)
        limit = min(schedule.total, config.max_rows or schedule.total)
        log.info("feed %r -> queue %r, strategy %s: %s (read in %.1f s: schemas after "
                 "%.1f s, rows placed in %.1f s)", feed, queue, config.strategy,
                 ", ".join(f"{p.spec.name}={p.remaining:,} rows left "
                           f"({sum(1 for x in p.parts if x.remaining)} part(s))"
                           for p in positioned), time.monotonic() - started,
                 schemas_read - started, time.monotonic() - schemas_read)
        result.deferred = schedule.total
        if limit == 0:
            result.stopped_by = "nothing_to_do"
            return

        line = Line(positioned, schedule, config, ctx.settings.max_payload_bytes, time.time())
        ahead = TenantLookahead(line)
        progress = Progress(limit)
        saved: dict[tuple[str, str], int] = {
            (source, part): o.rows_done for (source, part), o in offsets.items()}
        gauge = BacklogGauge(partial(_backlog, contexts, queue, config.max_backlog),
                             config.max_backlog)
        start = 0
        waited = 0.0
        while start < limit:
            round_began = time.monotonic()  # a wait for room is not counted as a round's
            backlog = gauge.look(min(config.batch_rows, limit - start))
            result.backlog_counts = gauge.counts
            room = backlog.room(config.max_backlog)
            if room == 0:
                if waited < config.max_wait_seconds:
                    pause = min(config.poll_seconds or 1.0, config.max_wait_seconds - waited)
                    log.info("backlog %s is at the limit %d: waiting %.1f s for room",
                             backlog, config.max_backlog, pause)
                    sleep(pause)
                    waited += pause
                    continue
                if result.rounds == 0:
                    log.info("backlog %s is at the limit %d: nothing written", backlog,
                             config.max_backlog)
                result.stopped_by = "backlog"
                break
            waited = 0.0
            end = min(limit, start + min(room, config.batch_rows))
            if not ahead.covers(start, end):
                learning = time.monotonic()
                ahead.learn(start, min(limit, start + max(room, end - start)))
                if config.mapping.tenant is not None:
                    log.info("ranks %d..%d: tenants read in %.1f s", ahead.start,
                             ahead.end - 1, time.monotonic() - learning)
            if warming is not None:  # the round's partitions take the workers it started
                warming.join()
                warming = None
            written = _write_round(spark, tq, line, ahead, stores, feed,
                                   result.rejects_path or "", start, end, writers,
                                   config.chunk_rows)
            result.created += written.created
            gauge.created(written.created)
            result.ignored += written.ignored
            result.rejected += written.rejected
            result.ready_tenants.update(written.tenants)
            save_offsets(ctx, feed, _offset_rows(positioned, schedule.consumed_before(end),
                                                 saved))
            result.rounds += 1
            result.rounds_seconds += time.monotonic() - round_began
            result.consumed = end
            result.deferred = schedule.total - end
            elapsed = time.monotonic() - started
            progress.round(result.rounds, end, str(backlog), room, written.created,
                           written.ignored, written.rejected,
                           end / elapsed if elapsed > 0 else 0.0)
            start = end
        else:
            result.stopped_by = "max_rows" if limit < schedule.total else "drained"
    finally:
        if warming is not None:
            warming.join()
        for source in positioned:
            source.unpersist()


@dataclass(frozen=True)
class RoundWritten:
    created: int
    ignored: int      # repeats inside the round, and keys already live in the queue
    rejected: int
    tenants: tuple[str, ...]


class TenantLookahead:
    """The tenants of the rows ahead, learnt in one pass over a window of ranks (the rows
    the backlog has room for, from the first round on): a round's load must admit its
    pairs before any of its rows is written. Only the tenant column is read, and only
    when one is mapped (otherwise every row's tenant is ``_``: no pass at all). Repeated
    keys are not looked for here: the engine's bulk path settles them in PostgreSQL."""

    def __init__(self, line: Line) -> None:
        self.line = line
        self.start = self.end = 0
        self.tenant_spans: dict[str, tuple[int, int]] = {}

    def covers(self, start: int, end: int) -> bool:
        return self.start <= start and end <= self.end

    def learn(self, start: int, end: int) -> None:
        """Learn ranks [start, end) (a round's rows must lie in one window)."""
        if self.line.config.mapping.tenant is None:
            self.tenant_spans = {DEFAULT_TENANT: (start, end - 1)}
        else:
            self.tenant_spans = {
                r[TENANT]: (r["lo"], r["hi"])
                for r in self.line.tenants(start, end).groupBy(TENANT).agg(
                    F.min(RANK).alias("lo"), F.max(RANK).alias("hi")).collect()
                if r[TENANT] is not None and _TENANT_NAME.match(r[TENANT])}
        self.start, self.end = start, end

    def tenants(self, start: int, end: int) -> list[str]:
        """The tenants rows of ranks [start, end) name: the pairs a round's load admits (a
        tenant that is not a valid name has only rejected rows)."""
        return sorted(t for t, (lo, hi) in self.tenant_spans.items() if lo < end and hi >= start)


def _round_frame(spark: SparkSession, line: Line, start: int, end: int, writers: int,
                 id_ms: int, id_tail: str, fixed_tenant: bool) -> tuple[DataFrame, int]:
    """What a round's partitions hand to their writers (a COPY line of each row, or its
    reject), and how many partitions read it."""
    rows = line.rows(start, end)
    # the staged row, in one concat: its id, its place in the load, then what the mapping
    # made of the row. The round's numbers come as a broadcast row, not as literals
    # (sources.numbers_row says why).
    rows = rows.crossJoin(numbers_row(spark, **{_START: start, _ID_MS: id_ms}))
    place = F.col(RANK) - F.col(_START)
    rejected = F.col(REASON).isNotNull()
    fields = [load_id_column(F.col(_ID_MS), id_tail, place), place.cast(T.StringType()),
              *copy_fields()]
    staged = F.when(~rejected, F.concat(
        *[part for field in fields for part in (field, F.lit("\t"))][:-1], F.lit("\n")))

    frame = rows.select(
        staged.alias(LINE),
        (F.lit(None).cast("string") if fixed_tenant else F.col(TENANT)).alias(TENANT),
        F.col(REASON).alias("reason"))
    # as many partitions as tasks can read rows, up to one per connection (asking the plan
    # its partitions would plan it once more; a file's empty splits would count); a
    # partition writes on its share of the ``writers`` connections
    return frame, max(1, min(writers, line.readers(start, end)))


def _write_round(spark: SparkSession, tq: Deployment, line: Line, ahead: TenantLookahead,
                 stores: StoreConfig, feed: str, rejects_path: str, start: int, end: int,
                 writers: int, chunk_rows: int) -> RoundWritten:
    """Write ranks [start, end) through the engine's bulk path: the round's pairs stay
    cold, its places reserved, from before any row is written until the last partition
    has committed. A key repeated inside the round is settled by the bulk path (the first
    occurrence wins, wherever the writers' commits fall)."""
    began = time.monotonic()
    tenants = ahead.tenants(start, end) or ["_"]  # none: every row of the round is rejected
    fixed_tenant = tenants[0] if line.config.mapping.tenant is None else None
    with tq.bulk_load(line.config.queue, rows=end - start, tenants=tenants) as load:
        admitted = time.monotonic()
        frame, partitions = _round_frame(spark, line, start, end, writers, load.id_ms,
                                         load.id_tail, fixed_tenant is not None)
        job = RoundWrite(stores=stores, load=load, chunk_rows=chunk_rows,
                         connections=max(1, writers // partitions),
                         spare_connections=writers % partitions,
                         tenant=fixed_tenant, tenant_column=TENANT)
        submitted = time.time()
        stats = (frame.coalesce(partitions)
                 .mapInArrow(partial(write_partition, job), OUT_SCHEMA)
                 .collect())
    written = time.monotonic()
    total = {name: sum(r[name] for r in stats) for name in STATS_COLUMNS}
    # from the job's submission to its first partition's Python side, and from the
    # last partition's end to the stats on the driver
    starting = min((r["began_at"] for r in stats), default=submitted) - submitted
    ending = time.time() - max((r["ended_at"] for r in stats), default=time.time())
    if total["staged"] + total["rejected"] != end - start:
        raise RuntimeError(f"ranks {start}..{end - 1}: {total['staged']} row(s) written "
                           f"and {total['rejected']} rejected make not {end - start}")
    if total["rejected"]:
        write_rejects(line, feed, rejects_path, start, end, int(total["rejected"]))
    log.info("ranks %d..%d: admitted in %.1f s, written in %.1f s: %.1f s until the "
             "first partition started, %d partition(s) (summed over them: %.1f s "
             "waiting for Spark to read and map rows, %.1f s for a free connection; "
             "%.1f s in the writers' transactions on %d connection(s)), %.1f s after the "
             "last one ended; %d repeated key(s) settled, %d chunk(s) written again",
             start, end - 1, admitted - began, written - admitted, starting, len(stats),
             total["input_s"], total["blocked_s"], total["write_s"],
             writers, ending, total["settled"], total["retried"])
    return RoundWritten(created=int(total["created"]),
                        ignored=int(total["staged"] - total["created"]),
                        rejected=int(total["rejected"]), tenants=tuple(tenants))


def write_rejects(line: Line, feed: str, rejects_path: str, start: int, end: int,
                  counted: int) -> None:
    """Append the rejects of ranks [start, end) to the rejects output: the round's rows read
    and mapped once more (a row's reject reason depends on the row and the run's start
    only), so that a round without rejects hands nothing but counts to the driver. The
    reading stays spread over the round's splits; only the rejects meet in one task (one
    file a round). ``counted``: the rejects the round's writers counted."""
    began = time.monotonic()
    written = Observation("rejects")
    (line.rows(start, end).where(F.col(REASON).isNotNull())
     .select(F.lit(feed).alias("feed"), F.col(SOURCE).alias("source"),
             F.col(PART).alias("part"), F.col(ROW).alias("row"), F.col(REASON).alias("reason"),
             F.col(ROW_JSON).alias("row_json"), F.current_timestamp().alias("rejected_at"))
     .observe(written, F.count(F.lit(1)).alias("rows"))
     .repartition(1).write.mode("append").json(rejects_path))
    rows = written.get["rows"]
    if rows != counted:  # a source changed under the run (a file rewritten or removed)
        log.warning("ranks %d..%d: %d reject(s) written to %s, but the writers counted %d: "
                    "a source changed during the run", start, end - 1, rows, rejects_path,
                    counted)
    log.info("ranks %d..%d: %d reject(s) written in %.1f s (the round's rows read again)",
             start, end - 1, rows, time.monotonic() - began)
