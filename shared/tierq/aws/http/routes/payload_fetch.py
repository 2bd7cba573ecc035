"""``POST /v1/queues/{queue}/payloads/fetch``: a presigned download of the big payload a
claimed task's pointer names (tierq.logic.payloads), for a worker that holds no AWS
credentials of its own. A caller pinned to a tenant may fetch only its tenant's objects; an
admin any tenant's, a key under a tenant's prefix always; with ``task_id``, only an object
that task carries, of the key's tenant."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from tierq.aws.http import request
from tierq.aws.http.errors import responses
from tierq.aws.http.params import QueuePath
from tierq.aws.runtime import default_engine, engine
from tierq.core.pointers import Pointer
from tierq.logic import payloads
from tierq.models.payloads import PayloadFetchRequest, PayloadTransfer

router = Router()


@router.post(
    "/v1/queues/<queue>/payloads/fetch",
    summary="Download a big payload",
    description="A presigned GET of the object a task's pointer names (the task's payload "
                "as claimed). The object's body is the payload's JSON. With `task_id`, the "
                "task must carry the object and be of its tenant.",
    operation_id="fetchPayload",
    tags=["leases"],
    responses=responses("The presigned download.", 403),
)
def fetch_payload(
    queue: QueuePath,
    body: Annotated[PayloadFetchRequest, Body(description="The pointer.")],
) -> PayloadTransfer:
    kind, fields = body.pointer
    tq = default_engine()
    owner = Pointer(fields.s3BucketName, fields.s3Key).tenant()
    pinned = request.pinned_tenant()
    if pinned is not None and owner != pinned:  # refused before any lookup of its tenant's
        raise payloads.not_the_callers(fields.s3Key)
    if body.task_id is not None and owner is not None:  # the task's shard: its pair's home
        tq = engine().engine_of(queue, owner, create=False) or tq
    transfer, seconds = payloads.new_download(tq.ctx, pinned,
                                              [kind, fields.model_dump()],
                                              None if body.task_id is None
                                              else str(body.task_id))
    return PayloadTransfer(method=transfer.method, url=transfer.url, headers=transfer.headers,
                           expires_in=seconds)
