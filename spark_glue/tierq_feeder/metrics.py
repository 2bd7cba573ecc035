"""What a run reports: a summary (log, metrics, the command's last line) and progress."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger("tierq.feeder")


@dataclass
class FeedResult:
    queue: str
    feed: str
    created: int = 0
    ignored: int = 0      # duplicates inside a batch, and keys already live in the queue
    rejected: int = 0     # rows that could not become tasks (see the rejects output)
    deferred: int = 0     # rows left in the sources for a later run (back pressure)
    consumed: int = 0     # source rows this run went through (= created+ignored+rejected)
    rounds: int = 0
    seconds: float = 0.0
    # of ``seconds``, those in rounds: each from its look at the backlog to its saved
    # offsets (its tenants' look-ahead and the wait for the Python workers included); the
    # rest is Spark's start, reading the sources, waits for room and the final warm-up
    rounds_seconds: float = 0.0
    backlog_counts: int = 0  # how many times the queue's backlog was counted (BacklogGauge)
    stopped_by: str = "drained"  # drained | backlog | max_rows | nothing_to_do
    ready_tenants: set[str] = field(default_factory=set)
    rejects_path: str | None = None

    @property
    def rows_per_second(self) -> float:
        return self.consumed / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """The command's last line."""
        return (f"created={self.created} ignored={self.ignored} deferred={self.deferred} "
                f"rejected={self.rejected}")

    def summary(self) -> str:
        return (f"feed {self.feed!r} -> queue {self.queue!r}: {self.line()} in {self.rounds} "
                f"round(s), {self.seconds:.1f} s ({self.rounds_seconds:.1f} s of it in "
                f"rounds; the backlog counted {self.backlog_counts} time(s)), "
                f"{self.rows_per_second:,.1f} rows/s (stopped: {self.stopped_by})")


class MetricsSink(Protocol):
    def emit(self, result: FeedResult) -> None: ...


class LogMetrics:
    """Metrics as one log line (always on)."""

    def emit(self, result: FeedResult) -> None:
        log.info("metrics queue=%s feed=%s created=%d ignored=%d deferred=%d rejected=%d "
                 "rows_per_second=%.1f rounds_seconds=%.3f", result.queue, result.feed,
                 result.created, result.ignored, result.deferred, result.rejected,
                 result.rows_per_second, result.rounds_seconds)


class MetricDataClient(Protocol):
    """What ``CloudWatchMetrics`` calls on a CloudWatch client (boto3's)."""

    def put_metric_data(self, *, Namespace: str,
                        MetricData: list[dict[str, Any]]) -> object: ...


class CloudWatchMetrics:
    """The run's counts as CloudWatch metrics (namespace ``Tierq``, dimension ``queue``),
    beside Glue's own job metrics."""

    NAMESPACE = "Tierq"

    def __init__(self, client: MetricDataClient | None = None,
                 namespace: str = NAMESPACE) -> None:
        if client is None:
            import boto3  # type: ignore[import-untyped]  # boto3 ships no types (Glue has it)

            client = boto3.client("cloudwatch")
        self.client = client
        self.namespace = namespace

    def emit(self, result: FeedResult) -> None:
        dims = [{"Name": "queue", "Value": result.queue}]
        counts = {"FeederCreated": result.created, "FeederIgnored": result.ignored,
                  "FeederDeferred": result.deferred, "FeederRejected": result.rejected}
        data: list[dict[str, Any]] = [
            {"MetricName": name, "Dimensions": dims, "Value": float(value), "Unit": "Count"}
            for name, value in counts.items()
        ]
        data.append({"MetricName": "FeederRowsPerSecond", "Dimensions": dims,
                     "Value": result.rows_per_second, "Unit": "Count/Second"})
        self.client.put_metric_data(Namespace=self.namespace, MetricData=data)


class Progress:
    """One log line per round: how far the run is, and how fast."""

    def __init__(self, total: int) -> None:
        self.total = total

    def round(self, number: int, end: int, backlog: str, room: int, created: int,
              ignored: int, rejected: int, rows_per_second: float) -> None:
        share = 100.0 * end / self.total if self.total else 100.0
        log.info("round %d: %s/%s rows (%.1f%%) backlog=%s room=%d created=%d ignored=%d "
                 "rejected=%d %.1f rows/s", number, f"{end:,}", f"{self.total:,}", share,
                 backlog, room, created, ignored, rejected, rows_per_second)
