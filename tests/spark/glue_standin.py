"""A stand-in for the parts of AWS Glue's ``awsglue`` library the feeder's entry point uses
(``GlueContext``, ``create_dynamic_frame.from_options``, ``DynamicFrame.toDF``, ``Job``),
running on plain PySpark with job bookmarks kept in memory the way Glue keeps them: what a
run read under a ``transformation_ctx`` is skipped by later runs only once the run called
``job.commit()``.

Every class mirrors the public Python interface of the real one (the ``awsglue-dev``
package): tests/spark/test_feed_glue.py checks each signature against it, so a call the
real library would refuse fails here too. ``getResolvedOptions`` is the real one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

FILE_FORMATS = {"parquet", "csv", "json"}
JDBC_TYPES = {"postgresql"}
# the connection options and format options of Glue's documentation the stand-in honours
S3_OPTIONS = {"paths", "recurse", "attachFilename", "exclusions", "groupFiles"}
JDBC_OPTIONS = {"url", "dbtable", "user", "password", "jobBookmarkKeys",
                "jobBookmarkKeysSortOrder", "driver"}
CSV_FORMAT_OPTIONS = {"withHeader", "separator", "quoteChar", "escaper"}


@dataclass
class Bookmarks:
    """Glue's bookmark service for one job: committed state per transformation_ctx, and
    what the current run read (committed by ``Job.commit``)."""

    committed: dict[str, set[str]] = field(default_factory=dict)   # ctx -> files
    committed_keys: dict[str, Any] = field(default_factory=dict)   # ctx -> last key value
    pending: dict[str, set[str]] = field(default_factory=dict)
    pending_keys: dict[str, Any] = field(default_factory=dict)
    commits: int = 0
    reads: list[tuple[str, list[str]]] = field(default_factory=list)  # (ctx, files given)


BOOKMARKS: dict[str, Bookmarks] = {}  # job name -> its bookmarks (Glue keeps them per job)


class DynamicFrame:
    def __init__(self, frame: DataFrame) -> None:
        self._frame = frame

    def toDF(self, options=None):  # type: ignore[no-untyped-def]
        if options:
            raise NotImplementedError("ResolveOption lists are not part of the stand-in")
        return self._frame


class DynamicFrameReader:
    def __init__(self, glue_context):  # type: ignore[no-untyped-def]
        self._glue_context = glue_context

    def from_options(self, connection_type, connection_options={},  # type: ignore[no-untyped-def]  # noqa: B006
                     format=None, format_options={},  # noqa: B006 - Glue's signature
                     transformation_ctx="", push_down_predicate="", **kwargs):
        if kwargs:
            raise TypeError(f"from_options: unexpected options {sorted(kwargs)}")
        context: GlueContext = self._glue_context
        bookmarks = context.bookmarks()
        if connection_type == "s3":
            return self._files(context.spark_session, bookmarks, connection_options, format,
                               format_options, transformation_ctx)
        if connection_type in JDBC_TYPES:
            return self._jdbc(context.spark_session, bookmarks, connection_options,
                              transformation_ctx)
        raise ValueError(f"connection_type {connection_type!r} is not one the stand-in serves")

    def _files(self, spark: SparkSession, bookmarks: Bookmarks | None, options: dict[str, Any],
               fmt: str | None, format_options: dict[str, Any], ctx: str) -> DynamicFrame:
        unknown = set(options) - S3_OPTIONS
        if unknown or fmt not in FILE_FORMATS or set(format_options) - CSV_FORMAT_OPTIONS:
            raise ValueError(f"s3 source: options {sorted(unknown)} / format {fmt!r} / "
                             f"{sorted(format_options)} are not Glue's")
        files = sorted(path for root in options["paths"] for path in _listing(
            root, recurse=bool(options.get("recurse"))))
        seen = bookmarks.committed.get(ctx, set()) if bookmarks and ctx else set()
        new = [f for f in files if f not in seen]
        if bookmarks is not None and ctx:
            bookmarks.pending[ctx] = set(new)
            bookmarks.reads.append((ctx, new))
        filename = options.get("attachFilename")
        if not new:
            frame = spark.createDataFrame([], f"`{filename or 'value'}` string")
            return DynamicFrame(frame)
        reader = spark.read.format(fmt)
        if fmt == "csv":
            reader = reader.option("header", str(format_options.get("withHeader", False)))
        frame = reader.load(new)
        if filename:
            frame = frame.withColumn(filename, F.col("_metadata.file_path"))
        return DynamicFrame(frame)

    def _jdbc(self, spark: SparkSession, bookmarks: Bookmarks | None, options: dict[str, Any],
              ctx: str) -> DynamicFrame:
        unknown = set(options) - JDBC_OPTIONS
        if unknown:
            raise ValueError(f"jdbc source: options {sorted(unknown)} are not Glue's")
        reader = (spark.read.format("jdbc").option("url", options["url"])
                  .option("dbtable", options["dbtable"]).option("driver", "org.postgresql.Driver"))
        frame = reader.load()
        keys = options.get("jobBookmarkKeys") or []
        if bookmarks is not None and ctx and keys:
            (key,) = keys
            last = bookmarks.committed_keys.get(ctx)
            if last is not None:
                frame = frame.where(F.col(key) > F.lit(last))
            newest = frame.agg(F.max(key)).first()
            bookmarks.pending_keys[ctx] = newest[0] if newest and newest[0] is not None \
                else last
        return DynamicFrame(frame)


def _listing(root: str, *, recurse: bool) -> Iterator[str]:
    path = root.removeprefix("file:")
    if os.path.isfile(path):
        yield path
        return
    for folder, dirs, names in os.walk(path):
        for name in names:
            if not name.startswith((".", "_")):
                yield os.path.join(folder, name)
        if not recurse:
            dirs.clear()


class GlueContext:
    def __init__(self, sparkContext, **options):  # type: ignore[no-untyped-def]
        active = SparkSession.getActiveSession()
        assert active is not None and active.sparkContext is sparkContext
        self.spark_session = active
        self.create_dynamic_frame = DynamicFrameReader(self)
        self.job_name: str | None = None
        self.bookmarks_enabled = False

    def bookmarks(self) -> Bookmarks | None:
        if not self.bookmarks_enabled or self.job_name is None:
            return None
        return BOOKMARKS.setdefault(self.job_name, Bookmarks())


class Job:
    def __init__(self, glue_context):  # type: ignore[no-untyped-def]
        self._glue_context = glue_context

    def init(self, job_name, args={}):  # type: ignore[no-untyped-def]  # noqa: B006
        context: GlueContext = self._glue_context
        context.job_name = job_name
        context.bookmarks_enabled = args.get("job_bookmark_option") == "job-bookmark-enable"
        bookmarks = context.bookmarks()
        if bookmarks is not None:
            bookmarks.pending.clear()
            bookmarks.pending_keys.clear()

    def commit(self):  # type: ignore[no-untyped-def]
        bookmarks = self._glue_context.bookmarks()
        if bookmarks is None:
            return
        for ctx, files in bookmarks.pending.items():
            bookmarks.committed.setdefault(ctx, set()).update(files)
        bookmarks.committed_keys.update(bookmarks.pending_keys)
        bookmarks.commits += 1


# stand-in -> the real interface it mirrors (module, qualified name)
MIRRORS = {
    GlueContext.__init__: ("awsglue.context", "GlueContext.__init__"),
    DynamicFrameReader.__init__: ("awsglue.dynamicframe", "DynamicFrameReader.__init__"),
    DynamicFrameReader.from_options: ("awsglue.dynamicframe",
                                      "DynamicFrameReader.from_options"),
    DynamicFrame.toDF: ("awsglue.dynamicframe", "DynamicFrame.toDF"),
    Job.__init__: ("awsglue.job", "Job.__init__"),
    Job.init: ("awsglue.job", "Job.init"),
    Job.commit: ("awsglue.job", "Job.commit"),
}


@contextmanager
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``awsglue.context`` and ``awsglue.job`` replaced by the stand-in (``awsglue.utils``,
    pure Python, stays the real one)."""
    for name, classes in (("awsglue.context", {"GlueContext": GlueContext}),
                          ("awsglue.job", {"Job": Job}),
                          ("awsglue.dynamicframe", {"DynamicFrame": DynamicFrame,
                                                    "DynamicFrameReader": DynamicFrameReader})):
        module = ModuleType(name)
        for attribute, value in classes.items():
            setattr(module, attribute, value)
        monkeypatch.setitem(__import__("sys").modules, name, module)
    BOOKMARKS.clear()
    yield
