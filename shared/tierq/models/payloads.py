"""Big payloads (tierq.logic.payloads): an upload to the payload store, and a download of
what a pointer names."""


from typing import Literal
from uuid import UUID

from pydantic import ConfigDict, Field

from tierq.core.pointers import POINTER_CLASS
from tierq.models.base import Model
from tierq.models.names import TenantName
from tierq.models.strict import RequestModel

POINTER_DESCRIPTION = (
    'The SQS extended client\'s pointer: ["software.amazon.payloadoffloading.PayloadS3Pointer",'
    ' {"s3BucketName": ..., "s3Key": ...}]. Enqueue it as a task\'s payload.')


class PointerFields(Model):
    model_config = ConfigDict(extra="forbid")

    s3BucketName: str = Field(min_length=1, max_length=63)
    s3Key: str = Field(min_length=1, max_length=1024)


# [POINTER_CLASS, {"s3BucketName": ..., "s3Key": ...}]
PointerPayload = tuple[Literal[POINTER_CLASS], PointerFields]  # type: ignore[valid-type]


class PayloadUploadRequest(RequestModel):
    model_config = ConfigDict(extra="forbid")

    size: int = Field(ge=1, le=5 * 1024 ** 3,
                      description="The payload's size in bytes (its JSON, UTF-8): the upload "
                                  "must send exactly this many.")
    tenant: TenantName | None = Field(
        default=None, description="The tenant whose prefix holds the object (a pinned "
                                  "caller's own by default, else '_').")


class PayloadTransfer(Model):
    """A presigned request: send ``method`` to ``url`` with ``headers`` and no other
    credentials (an upload: the payload's bytes as the body)."""

    method: str
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    expires_in: int = Field(description="Seconds the URL stays valid.")


class PayloadUpload(Model):
    pointer: PointerPayload = Field(description=POINTER_DESCRIPTION)
    upload: PayloadTransfer


class PayloadFetchRequest(RequestModel):
    model_config = ConfigDict(extra="forbid")

    pointer: PointerPayload = Field(description=POINTER_DESCRIPTION + " As the claim gave "
                                                                      "it.")
    task_id: UUID | None = Field(
        default=None, description="The claimed task that carries the pointer: when given, "
                                  "the task must carry this object and be of its tenant.")
