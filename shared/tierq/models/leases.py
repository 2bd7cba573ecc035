"""Claims, leases and their outcomes: ack, nack, release, heartbeat."""


import asyncio
import threading
from datetime import datetime
from typing import Any, ClassVar, Literal
from uuid import UUID

import orjson
from pydantic import ConfigDict, Field, TypeAdapter, field_validator
from pydantic.config import JsonDict

from tierq.models.base import Model, Replayable, deferred_adapter
from tierq.models.names import NO_NUL_PATTERN, TenantName
from tierq.models.strict import RequestModel
from tierq.models.tasks import ParentView
from tierq.models.traces import TraceView, absent

NO_NUL: JsonDict = {"pattern": NO_NUL_PATTERN}

MAX_LEASE_SECONDS = 43_200  # 12 hours, as SQS's visibility timeout
MAX_CLAIM = 500
# The most a heartbeat's progress holds, encoded as JSON (UTF-8 bytes): it is kept in Valkey
# with the lease, and in the task's row once the attempt ends.
MAX_PROGRESS_BYTES = 4096


def progress_size(value: Any) -> int:
    """The bytes of ``value`` encoded as JSON, as the API keeps it."""
    return len(orjson.dumps(value))


# Why a worker tells a handler to stop (ClaimedTask.cancelled).
StopReason = Literal["cancelled", "timeout"]


class ClaimRequest(RequestModel):
    model_config = ConfigDict(extra="forbid")

    max: int = Field(default=1, ge=1, le=MAX_CLAIM, description="How many tasks at most.")
    lease_seconds: int | None = Field(default=None, ge=1, le=MAX_LEASE_SECONDS)
    tenant: TenantName | None = Field(
        default=None, description="Only this tenant; without it claims rotate across tenants."
    )
    worker: str | None = Field(default=None, max_length=128, json_schema_extra=NO_NUL)
    wait_seconds: float = Field(default=0, ge=0, le=20, description="Long-poll up to this long.")


class ClaimedTask(Model):
    id: UUID
    queue: str
    tenant: str
    key: str | None
    priority: int
    payload: Any
    attempt: int
    max_attempts: int
    lease_token: str
    lease_expires_at: datetime
    redelivered: bool
    enqueued_at: datetime
    parents: list[ParentView] | None = None  # a task released from a wait (`after`)
    group: str | None = None  # its group, if any (logic/groups.py)
    timeout_seconds: int | None = Field(
        default=None, description="The attempt's time limit (the task's own, else its "
                                  "queue's; null: none): its lease ends at the attempt's "
                                  "start plus this, whatever its heartbeats, and the attempt "
                                  "then fails with `timeout`.")
    # a grouped task's seq, its place in its group's order: the SequenceNumber of its consumer
    # records (logic/dispatch/events.py), left out of answers as a claim's API has no use for it
    seq: int | None = Field(default=None, exclude=True)
    # the trace context given at enqueue (models/traces.py); left out of an answer without
    # one, so that a task without a trace costs a claim nothing more
    trace: TraceView | None = Field(
        default=None, exclude_if=absent,
        description="The trace context given at enqueue (absent without one).")

    # What a worker's handler is told to stop by (the ``cancelled`` property). Not fields,
    # nor pydantic private attributes (whose set-up per instance doubles what a claim's
    # tasks cost to build): a worker sets them on its own tasks with object.__setattr__,
    # into the instance's __dict__, which serialisation and equality leave out.
    _stop: ClassVar["threading.Event | asyncio.Event | None"] = None
    _stop_reason: ClassVar[StopReason | None] = None

    @property
    def cancelled(self) -> "threading.Event | asyncio.Event":
        """Set when the handler should stop: the task was cancelled (POST
        …/tasks/{id}/cancel) or the attempt reached its time limit (``stop_reason`` says
        which). A ``threading.Event`` under the Worker (check ``is_set()`` or ``wait()``
        on it), an ``asyncio.Event`` under the AsyncWorker (``await task.cancelled.wait()``).
        A task that no worker runs gets a ``threading.Event`` that nothing sets."""
        if self._stop is None:
            object.__setattr__(self, "_stop", threading.Event())
        assert self._stop is not None
        return self._stop

    @property
    def stop_reason(self) -> StopReason | None:
        """Why ``cancelled`` is set: ``cancelled`` or ``timeout``; None while it is not."""
        return self._stop_reason

    def signal_stop(self, reason: StopReason) -> bool:
        """Set ``cancelled`` for ``reason`` (the first reason stays); whether this set it.
        Call it from the thread (or event loop) the handler's signal belongs to."""
        if self._stop_reason is not None:
            return False
        object.__setattr__(self, "_stop_reason", reason)
        self.cancelled.set()
        return True

    def with_signal(self, signal: "threading.Event | asyncio.Event | Any") -> "ClaimedTask":
        """This task with ``signal`` as its ``cancelled`` (an event of the worker's kind, or
        a multiprocessing event in a handler's process); returns it."""
        object.__setattr__(self, "_stop", signal)
        return self


# A claim builds its tasks in one call: pydantic validates a whole list in Rust faster than
# Python builds the models one by one.
CLAIMED_TASKS: TypeAdapter[list[ClaimedTask]] = deferred_adapter(list[ClaimedTask])


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


OutcomeKind = Literal["acked", "retried", "dead"]
