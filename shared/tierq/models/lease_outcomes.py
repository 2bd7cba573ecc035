"""The outcomes of a lease: the items of an ack, nack or release and their answers.

:mod:`tierq.models.leases` (and :mod:`tierq.models`) read them from here on first use, so
that the claim function, whose requests claim, defines them only when it gives tasks back.
A heartbeat's item and answer (:mod:`tierq.models.heartbeats`) and the running leases as
the admin sees them (:mod:`tierq.models.running`) are read here on first use too: the
dispatcher settles leases but never extends them nor lists them."""


import importlib
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from pydantic import ConfigDict, Field

from tierq.models.base import Model, Replayable
from tierq.models.lease_bounds import NO_NUL
from tierq.models.strict import RequestModel

if TYPE_CHECKING:
    from tierq.models.heartbeats import HeartbeatItem as HeartbeatItem
    from tierq.models.heartbeats import HeartbeatResult as HeartbeatResult
    from tierq.models.heartbeats import LeaseExtended as LeaseExtended
    from tierq.models.running import RunningLease as RunningLease
    from tierq.models.running import RunningMetrics as RunningMetrics


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


RejectReason = Literal["not_owner", "not_found"]


class Rejection(Model):
    id: UUID
    reason: RejectReason


def left_out_when_empty(value: list[UUID]) -> bool:
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
                                 exclude_if=left_out_when_empty)


class NackResult(Replayable):
    retried: list[UUID] = Field(default_factory=list)
    dead: list[UUID] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    cancelled: list[UUID] = Field(default_factory=list, description=CANCELLED_DESCRIPTION,
                                 exclude_if=left_out_when_empty)


class ReleaseResult(Replayable):
    released: list[UUID] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)


_ELSEWHERE = {"HeartbeatItem": "heartbeats", "LeaseExtended": "heartbeats",
              "HeartbeatResult": "heartbeats", "RunningLease": "running",
              "RunningMetrics": "running"}


def __getattr__(name: str) -> Any:
    module = _ELSEWHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tierq.models.lease_outcomes' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tierq.models.{module}"), name)
    globals()[name] = value  # the next read finds it without this
    return value
