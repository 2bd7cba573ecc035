"""Response bodies of the HTTP API as the client reads them. The items inside (tasks,
claims, outcomes, counts, leases, schedules) are the engine's own models from
:mod:`tierq.models`; these wrappers mirror the HTTP API's envelopes (docs/architecture.md
§10). Unknown fields are ignored, so a newer server does not break an older client."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, Field

from tierq.models import (
    ClaimedTask,
    EnqueueOutcome,
    QueueView,
    RunningLease,
    TaskView,
    TenantCounts,
)

NEXT = "Pass as after= for the next page; None on the last."


class EnqueueResults(BaseModel):
    tasks: list[EnqueueOutcome]


class ClaimResults(BaseModel):
    tasks: list[ClaimedTask]


class QueueList(BaseModel):
    queues: list[QueueView]
    next: str | None = Field(default=None, description=NEXT)


class DeadLetterPage(BaseModel):
    tasks: list[TaskView]
    next_cursor: str | None = Field(default=None, description="Pass as after= for the next page.")
    next: str | None = Field(default=None, description="The same cursor as next_cursor.")


class ReplayResult(BaseModel):
    replayed: list[UUID] = Field(default_factory=list)
    skipped: list[UUID] = Field(default_factory=list)
    more: bool = Field(default=False, description="An \"all\" slice left some behind.")


class PurgeResult(BaseModel):
    purged: list[UUID] = Field(default_factory=list)
    more: bool = Field(default=False, description="An \"all\" slice left some behind.")


class DetailedMetrics(BaseModel):
    queues: list[TenantCounts]
    timestamp: datetime | None = None
    next: str | None = Field(default=None, description=NEXT)


class RunningMetrics(BaseModel):
    running: list[RunningLease]
    timestamp: datetime | None = None
    next: str | None = Field(default=None, description=NEXT)
