"""The outcomes of a lease: the items of an ack, nack, release or heartbeat, their answers,
and the running leases as the admin sees them (``RunningLease``, its envelope
``RunningMetrics``). :mod:`tierq.models.leases` (and
:mod:`tierq.models`) read them from here on first use, so that the claim function, whose
requests claim, defines them only when it gives tasks back."""


from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import ConfigDict, Field, field_validator

from tierq.models.base import Model, Replayable
from tierq.models.envelope_base import NEXT_DESCRIPTION, Envelope
from tierq.models.leases import MAX_LEASE_SECONDS, MAX_PROGRESS_BYTES, NO_NUL, progress_size
from tierq.models.strict import RequestModel


class AckItem(RequestModel):
    model_config = ConfigDict(extra="forbid")

    id: UUID
    lease_token: str = Field(min_length=1, max_length=200, json_schema_extra=NO_NUL)
    result: Any = Field(default=None, description="Kept with the task until retention ends.")


class NackItem(RequestModel):
    model_config = ConfigDict(extra="forbid")

    id: UUID
    lease_token: str = Field(min_length=1, max_length=200, json_schema_extra=NO_NUL)
    error: str = Field(default="", max_length=10_000, json_schema_extra=NO_NUL,
                       description="Why it failed; kept as the task's last_error, cut to its "
                                   "first 2 KiB (UTF-8).")
    retry_in_seconds: float | None = Field(default=None, ge=0, le=366 * 86_400)
    dead: bool = Field(default=False, strict=True,
                       description="Dead-letter now, whatever the attempts left.")


class ReleaseItem(RequestModel):
    model_config = ConfigDict(extra="forbid")

    id: UUID
    lease_token: str = Field(min_length=1, max_length=200, json_schema_extra=NO_NUL)


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


RejectReason = Literal["not_owner", "not_found"]


class Rejection(Model):
    id: UUID
    reason: RejectReason


def _empty(value: list[UUID]) -> bool:
    return not value


# (left out of an answer when empty: an answer without a cancel is as it always was)
CANCELLED_DESCRIPTION = ("Of the items rejected, the tasks that were cancelled (POST "
                         "…/tasks/{id}/cancel): their handler should stop. Each is in "
                         "`rejected` too, so a client that does not know this list acts as "
                         "for a lost lease.")


class AckResult(Replayable):
    acked: list[UUID] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    cancelled: list[UUID] = Field(default_factory=list, description=CANCELLED_DESCRIPTION,
                                 exclude_if=_empty)


class NackResult(Replayable):
    retried: list[UUID] = Field(default_factory=list)
    dead: list[UUID] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    cancelled: list[UUID] = Field(default_factory=list, description=CANCELLED_DESCRIPTION,
                                 exclude_if=_empty)


class ReleaseResult(Replayable):
    released: list[UUID] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)


class LeaseExtended(Model):
    id: UUID
    lease_expires_at: datetime


class HeartbeatResult(Replayable):
    extended: list[LeaseExtended] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    cancelled: list[UUID] = Field(default_factory=list, description=CANCELLED_DESCRIPTION,
                                 exclude_if=_empty)


class RunningLease(Model):
    queue: str
    tenant: str
    id: UUID
    worker: str | None
    attempt: int
    started_at: datetime
    running_for_ms: int
    lease_expires_at: datetime
    group: str | None = Field(default=None, description="The task's group, if any.")
    progress: Any = Field(default=None, description="The last progress its heartbeats "
                                                    "carried, if any.")
    progress_at: datetime | None = Field(default=None,
                                         description="When that progress came.")


class RunningMetrics(Envelope):
    running: list[RunningLease]
    timestamp: datetime
    next: str | None = Field(default=None, description=NEXT_DESCRIPTION)
