"""One task: ``GET /v1/queues/{queue}/tasks/{id}`` (its state and fields; with
``wait_seconds``, once it ends: tierq.logic.waits) and ``DELETE`` (cancel it, whatever its
state; a worker holding its lease gets ``not_found`` when it acks). Another tenant's task is
reported as not found to a pinned caller."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from tierq.aws.http import request
from tierq.aws.http.errors import responses
from tierq.aws.http.params import QueuePath, TaskIdPath
from tierq.aws.runtime import default_engine, engine
from tierq.errors import NotFound
from tierq.logic import tenant_limits
from tierq.logic.waits import MAX_WAIT_SECONDS
from tierq.models import TaskView

router = Router()


def visible_task(queue: str, task_id: str) -> TaskView:
    task = engine().get_task(queue, task_id)
    if not request.visible(task.tenant):
        raise NotFound(f"no task {task_id} in queue {queue!r}")
    return task


WaitQuery = Annotated[float | None, Query(
    gt=0, le=MAX_WAIT_SECONDS,
    description="Wait up to this many seconds (more than 0, at most 20) for the task to be "
                "done, dead or deleted; answers as soon as it is, or after that long as it "
                "stands.",
)]


@router.get(
    "/v1/queues/<queue>/tasks/<id>",
    summary="A task's status",
    description="With wait_seconds, the answer comes as soon as the task is done, dead or "
                "deleted (404), or after wait_seconds as the task stands: a wait is woken "
                "by a message from whatever ends the task, and reads the task only as it "
                "starts and ends. A task acked without a result (its row deleted) answers "
                "done for at least five minutes after its ack to a caller pinned to its "
                "tenant, with what only its row held (payload, key, priority) at "
                "defaults. Another tenant's task is 404 at once. A wait counts as a long "
                "poll: a tenant caller holds at most TIERQ_TENANT_LONG_POLLS at once "
                "(claims and waits together); one more is 429 too_many_requests with "
                "Retry-After.",
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


@router.delete(
    "/v1/queues/<queue>/tasks/<id>",
    summary="Cancel a task",
    operation_id="cancelTask",
    tags=["tasks"],
    responses=responses("The task as it was when cancelled.", 404),
)
def cancel_task(queue: QueuePath, task_id: TaskIdPath) -> TaskView:
    visible_task(queue, str(task_id))
    return engine().cancel_task(queue, task_id)
