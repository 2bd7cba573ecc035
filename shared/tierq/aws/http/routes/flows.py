"""``POST /v1/flows``: a graph of tasks (each with its queue, a ``ref`` and ``after``: refs of
the request or ids of existing tasks) created all or nothing (tierq.logic.flows)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from tierq.aws import metrics
from tierq.aws.http import idempotency, request, traces
from tierq.aws.http.errors import responses
from tierq.aws.http.idempotency import IdempotencyKeyHeader
from tierq.aws.http.traces import AmznTraceIdHeader, TraceparentHeader, TracestateHeader
from tierq.aws.runtime import default_engine, engine
from tierq.models.flows import FlowIn, FlowResult

router = Router()


@router.post(
    "/v1/flows",
    summary="Create a flow: tasks that wait for each other",
    description="{\"tenant\": optional, \"tasks\": [...]} with at most 500 tasks, each with "
                "its queue, a ref unique in the request, payload, priority, delay_seconds or "
                "run_at, max_attempts, after (refs of this request or ids of existing "
                "tasks of the tenant), on_parent_failure dead|run and "
                "wait_timeout_seconds, trace (by default the request's traceparent, "
                "tracestate and X-Amzn-Trace-Id headers). All or nothing: a cycle, an "
                "unknown ref or id, "
                "another tenant's task, or tasks whose pairs live on different shards is "
                "422 naming the field. The answer maps each ref to its task's id, queue and "
                "state.",
    operation_id="createFlow",
    tags=["tasks"],
    responses=responses("Each ref's task: its id, queue and state (waiting, or ready: warm, "
                        "cold, delayed).", 403, 409, 413),
)
def create_flow(
    body: Annotated[FlowIn, Body(description="The flow's tasks.")],
    idempotency_key: IdempotencyKeyHeader = None,
    traceparent: TraceparentHeader = None,
    tracestate: TracestateHeader = None,
    x_amzn_trace_id: AmznTraceIdHeader = None,
) -> Response[FlowResult]:
    traces.apply(body.tasks, traceparent, tracestate, x_amzn_trace_id)
    tenant = request.check_tenant(body.tenant)
    result = engine().flow(body, tenant=tenant, **idempotency.keyed(idempotency_key))
    if not result.idempotent_replay:
        for queue in {t.queue for t in body.tasks}:
            metrics.count_queue(default_engine().ctx, queue, {
                "Enqueued": sum(1 for t in body.tasks if t.queue == queue)})
    return idempotency.answer(result, result.idempotent_replay)
