"""One task: ``GET /v1/queues/{queue}/tasks/{id}`` (its state and fields) and ``DELETE`` (cancel
it, whatever its state; a worker holding its lease gets ``not_found`` when it acks). Another
tenant's task is reported as not found to a pinned caller."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import Router

from tierq.aws.http import request
from tierq.aws.http.errors import responses
from tierq.aws.http.params import QueuePath, TaskIdPath
from tierq.aws.runtime import engine
from tierq.errors import NotFound
from tierq.models import TaskView

router = Router()


def visible_task(queue: str, task_id: str) -> TaskView:
    task = engine().get_task(queue, task_id)
    if not request.visible(task.tenant):
        raise NotFound(f"no task {task_id} in queue {queue!r}")
    return task


@router.get(
    "/v1/queues/<queue>/tasks/<id>",
    summary="A task's status",
    operation_id="getTask",
    tags=["tasks"],
    responses=responses("The task as stored, with its lease when it is leased.", 404),
)
def get_task(queue: QueuePath, task_id: TaskIdPath) -> TaskView:
    return visible_task(queue, str(task_id))


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
