"""``POST /v1/queues/{queue}/tasks``: enqueue one task, or ``{"tasks": [...]}`` (≤ 500) in
one transaction. A single task gets its outcome back (``{id, outcome, state, tenant, key}``),
a batch ``{"tasks": [outcome, ...]}`` in request order."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from tierq.aws import metrics
from tierq.aws.http import idempotency, request, traces
from tierq.aws.http.errors import responses
from tierq.aws.http.idempotency import IdempotencyKeyHeader
from tierq.aws.http.models import EnqueueBody, TaskBatch
from tierq.aws.http.params import QueuePath
from tierq.aws.http.traces import AmznTraceIdHeader, TraceparentHeader, TracestateHeader
from tierq.aws.runtime import default_engine, engine
from tierq.errors import InvalidInput, TierqError
from tierq.models import EnqueueOutcome, TaskIn
from tierq.models.envelopes import EnqueueResults

router = Router()

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _field(single: bool, index: int, name: str) -> str:
    return name if single else f"tasks[{index}].{name}"


def check_tasks(tasks: list[TaskIn], single: bool) -> None:
    """What the models cannot say: tenants against the pinned one, run_at in range."""
    request.check_tenants(
        (_field(single, i, "tenant"), task.tenant) for i, task in enumerate(tasks)
    )
    for i, task in enumerate(tasks):
        if task.run_at is None:
            continue
        # the year as written (the document's pattern), before its offset applies
        try:
            in_range = task.run_at.year >= EPOCH.year
            task.run_at.timestamp()
        except (OverflowError, ValueError, OSError):
            in_range = False
        if not in_range:
            raise InvalidInput.field(_field(single, i, "run_at"),
                                     "must be in the year 1970 or later")


def _single_names(exc: TierqError) -> TierqError:
    """The engine names a lone task's fields ``task.x``; the body of a single-task request
    is the task itself, so here they are ``x``."""
    exc.message = exc.message.removeprefix("task.")
    for detail in exc.details:
        field = detail.get("field")
        if isinstance(field, str):
            detail["field"] = field.removeprefix("task.")
    return exc


@router.post(
    "/v1/queues/<queue>/tasks",
    summary="Enqueue one task or a batch",
    description="One task object, or {\"tasks\": [...]} with at most 500. Each task: payload "
                "(any JSON, ≤ 256 KiB), key (idempotency), priority 0 to 9, delay_seconds or "
                "run_at (≤ a year ahead), tenant, max_attempts, on_conflict ignore|replace; "
                "after (ids of tasks it waits for), on_parent_failure, "
                "wait_timeout_seconds; group (claimed in enqueue order, at most the queue's "
                "group_max_leased at once; the others are held); trace (the producer's "
                "traceparent, tracestate, aws_trace_header; by default the request's "
                "traceparent, tracestate and X-Amzn-Trace-Id headers). Nothing is written "
                "when any task is invalid.",
    operation_id="enqueueTasks",
    tags=["tasks"],
    responses=responses("Outcome per task: created, updated or ignored (a live task holds "
                        "the key), and the state it is in.", 403, 409, 413),
)
def enqueue_tasks(
    queue: QueuePath,
    body: Annotated[EnqueueBody, Body(description="One task, or {\"tasks\": [...]}.")],
    idempotency_key: IdempotencyKeyHeader = None,
    traceparent: TraceparentHeader = None,
    tracestate: TracestateHeader = None,
    x_amzn_trace_id: AmznTraceIdHeader = None,
) -> Response[EnqueueOutcome | EnqueueResults]:
    single = not isinstance(body, TaskBatch)
    tasks = [body] if isinstance(body, TaskIn) else body.tasks
    check_tasks(tasks, single)
    traces.apply(tasks, traceparent, tracestate, x_amzn_trace_id)
    try:
        outcomes = engine().enqueue(queue, tasks, tenant=request.pinned_tenant(),
                                    **idempotency.keyed(idempotency_key))
    except TierqError as exc:
        raise _single_names(exc) if single else exc from None
    if not outcomes.idempotent_replay:
        metrics.count_queue(default_engine().ctx, queue, {
            "Enqueued": sum(1 for o in outcomes if o.outcome == "created")})
    result = outcomes[0] if single else EnqueueResults(tasks=list(outcomes))
    return idempotency.answer(result, outcomes.idempotent_replay)
