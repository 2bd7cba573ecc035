"""A queue's throughput as a caller sees it: one tenant's counts, or every tenant's summed
(the counts: dal/throughput.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from tierq.logic.context import Context
from tierq.models.throughput import QueueThroughput


def queue_throughput(ctx: Context, queue: str, tenant: str | None = None) -> QueueThroughput:
    """Enqueued and acked per second over the last 15 minutes, of ``tenant`` or (None) of
    every tenant counted in that time."""
    series = ctx.warm.throughput.read(queue, None if tenant is None else [tenant])
    return QueueThroughput(
        queue=queue, tenant=tenant, tenants=series.tenants,
        start=datetime.fromtimestamp(series.start, UTC),
        end=datetime.fromtimestamp(series.end, UTC), bucket_seconds=1,
        enqueued=series.enqueued, acked=series.acked,
        enqueued_total=sum(series.enqueued), acked_total=sum(series.acked))
