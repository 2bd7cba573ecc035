"""The feeder's arguments: one parser for the local command line and for Glue (where the
same arguments arrive as one job parameter, ``--feed_args``). Bad arguments raise
``FeedConfigError`` naming the argument, before anything is read or written."""

from __future__ import annotations

import argparse
import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NoReturn, TypeGuard

from tierq.models.names import NAME_PATTERN

FileFormat = Literal["parquet", "csv", "json"]
FILE_FORMATS: tuple[FileFormat, ...] = ("parquet", "csv", "json")
EXTENSIONS: dict[str, FileFormat] = {
    ".parquet": "parquet", ".pq": "parquet",
    ".csv": "csv", ".tsv": "csv",
    ".json": "json", ".jsonl": "json", ".ndjson": "json",
}
_NAME = re.compile(NAME_PATTERN)

DEFAULT_MAX_BACKLOG = 100_000
# a round costs about a second whatever its size (its Spark job planned and started, its
# writers filling up and draining): 1M rows (~12 s at the rate measured in bench/) keep
# that under a tenth. A round is never larger than the room under --max-backlog (100,000
# by default), and a run stopped midway feeds at most one round again (as repeats, ignored)
DEFAULT_BATCH_ROWS = 1_000_000
DEFAULT_CHUNK_ROWS = 50_000


class FeedConfigError(ValueError):
    """A bad job argument; the message starts with the argument's name."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument


@dataclass(frozen=True)
class SourceSpec:
    """One source: files (``path`` + ``format``) or a JDBC table/query."""

    name: str
    format: Literal["parquet", "csv", "json", "jdbc"]
    path: str = ""                 # files: a file, folder or glob, on disk or S3
    url: str = ""                  # jdbc: the JDBC URL (credentials in it or in options)
    table: str | None = None       # jdbc: a table ...
    query: str | None = None       # jdbc: ... or a query
    order_column: str | None = None  # jdbc: unique, increasing; progress is kept on it
    options: dict[str, str] = field(default_factory=dict)  # reader options

    @property
    def is_jdbc(self) -> bool:
        return self.format == "jdbc"


@dataclass(frozen=True)
class ColumnMapping:
    """Which source columns make a task."""

    key: str
    payload: tuple[str, ...] | None = None   # None: every column of the source
    priority: str | None = None
    tenant: str | None = None
    run_at: str | None = None

    def mapped(self) -> list[tuple[str, str]]:
        """(argument, column) of every single column named."""
        pairs = [("--key-column", self.key)]
        for argument, column in (("--priority-column", self.priority),
                                 ("--tenant-column", self.tenant),
                                 ("--run-at-column", self.run_at)):
            if column is not None:
                pairs.append((argument, column))
        return pairs


@dataclass(frozen=True)
class Strategy:
    """``fair``: round-robin across sources, row by row, in the order they were given.
    ``prefer:<source>``: that source while it has rows, then fair across the rest."""

    preferred: str | None = None

    @classmethod
    def parse(cls, text: str, source_names: Sequence[str]) -> Strategy:
        if text == "fair":
            return cls()
        kind, sep, name = text.partition(":")
        if kind != "prefer" or not sep or not name:
            raise FeedConfigError("--strategy",
                                  f"expected 'fair' or 'prefer:<source>', got {text!r}")
        if name not in source_names:
            raise FeedConfigError(
                "--strategy", f"prefers {name!r}, which is not a source "
                f"(sources: {', '.join(source_names)})")
        return cls(preferred=name)

    def __str__(self) -> str:
        return "fair" if self.preferred is None else f"prefer:{self.preferred}"


@dataclass(frozen=True)
class FeedConfig:
    queue: str
    sources: tuple[SourceSpec, ...]
    mapping: ColumnMapping
    strategy: Strategy = field(default_factory=Strategy)
    max_backlog: int = DEFAULT_MAX_BACKLOG
    batch_rows: int = DEFAULT_BATCH_ROWS
    feed: str = ""                   # the offsets' identity; defaults to the queue
    rejects_path: str | None = None  # where rows that cannot be mapped go (JSON lines)
    write_partitions: int | None = None  # parallel writers; None: Spark's parallelism
    chunk_rows: int = DEFAULT_CHUNK_ROWS  # rows per writer transaction
    max_rows: int | None = None      # at most this many source rows per run
    max_wait_seconds: float = 0.0    # wait this long for room when the backlog is full
    poll_seconds: float = 5.0
    warm_after: bool = True          # warm the first batch of each (queue, tenant) at the end

    @property
    def feed_name(self) -> str:
        return self.feed or self.queue

    def source_names(self) -> list[str]:
        return [s.name for s in self.sources]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return value


_ARGUMENT_ERROR = re.compile(r"^argument (\S+?)(?:/\S+)?: (.*)$", re.DOTALL)


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so Glue and tests see the message."""

    def error(self, message: str) -> NoReturn:
        match = _ARGUMENT_ERROR.match(message)
        if match:
            raise FeedConfigError(match[1], match[2])
        raise FeedConfigError("arguments", message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="feed_queue.py",
        description="Feed a tierq queue from files or JDBC sources, with back pressure.",
    )
    p.add_argument("--queue", required=True, help="the queue to feed")
    p.add_argument("--source", action="append", required=True, metavar="NAME=SPEC",
                   help="NAME=PATH[:FORMAT] (parquet, csv, json; on disk or s3://) or "
                        "NAME=jdbc:URL (then --jdbc-table or --jdbc-query, and --order-column)")
    p.add_argument("--jdbc-table", action="append", default=[], metavar="NAME=TABLE")
    p.add_argument("--jdbc-query", action="append", default=[], metavar="NAME=SQL")
    p.add_argument("--order-column", action="append", default=[], metavar="NAME=COLUMN",
                   help="JDBC: a unique, increasing column; progress is remembered on it")
    p.add_argument("--read-option", action="append", default=[], metavar="NAME.OPTION=VALUE",
                   help="a Spark reader option for one source, e.g. orders.sep=;")
    p.add_argument("--key-column", required=True)
    p.add_argument("--payload-columns", default=None,
                   help="comma-separated; default: every column of the source")
    p.add_argument("--priority-column")
    p.add_argument("--tenant-column")
    p.add_argument("--run-at-column")
    # refused (config_from_args): a bulk load cannot place tasks in their groups
    p.add_argument("--group-column", help=argparse.SUPPRESS)
    p.add_argument("--strategy", default="fair", help="fair | prefer:NAME")
    p.add_argument("--max-backlog", type=_positive, default=DEFAULT_MAX_BACKLOG,
                   help="write only while ready + delayed + leased tasks stay below this")
    p.add_argument("--batch-rows", type=_positive, default=DEFAULT_BATCH_ROWS,
                   help="rows per round, at most (the backlog is looked at before each "
                        "round; default 1,000,000)")
    p.add_argument("--feed", default="", help="name under which progress is kept "
                                              "(default: the queue's name)")
    p.add_argument("--rejects", default=None, metavar="PATH",
                   help="where unmappable rows go, as JSON lines (default: "
                        "./tierq-rejects/<feed>, or <TempDir>/tierq-rejects/<feed> on Glue)")
    p.add_argument("--write-partitions", type=_positive, default=None)
    p.add_argument("--chunk-rows", type=_positive, default=DEFAULT_CHUNK_ROWS,
                   help="rows per writer transaction")
    p.add_argument("--max-rows", type=_positive, default=None,
                   help="consume at most this many source rows in this run")
    p.add_argument("--max-wait-seconds", type=_seconds, default=0.0,
                   help="when the backlog is full, wait up to this long for room")
    p.add_argument("--poll-seconds", type=_seconds, default=5.0)
    p.add_argument("--no-warm", action="store_true",
                   help="leave warming to the scheduled cold -> warm mover")
    return p


def _pairs(argument: str, values: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise FeedConfigError(argument, f"expected NAME=VALUE, got {value!r}")
        if name in out:
            raise FeedConfigError(argument, f"given twice for {name!r}")
        out[name] = rest
    return out


def parse_source(name: str, spec: str) -> SourceSpec:
    """``PATH[:FORMAT]`` or ``jdbc:URL`` (table/query/order come from their own options)."""
    if spec.startswith("jdbc:"):
        return SourceSpec(name=name, format="jdbc", url=spec)
    path, sep, suffix = spec.rpartition(":")
    named = suffix.lower()
    if sep and _is_file_format(named):
        fmt: FileFormat = named
    else:
        path = spec
        fmt = _format_from_path(name, spec)
    if not path:
        raise FeedConfigError("--source", f"{name}: no path given")
    return SourceSpec(name=name, format=fmt, path=path)


def _is_file_format(value: str) -> TypeGuard[FileFormat]:
    return value in FILE_FORMATS


def _format_from_path(name: str, path: str) -> FileFormat:
    lowered = path.lower().rstrip("/")
    for extension, fmt in EXTENSIONS.items():
        if lowered.endswith(extension):
            return fmt
    if lowered.rsplit("/", 1)[-1].count(".") and not lowered.endswith("*"):
        raise FeedConfigError(
            "--source", f"{name}: cannot tell the format of {path!r}; "
            f"add :parquet, :csv or :json")
    return "parquet"  # a folder: Spark's own default


def config_from_args(argv: Sequence[str]) -> FeedConfig:
    """Parse and check the job's arguments."""
    a = build_parser().parse_args(list(argv))
    if a.group_column is not None:
        raise FeedConfigError("--group-column",
                              "the feeder does not load tasks with a group (a group's "
                              "order needs each enqueue to take its lock): enqueue grouped "
                              "tasks through the API")
    if not _NAME.match(a.queue):
        raise FeedConfigError("--queue", f"{a.queue!r} is not a valid queue name "
                                         f"(letters, digits, _ . -; at most 64)")
    specs = _pairs("--source", a.source)
    for name in specs:
        if not _NAME.match(name):
            raise FeedConfigError("--source", f"{name!r} is not a valid source name")
    tables = _pairs("--jdbc-table", a.jdbc_table)
    queries = _pairs("--jdbc-query", a.jdbc_query)
    orders = _pairs("--order-column", a.order_column)
    options: dict[str, dict[str, str]] = {}
    for item in a.read_option:
        target, sep, value = item.partition("=")
        source, dot, option = target.partition(".")
        if not sep or not dot or not source or not option:
            raise FeedConfigError("--read-option", f"expected NAME.OPTION=VALUE, got {item!r}")
        options.setdefault(source, {})[option] = value
    for argument, named in (("--jdbc-table", tables), ("--jdbc-query", queries),
                            ("--order-column", orders), ("--read-option", options)):
        for name in named:
            if name not in specs:
                raise FeedConfigError(argument, f"{name!r} is not a source")

    sources: list[SourceSpec] = []
    for name, spec in specs.items():
        source = parse_source(name, spec)
        if source.is_jdbc:
            if (name in tables) == (name in queries):
                raise FeedConfigError("--jdbc-table", f"{name}: give --jdbc-table or "
                                                      f"--jdbc-query (one of them)")
            if name not in orders:
                raise FeedConfigError("--order-column", f"{name}: a JDBC source needs a "
                                      f"unique, increasing order column to remember progress")
            source = SourceSpec(name=name, format="jdbc", url=source.url,
                                table=tables.get(name), query=queries.get(name),
                                order_column=orders[name], options=options.get(name, {}))
        else:
            if name in tables or name in queries or name in orders:
                raise FeedConfigError("--source", f"{name}: --jdbc-table, --jdbc-query and "
                                      f"--order-column apply to JDBC sources only")
            source = SourceSpec(name=name, format=source.format, path=source.path,
                                options=options.get(name, {}))
        sources.append(source)

    payload = None
    if a.payload_columns is not None:
        payload = tuple(c.strip() for c in a.payload_columns.split(",") if c.strip())
        if not payload:
            raise FeedConfigError("--payload-columns", "names no column")
        if len(set(payload)) != len(payload):
            raise FeedConfigError("--payload-columns", "names a column twice")
    mapping = ColumnMapping(key=a.key_column, payload=payload, priority=a.priority_column,
                            tenant=a.tenant_column, run_at=a.run_at_column)
    if a.feed and not _NAME.match(a.feed):
        raise FeedConfigError("--feed", f"{a.feed!r} is not a valid feed name")
    return FeedConfig(
        queue=a.queue,
        sources=tuple(sources),
        mapping=mapping,
        strategy=Strategy.parse(a.strategy, list(specs)),
        max_backlog=a.max_backlog,
        batch_rows=a.batch_rows,
        feed=a.feed,
        rejects_path=a.rejects,
        write_partitions=a.write_partitions,
        chunk_rows=a.chunk_rows,
        max_rows=a.max_rows,
        max_wait_seconds=a.max_wait_seconds,
        poll_seconds=a.poll_seconds,
        warm_after=not a.no_warm,
    )


def config_from_glue_options(options: dict[str, str]) -> FeedConfig:
    """Under Glue every job parameter is one string: the feeder's arguments come as
    ``--feed_args "<the same arguments as on the command line>"``."""
    text = options.get("feed_args")
    if not text:
        raise FeedConfigError("--feed_args", "missing: pass the feeder's arguments as one "
                                             "job parameter, e.g. --queue q --source a=s3://…")
    return config_from_args(shlex.split(text))
