"""Queues: ``GET /v1/queues``, ``GET /v1/queues/{queue}`` (settings, live counts, mode) and
``PUT /v1/queues/{queue}`` (change settings; only the fields given change).

=========================  ===============================================================
the caller                 what ``GET /v1/queues/{queue}`` answers
=========================  ===============================================================
admin (or local)           the queue's admin view (:class:`QueueView`): every setting, every
                           tenant's counts, the limits' use; 404 for a name with no settings
                           and no tasks
pinned to a tenant         its tenant view (:class:`TenantQueueView`): the settings workers
                           read and its own counts; 200 for every valid name (the defaults
                           and zero counts until its tenant has used the queue), so the
                           answer tells nothing about other tenants' queues
=========================  ===============================================================

``GET /v1/queues`` lists admin views for an admin, and for a pinned caller the tenant views of
the queues its tenant has had tasks in. A pinned caller may not change settings, which every
tenant of the queue shares."""

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
from tierq.models.queues import AnyQueueView, TenantQueueView

router = Router()

MAX_PAGE = 1000
DEFAULT_PAGE = 100
CURSOR = paging.CursorForm("queues", (paging.CursorPart("queue", paging.NAME_PART),))




@router.get(
    "/v1/queues",
    summary="List queues",
    description="In name order, at most `limit` per page and never more than fits a Lambda "
                "response (6 MB as the runtime writes it): a page may hold fewer. `next` is "
                "the cursor of the next page, null on the last. An admin gets every queue "
                "that has settings or has had tasks, as admin views (`view: admin`); a "
                "caller pinned to a tenant gets the queues its tenant has had tasks in, as "
                "tenant views (`view: tenant`: the settings workers read, its own counts).",
    operation_id="listQueues",
    tags=["queues"],
    responses=responses("The queues, in name order."),
)
def list_queues(
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = DEFAULT_PAGE,
    after: Annotated[str | None, CURSOR.query()] = None,
) -> QueueList:
    pinned = request.pinned_tenant()
    start = CURSOR.decode(after)
    first = start[0] if start else ""
    views: list[QueueView | TenantQueueView]
    if pinned is None:
        admin, last = paging.fill(iter(engine().queue_views_after(first, limit=limit + 1)),
                                  lambda view: view.queue, limit=limit)
        views = list(admin)
    else:
        own, last = paging.fill(
            iter(engine().tenant_queues_after(first, limit=limit + 1, tenant=pinned)),
            lambda view: view.queue, limit=limit)
        views = list(own)
    return QueueList(queues=views,
                     next=None if last is None else CURSOR.encode(last))


@router.get(
    "/v1/queues/<queue>",
    summary="A queue's settings and live counts",
    description="For an admin, the admin view (`view: admin`): every setting, the counts of "
                "every tenant, the limits' use; 404 for a name with no settings and no "
                "tasks. For a caller pinned to a tenant, the tenant view (`view: tenant`): "
                "the settings its workers read (lease_seconds, max_attempts, backoff, "
                "paused) and its own counts, for any valid name — the deployment's defaults "
                "and zero counts until its tenant has used the queue, never 404 — so it "
                "tells nothing of other tenants.",
    operation_id="getQueue",
    tags=["queues"],
    responses=responses("Settings, counts (warm, cold, delayed, leased, dead) and mode.", 404),
)
def get_queue(queue: QueuePath) -> AnyQueueView:
    pinned = request.pinned_tenant()
    if pinned is not None:
        return engine().tenant_queue(queue, pinned)
    if not engine().queue_known(queue):
        raise NotFound(f"no queue {queue!r} (it has no settings and never had tasks)")
    return engine().get_queue(queue)


@router.put(
    "/v1/queues/<queue>",
    summary="Create a queue or change its settings",
    description="Fields: warm_max, warm_max_bytes, lease_seconds, max_attempts, backoff "
                "{kind fixed|linear|exponential, base_seconds, cap_seconds, jitter}, "
                "retention_seconds, paused; the limits on claims max_leased, rate "
                "{per_second, burst}, tenant_max_leased, tenant_rate {per_second, burst}; "
                "consumer {function, batch_size 1-100 (10), max_concurrency, "
                "max_batching_window_ms 0-300000 (0)}; group_max_leased 1-1000 (1): a "
                "group's tasks active at once. "
                "Fields left out keep their value; null clears a limit or the consumer "
                "(group_max_leased: back to 1).",
    operation_id="putQueue",
    tags=["queues"],
    responses=responses("The queue with its new settings.", 403),
)
def put_queue(queue: QueuePath, body: Annotated[QueueSettingsUpdate, Body()]) -> QueueView:
    if request.pinned_tenant() is not None:
        raise Forbidden("a caller pinned to a tenant cannot change queue settings, which all "
                        "tenants of the queue share")
    engine().put_queue(queue, body)
    return engine().get_queue(queue)
