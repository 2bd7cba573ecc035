"""Push delivery's numbers: ``GET /v1/metrics/consumers`` — per queue with a consumer
function, its consumer and what the dispatcher did with it (batches, tasks dispatched,
acked, retried, dead, released, invocations throttled and failed) and the invocations
running now. The counters are kept in Valkey on the queue's own key
(tierq.logic.dispatch.counters.record_counts) since the queue's first batch; CloudWatch gets the
same as ``Dispatched``, ``Throttled`` and ``ConsumerErrors`` (tierq.aws.metrics).

An admin route: a queue's consumer is a setting every tenant of the queue shares."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import Field

from tierq.aws.http import paging
from tierq.aws.http.errors import responses
from tierq.aws.runtime import default_engine
from tierq.models.base import Model

router = Router()

MAX_PAGE = 1000
DEFAULT_PAGE = 100
CURSOR = paging.CursorForm("consumers", (paging.CursorPart("queue", paging.NAME_PART),))


class ConsumerMetrics(Model):
    queue: str
    function: str
    batch_size: int
    max_concurrency: int | None
    running: int = Field(description="Invocations of the queue's consumer running now.")
    batches: int = Field(description="Invocations made.")
    dispatched: int = Field(description="Tasks handed to the function (Dispatched).")
    acked: int
    retried: int = Field(description="Tasks nacked (a function error or batchItemFailures) "
                                      "to run again.")
    dead: int = Field(description="Tasks nacked at their last attempt.")
    released: int = Field(description="Tasks given back without an attempt (throttled, not "
                                      "invoked, past the invoke's size).")
    throttled: int = Field(description="Invocations throttled (Throttled).")
    consumer_errors: int = Field(description="Invocations that failed: a function error, an "
                                             "invoke refused or cut off (ConsumerErrors).")


class ConsumerMetricsList(Model):
    consumers: list[ConsumerMetrics]
    timestamp: datetime
    next: str | None = Field(default=None, description="Cursor of the next page.")


def consumer_metrics(after: str) -> Iterator[ConsumerMetrics]:
    # the dispatcher's slots and counters: imported by this route's first request, not at
    # the admin function's cold start (docs/architecture.md, the Lambda runtime)
    from tierq.logic.dispatch import InvocationSlots, read_counts

    # queue settings are written to every shard, and the counters are in the warm tier
    ctx = default_engine().ctx
    slots = InvocationSlots(ctx)
    for queue in ctx.store.consumer_queues():
        if queue <= after:
            continue
        consumer = ctx.queue_settings.get(queue).consumer
        if consumer is None:  # removed meanwhile
            continue
        counts = read_counts(ctx, queue)
        yield ConsumerMetrics(
            queue=queue, function=consumer.function, batch_size=consumer.batch_size,
            max_concurrency=consumer.max_concurrency, running=slots.running(queue),
            batches=counts.batches, dispatched=counts.dispatched, acked=counts.acked,
            retried=counts.retried, dead=counts.dead, released=counts.released,
            throttled=counts.throttled, consumer_errors=counts.consumer_errors)


@router.get(
    "/v1/metrics/consumers",
    summary="Push delivery per queue with a consumer function",
    description="One row per queue that names a consumer, in name order: the consumer, the "
                "invocations running now (counted when max_concurrency is set) and the "
                "dispatcher's counters since the queue's first batch. At most `limit` per "
                "page and never more than fits a Lambda response; `next` is the cursor of "
                "the next page, null on the last.",
    operation_id="consumerMetrics",
    tags=["metrics"],
    responses=responses("One row per queue with a consumer.", 403),
)
def consumers(
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = DEFAULT_PAGE,
    after: Annotated[str | None, CURSOR.query()] = None,
) -> ConsumerMetricsList:
    start = CURSOR.decode(after)
    rows, last = paging.fill(consumer_metrics(start[0] if start else ""),
                             lambda row: row.queue, limit=limit)
    return ConsumerMetricsList(consumers=rows, timestamp=datetime.now(UTC),
                               next=None if last is None else CURSOR.encode(last))
