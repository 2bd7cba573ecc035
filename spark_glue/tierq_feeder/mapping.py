"""Source columns -> task fields, with the same rules as the HTTP API. A row that cannot
become a task gets a reject reason (naming the field) instead; the job does not fail.

All of it is Spark SQL (runs in the JVM): key, tenant, priority, run_at (as epoch
microseconds) and the payload as JSON text.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tierq.core.json_text import NUL_ESCAPE_PATTERN
from tierq.models.names import DEFAULT_TENANT, KEY_PATTERN, NAME_PATTERN
from tierq.models.tasks import MAX_DELAY_SECONDS
from tierq_feeder.config import ColumnMapping, FeedConfigError
from tierq_feeder.sources import col

KEY = "__tq_key"
TENANT = "__tq_tenant"
PRIORITY = "__tq_priority"
PAYLOAD = "__tq_payload"
RUN_AT_US = "__tq_run_at_us"
REASON = "__tq_reason"
ROW_JSON = "__tq_row_json"

NUMERIC = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
           T.DecimalType)


def check_columns(source: str, columns: Sequence[str], mapping: ColumnMapping) -> None:
    """Every mapped column must exist in the source (clear error, nothing written)."""
    known = set(columns)
    listing = ", ".join(columns)
    for argument, column in mapping.mapped():
        if column not in known:
            raise FeedConfigError(argument, f"source {source!r} has no column {column!r} "
                                            f"(columns: {listing})")
    for column in mapping.payload or ():
        if column not in known:
            raise FeedConfigError("--payload-columns", f"source {source!r} has no column "
                                                       f"{column!r} (columns: {listing})")


def _run_at(frame: DataFrame, column: str) -> Column:
    kind = frame.schema[column].dataType
    raw = col(column)
    if isinstance(kind, T.TimestampType | T.TimestampNTZType | T.DateType):
        return raw.cast("timestamp")
    if isinstance(kind, NUMERIC):  # epoch seconds
        return F.timestamp_seconds(raw.cast("double"))
    return F.to_timestamp(raw.cast("string"))


def copy_escaped(value: Column) -> Column:
    """A text value for COPY's text format: backslashes doubled (keys, tenants and JSON
    text never hold a raw tab, newline or carriage return)."""
    return F.replace(value, F.lit("\\"), F.lit("\\\\"))


def key_of(mapping: ColumnMapping) -> Column:
    """The task key of a source row (validated with the rest of the row by ``map_tasks``)."""
    return col(mapping.key).cast("string")


def tenant_of(mapping: ColumnMapping) -> Column:
    """The tenant of a source row: the tenant column, ``_`` when it is empty or absent."""
    if mapping.tenant is None:
        return F.lit(DEFAULT_TENANT)
    raw_tenant = col(mapping.tenant).cast("string")
    return F.when(raw_tenant.isNull() | (raw_tenant == ""), F.lit(DEFAULT_TENANT)) \
        .otherwise(raw_tenant)


def copy_fields() -> list[Column]:
    """The staged row's fields after its id and ord (tierq.logic.bulk.STAGE_COLUMNS) as
    COPY text, from the columns ``map_tasks`` adds: tenant, key, priority, payload, run_at
    (``\\N`` for now). For a row that maps (REASON null) none is null."""
    return [F.col(TENANT), copy_escaped(F.col(KEY)), F.col(PRIORITY).cast("string"),
            copy_escaped(F.col(PAYLOAD)),
            F.coalesce(F.col(RUN_AT_US).cast("string"), F.lit("\\N"))]


def map_tasks(frame: DataFrame, columns: Sequence[str], mapping: ColumnMapping, *,
              max_payload_chars: int, now_seconds: float) -> DataFrame:
    """Adds KEY, TENANT, PRIORITY, PAYLOAD, RUN_AT_US, REASON (null when the row maps) and
    ROW_JSON (the source row as JSON, for rejects only): everything of the task is decided
    here, in the JVM (``copy_fields`` turns it into COPY text)."""
    key = key_of(mapping)
    tenant = tenant_of(mapping)

    if mapping.priority is None:
        priority = F.lit(0)
        bad_priority = F.lit(False)
    else:
        raw_priority = col(mapping.priority)
        number = raw_priority.cast("double")
        ok = number.isNotNull() & (number == F.floor(number)) & number.between(0, 9)
        priority = F.when(raw_priority.isNull(), F.lit(0)).otherwise(number.cast("int"))
        bad_priority = raw_priority.isNotNull() & ~ok

    if mapping.run_at is None:
        run_at_us = F.lit(None).cast("long")
        bad_run_at = F.lit(False)
    else:
        stamp = _run_at(frame, mapping.run_at)
        run_at_us = F.unix_micros(stamp)
        bad_run_at = col(mapping.run_at).isNotNull() & stamp.isNull()

    payload_columns = list(mapping.payload) if mapping.payload is not None else list(columns)
    payload = F.to_json(F.struct(*[col(c).alias(c) for c in payload_columns]),
                        {"ignoreNullFields": "false"})
    # Two projections: the fields once, then the checks on them (Spark does not share an
    # expression between the branches of a CASE, and to_json is the costly one).
    fields = frame.select(
        "*",
        key.alias(KEY),
        tenant.alias(TENANT),
        priority.cast("int").alias(PRIORITY),
        payload.alias(PAYLOAD),
        run_at_us.alias(RUN_AT_US),
        bad_priority.alias("__tq_bad_priority"),
        bad_run_at.alias("__tq_bad_run_at"),
    )
    k, t, pl = F.col(KEY), F.col(TENANT), F.col(PAYLOAD)
    limit = F.lit(max_payload_chars)
    reason = (
        F.when(k.isNull() | (k == ""), F.lit("key: missing"))
        .when(~k.rlike(KEY_PATTERN),
              F.lit("key: longer than 512 characters or contains control characters"))
        .when(~t.rlike(NAME_PATTERN),
              F.lit("tenant: letters, digits, _ . - only, at most 64, not starting with . or -"))
        .when(F.col("__tq_bad_priority"),
              F.concat(F.lit("priority: must be an integer from 0 to 9, got "),
                       col(mapping.priority or mapping.key).cast("string")))
        .when(F.col("__tq_bad_run_at"), F.concat(F.lit("run_at: not a timestamp: "),
                                                 col(mapping.run_at or mapping.key)
                                                 .cast("string")))
        .when(F.col(RUN_AT_US) > F.lit(int((now_seconds + MAX_DELAY_SECONDS) * 1_000_000)),
              F.lit("run_at: must be within a year from now"))
        # a payload has at most as many characters as bytes: counting characters only
        # where the bytes are over the limit
        .when((F.octet_length(pl) > limit) & (F.length(pl) > limit),
              F.concat(F.lit("payload: "), F.length(pl).cast("string"),
                       F.lit(" characters once serialised; the limit is "),
                       limit.cast("string")))
        .when(pl.contains("\\u0000") & pl.rlike(NUL_ESCAPE_PATTERN),
              F.lit("payload: contains a NUL character (\\u0000), which cannot be stored"))
    )
    checked = fields.select("*", reason.alias(REASON))
    r = F.col(REASON)
    row_json = F.when(r.isNotNull(),
                      F.to_json(F.struct(*[col(c).alias(c) for c in columns]),
                                {"ignoreNullFields": "false"}))
    return checked.select(*[col(c) for c in fields.columns
                            if c not in ("__tq_bad_priority", "__tq_bad_run_at")],
                          r, row_json.alias(ROW_JSON))
