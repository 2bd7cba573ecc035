"""``POST /v1/queues/{queue}/payloads``: a presigned upload of a big payload to the
deployment's payload store, under the caller's tenant prefix, and the pointer to enqueue
as the task's payload once the upload is done (tierq.logic.payloads)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from tierq.aws.http import request
from tierq.aws.http.errors import responses
from tierq.aws.http.params import QueuePath
from tierq.aws.runtime import default_engine, engine
from tierq.logic import payloads
from tierq.models.names import DEFAULT_TENANT
from tierq.models.payloads import PayloadTransfer, PayloadUpload, PayloadUploadRequest

router = Router()


@router.post(
    "/v1/queues/<queue>/payloads",
    summary="Upload a big payload",
    description="For a payload over the inline limit (256 KiB): a new object key under the "
                "tenant's prefix (tenants/<tenant>/) of the payload bucket and a presigned "
                "upload of exactly `size` bytes to it (SSE-KMS by the bucket's default). "
                "Send the bytes with the method, URL and headers given (no other "
                "credentials), then enqueue `pointer` as the task's payload. The object is "
                "deleted once its task is finished and its retention has ended; an object "
                "no task names within TIERQ_PAYLOAD_PENDING_SECONDS (a day) is deleted too, "
                "and a tenant may have at most TIERQ_MAX_PENDING_PAYLOADS such uploads "
                "(429 beyond). A pointer is enqueued on the shard that made it.",
    operation_id="createPayloadUpload",
    tags=["tasks"],
    responses=responses("The pointer and its presigned upload.", 403, 413),
)
def create_payload_upload(
    queue: QueuePath,
    body: Annotated[PayloadUploadRequest, Body(description="The payload's size.")],
) -> PayloadUpload:
    tenant = request.check_tenant(body.tenant) or DEFAULT_TENANT
    # recorded on the shard of the pair's home, where its enqueues go (a pointer belongs
    # to that shard)
    home = engine().engine_of(queue, tenant) or default_engine()
    upload = payloads.new_upload(home.ctx, tenant, body.size)
    transfer = upload.transfer
    return PayloadUpload.model_validate({
        "pointer": upload.pointer.payload(),
        "upload": PayloadTransfer(method=transfer.method, url=transfer.url,
                                  headers=transfer.headers, expires_in=upload.expires_in)})
