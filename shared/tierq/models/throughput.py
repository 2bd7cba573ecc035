"""The throughput of a queue: tasks enqueued and acked per second over the last 15 minutes
(``GET /v1/queues/{queue}/throughput``, ``Tierq.throughput``; kept in the warm tier,
dal/throughput.py)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from tierq.models.envelope_base import Envelope


class QueueThroughput(Envelope):
    """Counts per second of one queue, summed over the tenants counted, on the warm tier's
    clock. ``enqueued[i]`` and ``acked[i]`` are the counts of the second ``start + i``."""

    queue: str
    tenant: str | None = Field(
        description="The tenant counted; null: every tenant of the queue, summed.")
    tenants: int = Field(description="How many tenants' counts were read.")
    start: datetime = Field(description="The first second of the window.")
    end: datetime = Field(description="The last second of the window (the current one).")
    bucket_seconds: int = Field(description="The length of a bucket: 1 second.")
    enqueued: list[int] = Field(
        description="Tasks created by enqueues, per second, oldest first (900 values).")
    acked: list[int] = Field(
        description="Tasks acknowledged, per second, oldest first (900 values).")
    enqueued_total: int = Field(description="The sum of `enqueued`.")
    acked_total: int = Field(description="The sum of `acked`.")
