"""Claims and the tasks they lease.

The outcomes of a lease (the items of an ack, nack, release or heartbeat, their answers,
a running lease) are defined in :mod:`tierq.models.lease_outcomes` and read here on first
use: every request of the claim function claims, few give tasks back."""


import asyncio
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal
from uuid import UUID

from pydantic import ConfigDict, Field, TypeAdapter

from tierq.models.base import Model, deferred_adapter
from tierq.models.lease_bounds import MAX_CLAIM as MAX_CLAIM
from tierq.models.lease_bounds import MAX_LEASE_SECONDS as MAX_LEASE_SECONDS
from tierq.models.lease_bounds import MAX_PROGRESS_BYTES as MAX_PROGRESS_BYTES
from tierq.models.lease_bounds import NO_NUL as NO_NUL
from tierq.models.lease_bounds import progress_size as progress_size
from tierq.models.names import TenantName
from tierq.models.parents import ParentView
from tierq.models.strict import RequestModel
from tierq.models.traces import TraceView, absent

if TYPE_CHECKING:
    from tierq.models.lease_outcomes import CANCELLED_DESCRIPTION as CANCELLED_DESCRIPTION
    from tierq.models.lease_outcomes import AckItem as AckItem
    from tierq.models.lease_outcomes import AckResult as AckResult
    from tierq.models.lease_outcomes import HeartbeatItem as HeartbeatItem
    from tierq.models.lease_outcomes import HeartbeatResult as HeartbeatResult
    from tierq.models.lease_outcomes import LeaseExtended as LeaseExtended
    from tierq.models.lease_outcomes import NackItem as NackItem
    from tierq.models.lease_outcomes import NackResult as NackResult
    from tierq.models.lease_outcomes import Rejection as Rejection
    from tierq.models.lease_outcomes import RejectReason as RejectReason
    from tierq.models.lease_outcomes import ReleaseItem as ReleaseItem
    from tierq.models.lease_outcomes import ReleaseResult as ReleaseResult
    from tierq.models.lease_outcomes import RunningLease as RunningLease

# Why a worker tells a handler to stop (ClaimedTask.cancelled).
StopReason = Literal["cancelled", "timeout"]


class ClaimOptions(RequestModel):
    """A claim's options but its wait: those of a claim an ack makes after it
    (``POST …/acks`` with ``claim``, which never long-polls)."""

    model_config = ConfigDict(extra="forbid")

    max: int = Field(default=1, ge=1, le=MAX_CLAIM, description="How many tasks at most.")
    lease_seconds: int | None = Field(default=None, ge=1, le=MAX_LEASE_SECONDS)
    tenant: TenantName | None = Field(
        default=None, description="Only this tenant; without it claims rotate across tenants."
    )
    worker: str | None = Field(default=None, max_length=128, json_schema_extra=NO_NUL)

    def request(self) -> "ClaimRequest":
        """These options as a claim that does not wait."""
        return ClaimRequest(max=self.max, lease_seconds=self.lease_seconds, tenant=self.tenant,
                            worker=self.worker)


class ClaimRequest(ClaimOptions):
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


# Tasks whose blobs carry parents, a group, a time limit or a trace are built in one call:
# pydantic validates a whole list in Rust faster than Python builds the models one by one
# (a claim of plain tasks makes them from their values: models.base.made).
CLAIMED_TASKS: TypeAdapter[list[ClaimedTask]] = deferred_adapter(list[ClaimedTask])


OutcomeKind = Literal["acked", "retried", "dead"]


_OUTCOMES = frozenset({"AckItem", "NackItem", "ReleaseItem", "HeartbeatItem", "RejectReason",
                       "Rejection", "CANCELLED_DESCRIPTION", "AckResult", "NackResult",
                       "ReleaseResult", "LeaseExtended", "HeartbeatResult", "RunningLease"})


def __getattr__(name: str) -> Any:
    if name in _OUTCOMES:
        from tierq.models import lease_outcomes

        value = getattr(lease_outcomes, name)
        globals()[name] = value  # the next read (an ack reads two) finds it without this
        return value
    raise AttributeError(f"module 'tierq.models.leases' has no attribute {name!r}")
