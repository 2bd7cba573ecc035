"""A heartbeat's item and its answer: read by the lease outcomes on first use (the ack
function's heartbeat route, a Worker), never by the dispatcher, which settles leases without
extending them."""


from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import ConfigDict, Field, field_validator

from tierq.models.base import Model, Replayable
from tierq.models.lease_bounds import MAX_LEASE_SECONDS, MAX_PROGRESS_BYTES, NO_NUL, progress_size
from tierq.models.lease_outcomes import CANCELLED_DESCRIPTION, Rejection, left_out_when_empty
from tierq.models.strict import RequestModel


class HeartbeatItem(RequestModel):
    model_config = ConfigDict(extra="forbid")

    id: UUID
    lease_token: str = Field(min_length=1, max_length=200, json_schema_extra=NO_NUL)
    extend_seconds: int | None = Field(default=None, ge=1, le=MAX_LEASE_SECONDS)
    progress: Any = Field(
        default=None,
        description="How far the task got: any JSON value, at most 4 KiB encoded. Kept with "
                    "the lease (the last one sent wins) and written to the task when its "
                    "attempt ends; shown with the task and its running lease, with when it "
                    "came. Left out (or null): the progress kept stays as it is.")

    @field_validator("progress")
    @classmethod
    def _progress_size(cls, value: Any) -> Any:
        if value is not None:
            try:
                size = progress_size(value)
            except TypeError as exc:  # (a value built in Python that JSON cannot hold)
                raise ValueError(f"progress is not JSON: {exc}") from None
            if size > MAX_PROGRESS_BYTES:
                raise ValueError(f"progress is {size} bytes encoded as JSON, at most "
                                 f"{MAX_PROGRESS_BYTES}")
        return value


class LeaseExtended(Model):
    id: UUID
    lease_expires_at: datetime


class HeartbeatResult(Replayable):
    extended: list[LeaseExtended] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    cancelled: list[UUID] = Field(default_factory=list, description=CANCELLED_DESCRIPTION,
                                 exclude_if=left_out_when_empty)
