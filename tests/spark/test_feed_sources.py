"""Placing a parquet source's rows: each file read once per round, its row groups bounding
how many Spark tasks read it (a round's partitions, and so its connections per partition)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tierq_feeder.config import SourceSpec
from tierq_feeder.sources import ROW, J, SparkLoader, position

pytestmark = pytest.mark.spark


def write_file(path: Path, first: int, rows: int, row_group_rows: int) -> None:
    keys = [f"k{n:04d}" for n in range(first, first + rows)]
    pq.write_table(pa.table({"key": keys}), path, row_group_size=row_group_rows)


def test_row_groups_bound_the_readers_and_each_file_is_read_once(spark: Any,
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
    assert source.readers(0, 50) == 1      # part of the one-row-group file: one task
    assert source.readers(0, 100) == 1
    assert source.readers(100, 400) == 3   # Spark splits a file by its row groups at most
    assert source.readers(50, 150) == 4
    assert source.readers(10, 10) == 0

    rows = source.between(50, 150)
    assert rows is not None
    got = sorted((r[J], r["key"], r[ROW]) for r in rows.collect())
    assert got == [(j, f"k{j:04d}", j if j < 100 else j - 100) for j in range(50, 150)]
    # one scan per file: a file cut into row ranges would be decoded once per range
    plan = rows._jdf.queryExecution().sparkPlan().toString()
    assert plan.count("FileScan parquet") == 2
