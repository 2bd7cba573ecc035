"""What differs under AWS Glue: job parameters, and sources read through the GlueContext so
that job bookmarks apply. Nothing here imports ``awsglue``: the entry point
(``jobs/feed_queue.py``) does, and passes the objects in.

Bookmarks and the offsets table work together:

* the offsets table (``tierq_feeder_offsets``) is the source of truth: it knows how far
  into each file (or JDBC order column) the feed got, also when back pressure stopped a
  run halfway through a file;
* a bookmark only saves reading: the job commits it (``job.commit()``) only after a run
  that consumed everything it read, so a file or row the bookmark skips was fed in full.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tierq.config import Settings
from tierq.dal import connect
from tierq_feeder.config import SourceSpec
from tierq_feeder.sources import Offsets, SparkLoader, read_files, read_jdbc
from tierq_feeder.writer import StoreConfig

if TYPE_CHECKING:  # Glue's runtime only
    from awsglue.context import GlueContext

log = logging.getLogger("tierq.feeder")

# Job parameters the template passes with the Lambda functions' names (see template.yaml).
# DB_SECRET_ARN is the application's login; DB_SSLMODE / DB_SSLROOTCERT default to
# verify-full with the system's roots, as on Lambda.
# VALKEY_IAM_USER / VALKEY_CACHE_NAME / VALKEY_IAM_REGION: the cache's user, authenticated
# with IAM tokens the job's role signs (tierq.dal.valkey_auth), on the driver and executors.
# TIERQ_WARM_CAPACITY_BYTES / TIERQ_TENANT_WARM_MAX_BYTES: the tenant's warm share, as the
# functions have it (ElastiCache refuses INFO, so without them a bulk warm-up has no bound).
STORE_PARAMETERS = ("DB_SECRET_ARN", "DB_HOST", "DB_PORT", "DB_NAME", "DB_SSLMODE",
                    "DB_SSLROOTCERT", "DATABASE_URL", "VALKEY_URL", "VALKEY_CLUSTER",
                    "VALKEY_IAM_USER", "VALKEY_CACHE_NAME", "VALKEY_IAM_REGION",
                    "TIERQ_WARM_CAPACITY_BYTES", "TIERQ_TENANT_WARM_MAX_BYTES")
_GLUE_FILE = "__tq_glue_file"
_GLUE_JDBC = {"jdbc:postgresql:": "postgresql", "jdbc:mysql:": "mysql",
              "jdbc:sqlserver:": "sqlserver", "jdbc:oracle:": "oracle",
              "jdbc:redshift:": "redshift"}
_GLUE_CSV_OPTIONS = {"header": "withHeader", "sep": "separator", "quote": "quoteChar",
                     "escape": "escaper"}


def present_options(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """The optional job parameters that were given (getResolvedOptions requires every name
    it is asked for)."""
    return [n for n in names if f"--{n}" in argv]


def stores_from_options(options: Mapping[str, str]) -> StoreConfig:
    """The stores' addresses from job parameters (or the environment), resolved once on
    the driver: a Secrets Manager secret becomes a database URL here."""
    given = {name: options[name] for name in STORE_PARAMETERS if options.get(name)}
    settings = Settings(**given)
    return StoreConfig(database_url=connect.database_url(settings),
                       valkey_url=connect.valkey_url(settings),
                       valkey_cluster=settings.valkey_cluster,
                       shard_urls=(options.get("TIERQ_SHARD_URLS")
                                   or os.environ.get("TIERQ_SHARD_URLS", "")),
                       valkey_iam_user=settings.valkey_iam_user or "",
                       valkey_cache_name=settings.valkey_cache_name or "",
                       valkey_iam_region=settings.valkey_iam_region or "",
                       warm_capacity_bytes=settings.warm_capacity_bytes,
                       tenant_warm_max_bytes=settings.tenant_warm_max_bytes)


class GlueBookmarkLoader(SparkLoader):
    """Reads through the GlueContext with a ``transformation_ctx`` per source, so job
    bookmarks skip what committed runs already read.

    * files: the bookmarked read tells which files are new; they are then read with
      Spark's file reader (whose ``_metadata`` column places every row in its file);
    * JDBC tables: read with ``jobBookmarkKeys`` = the order column; queries, and drivers
      Glue does not know, are read with plain Spark JDBC.
    """

    def __init__(self, glue_context: GlueContext) -> None:
        self.glue = glue_context

    def load(self, spark: SparkSession, spec: SourceSpec, offsets: Offsets) -> DataFrame | None:
        if spec.is_jdbc:
            return self._jdbc(spark, spec)
        frame = self.glue.create_dynamic_frame.from_options(
            connection_type="s3",
            connection_options={"paths": [spec.path], "recurse": True,
                                "attachFilename": _GLUE_FILE},
            format=spec.format,
            format_options=_glue_format_options(spec),
            transformation_ctx=f"source_{spec.name}",
        )
        files = sorted(r[0] for r in frame.toDF().select(F.col(_GLUE_FILE)).distinct().collect()
                       if r[0])
        log.info("source %s: %d new file(s) since the last committed bookmark", spec.name,
                 len(files))
        if not files:
            return None
        return read_files(spark, spec, files)

    def _jdbc(self, spark: SparkSession, spec: SourceSpec) -> DataFrame:
        kind = next((v for k, v in _GLUE_JDBC.items() if spec.url.startswith(k)), None)
        if kind is None or spec.table is None:
            return read_jdbc(spark, spec)
        options: dict[str, Any] = {
            "url": spec.url, "dbtable": spec.table,
            "jobBookmarkKeys": [spec.order_column], "jobBookmarkKeysSortOrder": "asc",
            **spec.options,
        }
        frame = self.glue.create_dynamic_frame.from_options(
            connection_type=kind, connection_options=options,
            transformation_ctx=f"source_{spec.name}")
        table: DataFrame = frame.toDF()  # a DynamicFrame's Spark DataFrame
        return table


def _glue_format_options(spec: SourceSpec) -> dict[str, Any]:
    if spec.format != "csv":
        return {}
    options: dict[str, Any] = {"withHeader": True}
    for name, value in spec.options.items():
        if name in _GLUE_CSV_OPTIONS:
            options[_GLUE_CSV_OPTIONS[name]] = value.lower() == "true" if name == "header" \
                else value
    return options
