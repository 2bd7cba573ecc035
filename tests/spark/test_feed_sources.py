"""Placing a parquet source's rows: each file read once per round; the row groups that hold
a round's rows, and the file's size, bound how many Spark tasks read it (a round's
partitions, and so its connections per partition)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tierq_feeder.config import SourceSpec
from tierq_feeder.sources import (
    ROW,
    SPLIT_BYTES_AT_LEAST,
    FileLayout,
    J,
    SparkLoader,
    position,
)

pytestmark = pytest.mark.spark


def write_file(path: Path, first: int, rows: int, row_group_rows: int) -> None:
    keys = [f"k{n:04d}" for n in range(first, first + rows)]
    pq.write_table(pa.table({"key": keys}), path, row_group_size=row_group_rows)


def test_footers_give_the_layout_and_each_file_is_read_once(spark: Any,
                                                                  tmp_path: Path) -> None:
    folder = tmp_path / "rows"
    folder.mkdir()
    write_file(folder / "part-0.parquet", 0, 100, 100)    # one row group
    write_file(folder / "part-1.parquet", 100, 300, 100)  # three
    spec = SourceSpec(name="rows", format="parquet", path=str(folder))
    raw = SparkLoader().load(spark, spec, {})
    assert raw is not None
    source = position(spark, spec, raw, {})

    assert source.remaining == 400
    layouts = sorted(source.layouts.values(), key=lambda layout: len(layout.group_rows))
    assert [layout.group_rows for layout in layouts] == [(100,), (100, 100, 100)]
    # files this small are one split each (Spark's splits are at least 4 MiB)
    assert source.readers(0, 50) == 1
    assert source.readers(100, 400) == 1
    assert source.readers(50, 150) == 2
    assert source.readers(10, 10) == 0

    rows = source.between(50, 150)
    assert rows is not None
    got = sorted((r[J], r["key"], r[ROW]) for r in rows.collect())
    assert got == [(j, f"k{j:04d}", j if j < 100 else j - 100) for j in range(50, 150)]
    # one scan per file: a file cut into row ranges would be decoded once per range
    plan = rows._jdf.queryExecution().sparkPlan().toString()
    assert plan.count("FileScan parquet") == 2


def test_readers_are_the_splits_holding_the_rows_row_groups() -> None:
    mib = 1024 * 1024
    big = FileLayout(group_rows=(100, 100, 100, 100), size=4 * 128 * mib)
    assert big.readers(0, 400) == 4
    assert big.readers(150, 250) == 2      # rows of two row groups
    assert big.readers(100, 200) == 1      # one row group, exactly
    assert big.readers(399, 400) == 1
    # a small file with many row groups: Spark splits it no finer than 4 MiB
    small = FileLayout(group_rows=(10,) * 8, size=SPLIT_BYTES_AT_LEAST + 1)
    assert small.readers(0, 80) == 2
    assert FileLayout(group_rows=(10,) * 8, size=mib).readers(0, 80) == 1
