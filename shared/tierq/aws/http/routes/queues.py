"""Queues: ``GET /v1/queues``, ``GET /v1/queues/{queue}`` (settings, live counts, mode) and
``PUT /v1/queues/{queue}`` (change settings; only the fields given change).

A caller pinned to a tenant sees only its own tenant's counts and may not change settings,
which every tenant of the queue shares."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from tierq.aws.http import paging, request
from tierq.aws.http.errors import responses
from tierq.aws.http.params import QueuePath
from tierq.aws.runtime import engine
from tierq.errors import Forbidden, NotFound
from tierq.models import QueueSettingsUpdate, QueueView
from tierq.models.envelopes import QueueList

router = Router()

MAX_PAGE = 1000
DEFAULT_PAGE = 100
CURSOR = paging.CursorForm("queues", (paging.CursorPart("queue", paging.NAME_PART),))


def view(queue: str) -> QueueView:
    """A queue as the caller sees it: a pinned tenant, its own counts only."""
    return engine().get_queue(queue, request.pinned_tenant())


@router.get(
    "/v1/queues",
    summary="List queues",
    description="In name order, at most `limit` per page and never more than fits a Lambda "
                "response (6 MB as the runtime writes it): a page may hold fewer. `next` is "
                "the cursor of the next page, null on the last. A caller pinned to a tenant "
                "gets only the queues its tenant has had tasks in, with its own counts.",
    operation_id="listQueues",
    tags=["queues"],
    responses=responses("Every queue that has settings or has had tasks."),
)
def list_queues(
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = DEFAULT_PAGE,
    after: Annotated[str | None, CURSOR.query()] = None,
) -> QueueList:
    pinned = request.pinned_tenant()
    start = CURSOR.decode(after)
    source = engine().queue_views_after(start[0] if start else "", tenant=pinned,
                                        limit=limit + 1)
    views, last = paging.fill(iter(source), lambda view: view.queue, limit=limit)
    return QueueList(queues=views,
                     next=None if last is None else CURSOR.encode(last))


@router.get(
    "/v1/queues/<queue>",
    summary="A queue's settings and live counts",
    operation_id="getQueue",
    tags=["queues"],
    responses=responses("Settings, counts (warm, cold, delayed, leased, dead) and mode.", 404),
)
def get_queue(queue: QueuePath) -> QueueView:
    if not engine().queue_known(queue):
        raise NotFound(f"no queue {queue!r} (it has no settings and never had tasks)")
    return view(queue)


@router.put(
    "/v1/queues/<queue>",
    summary="Create a queue or change its settings",
    description="Fields: warm_max, warm_max_bytes, lease_seconds, max_attempts, backoff "
                "{kind fixed|linear|exponential, base_seconds, cap_seconds, jitter}, "
                "retention_seconds, paused; the limits on claims max_leased, rate "
                "{per_second, burst}, tenant_max_leased, tenant_rate {per_second, burst}; "
                "consumer {function, batch_size 1-100 (10), max_concurrency, "
                "max_batching_window_ms 0-300000 (0)}. "
                "Fields left out keep their value; null clears a limit or the consumer.",
    operation_id="putQueue",
    tags=["queues"],
    responses=responses("The queue with its new settings.", 403),
)
def put_queue(queue: QueuePath, body: Annotated[QueueSettingsUpdate, Body()]) -> QueueView:
    if request.pinned_tenant() is not None:
        raise Forbidden("a caller pinned to a tenant cannot change queue settings, which all "
                        "tenants of the queue share")
    engine().put_queue(queue, body)
    return view(queue)
