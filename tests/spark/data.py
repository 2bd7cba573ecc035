"""Small input files for feeder tests, written exactly as given (row order kept)."""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def write_json(path: Path, rows: Sequence[dict[str, Any]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_parquet(spark: SparkSession, folder: Path, rows: Sequence[dict[str, Any]], *,
                  files: int = 1, schema: StructType | str | None = None,
                  first_file: int = 0) -> str:
    """Rows as ``files`` parquet files in ``folder``, in order: file k holds the k-th
    consecutive slice, and file names sort in that order."""
    folder.mkdir(parents=True, exist_ok=True)
    columns = list(rows[0])
    size = -(-len(rows) // files)
    for k in range(files):
        part = rows[k * size:(k + 1) * size]
        if not part:
            continue
        frame = spark.createDataFrame([tuple(r[c] for c in columns) for r in part],
                                      schema=schema or columns)
        scratch = Path(tempfile.mkdtemp(prefix="tierq-parquet-"))
        try:
            frame.coalesce(1).write.mode("overwrite").parquet(str(scratch / "out"))
            (written,) = (scratch / "out").glob("part-*.parquet")
            shutil.move(str(written), folder / f"part-{first_file + k:05d}.parquet")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return str(folder)
