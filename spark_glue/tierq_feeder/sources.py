"""Reading sources and giving every remaining row its place: ``part`` (file), ``row`` (its
index in the part) and ``j`` (its index among the rows the source still has).

Source order:

* files: by file path, then by row within the file. Parquet reports the row index
  (``_metadata.row_index``); CSV and JSON rows are counted per file split — Spark reads
  each split in order inside one task, so the split's start and the row's position in
  that task give the row's index in its file whatever the split sizes are.
* JDBC: by the order column (unique and increasing, e.g. a serial id).

Progress (``tierq_feeder_offsets``) is kept per file (rows done) and per JDBC source (last
order value), so files that appear later — whatever their names — are still read in full,
and nothing already fed is read as new.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import reduce
from typing import Protocol

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tierq_feeder.config import FeedConfigError, SourceSpec
from tierq_feeder.schedule import PartProgress, part_bases

# internal columns (prefixed so they cannot collide with a source's own columns)
PART = "__tq_part"
ROW = "__tq_row"
J = "__tq_j"
CURSOR = "__tq_cursor"
_BLOCK = "__tq_block"
_MONO = "__tq_mono"

DEFAULT_OPTIONS: dict[str, dict[str, str]] = {
    "csv": {"header": "true"},
    "json": {},
    "parquet": {},
}
POSTGRES_DRIVER = "org.postgresql.Driver"
# a round over at most this many files reads each with a scan of its own; more are read
# with one scan and a broadcast table of shifts
MAX_FILES_AS_SCANS = 32
# A round's numbers (row ranges, shifts) reach its plan as rows of small broadcast tables,
# not as literals: Spark writes a long literal into the code it generates, so every round
# (and every file of one) would compile and JIT-compile classes of its own; with the
# numbers as data, one class serves them all.
_LO, _HI, _SHIFT = "__tq_lo", "__tq_hi", "__tq_shift"


def numbers_row(spark: SparkSession, **numbers: int) -> DataFrame:
    """One row of long columns, broadcast: an inline table (a local relation: no Spark job
    to read it, unlike ``createDataFrame`` of a Python list, and not constant-folded into
    the plan, unlike a select of literals)."""
    names = ", ".join(numbers)
    values = ", ".join(f"CAST({int(v)} AS BIGINT)" for v in numbers.values())
    return F.broadcast(spark.sql(f"SELECT * FROM VALUES ({values}) AS t({names})"))


def _bounds(spark: SparkSession, lo: int, hi: int, shift: int = 0) -> DataFrame:
    return numbers_row(spark, **{_LO: lo, _HI: hi, _SHIFT: shift})


def col(name: str) -> Column:
    """A source column by its exact name (dots and spaces included)."""
    return F.col("`" + name.replace("`", "``") + "`")


@dataclass(frozen=True)
class Offset:
    rows_done: int
    last_value: str | None = None


Offsets = Mapping[tuple[str, str], Offset]  # (source, part) -> where it stopped


class Loader(Protocol):
    """Gives the raw rows of a source. Files must come from a file scan (Spark's
    ``_metadata`` column is used to place rows)."""

    def load(self, spark: SparkSession, spec: SourceSpec, offsets: Offsets) -> DataFrame | None:
        ...


class SparkLoader:
    """Plain Spark readers: local runs, and Glue runs without bookmarks."""

    def load(self, spark: SparkSession, spec: SourceSpec, offsets: Offsets) -> DataFrame | None:
        if spec.is_jdbc:
            return read_jdbc(spark, spec)
        return read_files(spark, spec)


def read_files(spark: SparkSession, spec: SourceSpec,
               files: list[str] | None = None) -> DataFrame:
    reader = spark.read.format(spec.format).options(**DEFAULT_OPTIONS[spec.format])
    reader = reader.options(**spec.options)
    try:
        return reader.load(files if files is not None else spec.path)
    except Exception as exc:  # AnalysisException: path missing, schema not inferable, …
        raise FeedConfigError("--source", f"{spec.name}: cannot read {spec.path!r} as "
                                          f"{spec.format}: {_first_line(exc)}") from exc


def read_jdbc(spark: SparkSession, spec: SourceSpec) -> DataFrame:
    reader = spark.read.format("jdbc").option("url", spec.url)
    if spec.url.startswith("jdbc:postgresql:"):
        reader = reader.option("driver", POSTGRES_DRIVER)
    if spec.table is not None:
        reader = reader.option("dbtable", spec.table)
    else:
        reader = reader.option("query", spec.query or "")
    try:
        return reader.options(**spec.options).load()
    except Exception as exc:
        raise FeedConfigError("--source", f"{spec.name}: cannot read from JDBC: "
                                          f"{_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# Spark's spark.sql.files.openCostInBytes (default): no split of a file is smaller
# (FilePartition.maxSplitBytes), so a file of n bytes is read by at most n / this tasks
SPLIT_BYTES_AT_LEAST = 4 * 1024 * 1024


@dataclass(frozen=True)
class FileLayout:
    """A parquet file as Spark splits it: rows per row group, in order, and its size."""

    group_rows: tuple[int, ...]
    size: int

    def readers(self, lo: int, hi: int) -> int:
        """How many tasks can read rows [lo, hi) of the file: the row groups holding any of
        them (Spark gives a row group whole to one split, never cuts one), no more than the
        file has splits."""
        touched, start = 0, 0
        for rows in self.group_rows:
            if start < hi and start + rows > lo:
                touched += 1
            start += rows
        return max(1, min(touched, -(-self.size // SPLIT_BYTES_AT_LEAST)))


@dataclass
class PositionedSource:
    """A source's remaining rows with PART, ROW, J (and CURSOR for JDBC), persisted."""

    spec: SourceSpec
    frame: DataFrame | None      # None when the source has nothing left (or is ``scan``)
    columns: list[str]           # the source's own columns
    parts: list[PartProgress]    # in source order
    cached: DataFrame | None = None  # what ``frame`` is computed from, held in memory/disk
    # parquet: the files' rows with PART and ROW (read again by each round, never held)
    scan: DataFrame | None = None
    partitions: int = 1  # of ``frame``, when it is held
    # parquet: each file's row groups and size, where the footers were read
    layouts: dict[str, FileLayout] = field(default_factory=dict)

    @property
    def remaining(self) -> int:
        return sum(p.remaining for p in self.parts)

    @property
    def has_rows(self) -> bool:
        return self.frame is not None or (self.scan is not None and self.remaining > 0)

    def between(self, j0: int, j1: int) -> DataFrame | None:
        """The remaining rows with source ordinals ``j0 <= J < j1`` (with PART, ROW, J,
        CURSOR). Parquet reads only the files those rows are in, each once: Spark splits a
        file by its row groups; cutting one into row ranges would decode it once per range
        (a range is a filter on the row's index, not a skip), which cost more than the
        cores it kept busy (spark_glue/README.md)."""
        if j1 <= j0:
            return None
        output: list[Column | str] = [*[col(c) for c in self.columns], PART, ROW, J, CURSOR]
        if self.scan is None:
            if self.frame is None:
                return None
            bounds = _bounds(self.frame.sparkSession, j0, j1)
            return (self.frame.join(bounds, (F.col(J) >= F.col(_LO)) & (F.col(J) < F.col(_HI)))
                    .select(*output))
        spark = self.scan.sparkSession
        bases = part_bases(self.parts)
        chosen = self._files(j0, j1)
        if not chosen:
            return None
        data = [col(c) for c in self.columns]
        no_cursor = F.lit(None).cast(T.StringType()).alias(CURSOR)
        if len(chosen) <= MAX_FILES_AS_SCANS:
            # one scan per file: rows [lo, hi) of the file, whose j is shift + row
            # (shift = base - done)
            frames = [self.scan.where(F.col(PART) == p.part)
                      .join(_bounds(spark, a, b, bases[p.part] - p.done),
                            (F.col(ROW) >= F.col(_LO)) & (F.col(ROW) < F.col(_HI)))
                      .select(*data, PART, ROW, (F.col(_SHIFT) + F.col(ROW)).alias(J),
                              no_cursor)
                      for p, a, b in self._ranges(chosen, j0, j1)]
            return reduce(lambda a, b: a.unionByName(b), frames)
        # j = base(part) + (row - done(part)), for rows at or after done(part)
        lookup = spark.createDataFrame(
            [(p.part, p.done, bases[p.part] - p.done) for p in chosen],
            T.StructType([T.StructField(PART, T.StringType()),
                          T.StructField("__tq_done", T.LongType()),
                          T.StructField("__tq_shift", T.LongType())]))
        # a filter on the file path prunes the other files before they are opened
        files = self.scan.where(F.col(PART).isin([p.part for p in chosen]))
        joined = files.join(F.broadcast(lookup), on=PART, how="inner")
        return (joined.where(F.col(ROW) >= F.col("__tq_done"))
                .select(*data, PART, ROW, (F.col("__tq_shift") + F.col(ROW)).alias(J),
                        no_cursor)
                .join(_bounds(spark, j0, j1), (F.col(J) >= F.col(_LO)) & (F.col(J) < F.col(_HI)))
                .select(*output))

    def readers(self, j0: int, j1: int) -> int:
        """How many Spark tasks can read rows of ``between(j0, j1)`` at once, without
        planning it: a held source's partitions; parquet: per file read, the splits that
        hold its row groups with rows of the range (``FileLayout.readers``; a file whose
        footer was not read counts one)."""
        if j1 <= j0:
            return 0
        if self.scan is None:
            return self.partitions if self.frame is not None else 0
        return sum(self.layouts[p.part].readers(lo, hi) if p.part in self.layouts else 1
                   for p, lo, hi in self._ranges(self._files(j0, j1), j0, j1))

    def _files(self, j0: int, j1: int) -> list[PartProgress]:
        bases = part_bases(self.parts)
        return [p for p in self.parts if p.remaining > 0 and bases[p.part] < j1
                and bases[p.part] + p.remaining > j0]

    def _ranges(self, chosen: list[PartProgress], j0: int,
                j1: int) -> list[tuple[PartProgress, int, int]]:
        """(file, first row, end row) of the rows each chosen file gives ranks [j0, j1)."""
        bases = part_bases(self.parts)
        return [(p, p.done + max(0, j0 - bases[p.part]),
                 p.done + min(p.remaining, j1 - bases[p.part])) for p in chosen]

    def unpersist(self) -> None:
        if self.cached is not None:
            self.cached.unpersist()
            self.cached = None


def position(spark: SparkSession, spec: SourceSpec, raw: DataFrame | None,
             offsets: Offsets) -> PositionedSource:
    if raw is None:
        return PositionedSource(spec, None, [], [])
    if spec.is_jdbc:
        return _position_jdbc(spec, raw, offsets)
    return _position_files(spark, spec, raw, offsets)


def _position_files(spark: SparkSession, spec: SourceSpec, raw: DataFrame,
                    offsets: Offsets) -> PositionedSource:
    columns = list(raw.columns)
    data = [col(c) for c in columns]
    cached: DataFrame | None = None
    blocks: dict[str, list[tuple[int, int, int]]] = {}
    if spec.format == "parquet":
        # parquet knows each row's index in its file: nothing to hold, one cheap count
        scanned = raw.select(*data, F.col("_metadata.file_path").alias(PART),
                             F.col("_metadata.row_index").alias(ROW))
        totals, layouts = _parquet_row_counts(spark, raw)
    else:
        # the position inside a split's task is only stable while the scan is held
        scanned = raw.select(*data, F.col("_metadata.file_path").alias(PART),
                             F.col("_metadata.file_block_start").alias(_BLOCK),
                             F.monotonically_increasing_id().alias(_MONO))
        cached = scanned = scanned.persist(StorageLevel.MEMORY_AND_DISK)
        for r in (scanned.groupBy(PART, _BLOCK)
                  .agg(F.count("*").alias("n"), F.min(_MONO).alias("first")).collect()):
            blocks.setdefault(r[PART], []).append((r[_BLOCK], r["n"], r["first"]))
        totals = {part: sum(n for _, n, _ in bs) for part, bs in blocks.items()}

    parts = [PartProgress(part, offsets.get((spec.name, part), Offset(0)).rows_done, n)
             for part, n in sorted(totals.items())]
    bases = part_bases(parts)
    live = [p for p in parts if p.remaining > 0]
    if not live:
        if cached is not None:
            cached.unpersist()
        return PositionedSource(spec, None, columns, parts)

    if spec.format == "parquet":
        # nothing held: each round reads the files its rows are in (``between``)
        return PositionedSource(spec, None, columns, parts, scan=scanned, layouts=layouts)
    # a split's rows are consecutive in its task: row = rows of earlier splits of the
    # file + (position in the task - position of the split's first row)
    entries = []
    for p in live:
        before = 0
        for start, n, first in sorted(blocks[p.part]):
            entries.append((p.part, start, before - first, p.done, bases[p.part] - p.done))
            before += n
    lookup = spark.createDataFrame(
        entries,
        T.StructType([T.StructField(PART, T.StringType()),
                      T.StructField(_BLOCK, T.LongType()),
                      T.StructField("__tq_row_shift", T.LongType()),
                      T.StructField("__tq_done", T.LongType()),
                      T.StructField("__tq_shift", T.LongType())]))
    joined = scanned.join(F.broadcast(lookup), on=[PART, _BLOCK], how="inner")
    row = F.col(_MONO) + F.col("__tq_row_shift")
    frame = (joined.withColumn(ROW, row)
             .where(F.col(ROW) >= F.col("__tq_done"))
             .select(*data, PART, ROW, (F.col("__tq_shift") + F.col(ROW)).alias(J),
                     F.lit(None).cast("string").alias(CURSOR)))
    return PositionedSource(spec, frame, columns, parts, cached=cached,
                            partitions=scanned.rdd.getNumPartitions())


# up to this many files, their row counts come from their footers, read by the driver (no
# Spark job); more are counted by a scan
MAX_FOOTERS_READ = 256


def _parquet_row_counts(spark: SparkSession,
                        raw: DataFrame) -> tuple[dict[str, int], dict[str, FileLayout]]:
    """Rows per file, and each file's layout where the footers were read (keyed as
    ``_metadata.file_path`` names the file)."""
    files = raw.inputFiles()
    if 0 < len(files) <= MAX_FOOTERS_READ:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        totals: dict[str, int] = {}
        layouts: dict[str, FileLayout] = {}
        # each py4j lookup of a dotted name asks the JVM for every prefix of it: the three
        # classes once, not per file
        hadoop_path = jvm.org.apache.hadoop.fs.Path
        reader = jvm.org.apache.parquet.hadoop.ParquetFileReader
        input_file = jvm.org.apache.parquet.hadoop.util.HadoopInputFile
        for name in files:
            path = hadoop_path(name)
            file = input_file.fromPath(path, conf)
            footer = reader.open(file)
            try:
                rows = int(footer.getRecordCount())
                group_rows = tuple(int(group.getRowCount()) for group in footer.getRowGroups())
            finally:
                footer.close()
            if rows:
                totals[path.toString()] = rows  # as _metadata.file_path names it
                layouts[path.toString()] = FileLayout(group_rows, int(file.getLength()))
        return totals, layouts
    return {r[PART]: r["n"] for r in raw.select(F.col("_metadata.file_path").alias(PART))
            .groupBy(PART).agg(F.count("*").alias("n")).collect()}, {}


def _position_jdbc(spec: SourceSpec, raw: DataFrame, offsets: Offsets) -> PositionedSource:
    order = spec.order_column or ""
    if order not in raw.columns:
        raise FeedConfigError("--order-column", f"{spec.name}: no column {order!r} "
                                                f"(columns: {', '.join(raw.columns)})")
    columns = list(raw.columns)
    previous = offsets.get((spec.name, ""), Offset(0))
    rows = raw
    if previous.last_value is not None:
        kind = raw.schema[order].dataType
        rows = rows.where(col(order) > F.lit(previous.last_value).cast(kind))
    # one line in order-column order (a JDBC result is usually one partition anyway)
    j = F.row_number().over(Window.orderBy(col(order))) - 1
    frame = (rows.select(*[col(c) for c in columns], F.lit("").alias(PART), j.alias(J),
                         col(order).cast("string").alias(CURSOR))
             .withColumn(ROW, F.col(J) + F.lit(previous.rows_done))
             .persist(StorageLevel.MEMORY_AND_DISK))
    n = frame.count()
    parts = [PartProgress("", previous.rows_done, previous.rows_done + n)]
    if n == 0:
        frame.unpersist()
        return PositionedSource(spec, None, columns, parts)
    # one partition: the window over the whole result gathered it
    return PositionedSource(spec, frame.select(*[col(c) for c in columns], PART, ROW, J, CURSOR),
                            columns, parts, cached=frame, partitions=1)
