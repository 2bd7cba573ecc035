"""One task: ``GET /v1/queues/{queue}/tasks/{id}`` (its state and fields; with
``wait_seconds``, once it ends: tierq.logic.waits), ``POST …/cancel`` (mark it cancelled,
kept until retention ends; a worker running it is told by its next heartbeat or ack:
tierq.logic.tasks.cancel) and ``DELETE`` (delete it, whatever its state; a worker holding
its lease gets ``not_owner`` when it acks). Another tenant's task is reported as not found
to a pinned caller."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from tierq.aws.http import request
from tierq.aws.http.errors import responses
from tierq.aws.http.params import QueuePath, TaskIdPath
from tierq.aws.runtime import default_engine, engine
from tierq.logic import tenant_limits
from tierq.logic.waits import MAX_WAIT_SECONDS
from tierq.models import TaskView

router = Router()


def visible_task(queue: str, task_id: str) -> TaskView:
    """The task, when the caller may see it; the engine checks its tenant, so another
    tenant's task raises the very ``NotFound`` an id no shard holds raises."""
    return engine().get_task(queue, task_id, tenant=request.pinned_tenant())


WaitQuery = Annotated[float | None, Query(
    gt=0, le=MAX_WAIT_SECONDS,
    description="Wait up to this many seconds (more than 0, at most 20) for the task to be "
                "done, dead, cancelled or deleted; answers as soon as it is, or after that "
                "long as it stands.",
)]


@router.get(
    "/v1/queues/<queue>/tasks/<id>",
    summary="A task's status",
    description="With wait_seconds, the answer comes as soon as the task is done, dead, cancelled"
                " or deleted (404), or after wait_seconds as the task stands: a wait is woken by "
                "a message from whatever ends the task, and reads the task only as it starts and "
                "ends. A task acked without a result (its row deleted) answers done for at least "
                "five minutes after its ack to a caller pinned to its tenant, with what only its "
                "row held (payload, key, priority) at defaults. Another tenant's task is 404 at "
                "once. A wait counts as a long poll: a tenant caller holds at most "
                "TIERQ_TENANT_LONG_POLLS at once (claims and waits together); one more is 429 "
                "too_many_requests with Retry-After.",
    operation_id="getTask",
    tags=["tasks"],
    responses=responses("The task as stored, with its lease when it is leased.", 404),
)
def get_task(queue: QueuePath, task_id: TaskIdPath,
             wait_seconds: WaitQuery = None) -> TaskView:
    if wait_seconds is None:
        return visible_task(queue, str(task_id))
    tierq = engine()
    # one of its tenant's long-poll places (429 past them); not one of the claim
    # function's, which a wait does not hold
    with tenant_limits.long_poll(default_engine().ctx, request.pinned_tenant(), claim=False):
        return tierq.get_task(queue, task_id, wait_seconds=wait_seconds,
                              tenant=request.pinned_tenant())


@router.post(
    "/v1/queues/<queue>/tasks/<id>/cancel",
    summary="Cancel a task, running or not",
    description="Marks an unfinished task `cancelled`; it is kept, as a finished task is, "
                "until its queue's retention ends. A task waiting in line (ready, cold, "
                "delayed, held in its group, waiting for its parents) leaves it at once. A "
                "leased task's lease ends at once: its worker's next heartbeat, ack or nack "
                "is refused (`not_owner`) and names it in the answer's `cancelled` list, so "
                "a Worker signals its handler (`task.cancelled`) and nothing is retried. "
                "Tasks that wait for it (`after`) see it `cancelled` (their "
                "`on_parent_failure` applies); the next task of its group goes on; a wait "
                "for it (`GET …?wait_seconds=`) answers at once. A task cancelled already "
                "is answered as it is; a done or dead one is 409 `task_finished`, nothing "
                "changed. Another tenant's task is 404.",
    operation_id="cancelTaskRun",
    tags=["tasks"],
    responses=responses("The task, cancelled.", 404, 409),
)
def cancel(queue: QueuePath, task_id: TaskIdPath) -> TaskView:
    # the tenant check is the engine's, in the statement that marks the task: fail closed
    return engine().cancel(queue, task_id, tenant=request.pinned_tenant())


@router.delete(
    "/v1/queues/<queue>/tasks/<id>",
    summary="Delete a task",
    description="Deletes the task whatever its state: gone, a GET after it is 404. A worker "
                "holding its lease is refused its ack (`not_owner`) but not told it was "
                "cancelled: to stop a running task, POST …/cancel.",
    operation_id="cancelTask",
    tags=["tasks"],
    responses=responses("The task as it was when deleted.", 404),
)
def cancel_task(queue: QueuePath, task_id: TaskIdPath) -> TaskView:
    return engine().cancel_task(queue, task_id, tenant=request.pinned_tenant())
