"""Tasks: what producers enqueue, and how a task looks when asked for."""


from datetime import UTC, datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import ConfigDict, Field, field_validator, model_validator

from tierq.models.base import Model
from tierq.models.bounds import MAX_DELAY_SECONDS as MAX_DELAY_SECONDS
from tierq.models.bounds import MAX_PARENTS as MAX_PARENTS
from tierq.models.bounds import MAX_TIMEOUT_SECONDS as MAX_TIMEOUT_SECONDS
from tierq.models.names import RUN_AT_PATTERN, GroupName, TaskKey, TenantName
from tierq.models.parents import ParentState as ParentState
from tierq.models.parents import ParentView as ParentView
from tierq.models.strict import RequestModel
from tierq.models.traces import TraceContext, TraceView

TaskState = Literal["waiting", "held", "delayed", "cold", "warm", "leased", "dead", "done",
                    "cancelled"]
Outcome = Literal["created", "updated", "ignored"]


class TaskIn(RequestModel):
    """One task to enqueue."""

    # delay_seconds or run_at, not both (the validator _one_schedule)
    model_config = ConfigDict(extra="forbid", json_schema_extra={"anyOf": [
        {"properties": {"delay_seconds": {"type": "null"}}},
        {"properties": {"run_at": {"type": "null"}}},
    ]})

    payload: Any = Field(description="Any JSON value; at most 256 KiB once serialised.")
    key: TaskKey | None = Field(
        default=None, description="Idempotency key, unique per (queue, tenant) among live tasks."
    )
    priority: int = Field(default=0, ge=0, le=9, description="0..9; 9 is claimed first.")
    delay_seconds: float | None = Field(default=None, ge=0, le=MAX_DELAY_SECONDS)
    run_at: datetime | None = Field(
        default=None, json_schema_extra={"pattern": RUN_AT_PATTERN},
        description="When it becomes claimable: an RFC 3339 date-time from the year 1970 on, "
                    "at most a year ahead.")
    tenant: TenantName | None = None
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    on_conflict: Literal["ignore", "replace"] = Field(
        default="ignore",
        description="When a live task has the same key: keep it as it is, or update it in place.",
    )
    after: list[UUID] | None = Field(
        default=None, min_length=1, max_length=MAX_PARENTS,
        description="Ids of tasks of the same tenant (any queue on the same shard) this task "
                    "waits for: it is `waiting` until each is finished, then ready (or "
                    "delayed until its run_at). An id must name a task that exists (one "
                    "finished and still kept counts as finished). Not with `key`.")
    on_parent_failure: Literal["dead", "run"] = Field(
        default="dead",
        description="With `after`, when a parent ends dead or is cancelled: dead-letter this "
                    "task naming the parent, or run it anyway (its claim tells each "
                    "parent's final state).")
    wait_timeout_seconds: float | None = Field(
        default=None, gt=0, le=MAX_DELAY_SECONDS,
        description="With `after`: dead-letter the task as waited_too_long when it still "
                    "waits this long after its enqueue.")
    group: GroupName | None = Field(
        default=None,
        description="A group within the task's (queue, tenant), at most 128 characters: a "
                    "group's tasks are claimed in enqueue order, at most the queue's "
                    "`group_max_leased` of them at once (1 by default); the others are "
                    "`held`. Not with `after`.")
    trace: TraceContext | None = Field(
        default=None,
        description="The producer's trace context, handed back by claims, the task view "
                    "and consumer records (AWSTraceHeader, a traceparent message "
                    "attribute). The request's traceparent, tracestate and X-Amzn-Trace-Id "
                    "headers apply to each task that gives none.")
    timeout_seconds: int | None = Field(
        default=None, ge=1, le=MAX_TIMEOUT_SECONDS,
        description="The longest one attempt may run, in seconds (at most a week; default "
                    "the queue's `timeout_seconds`, if any): heartbeats do not extend the "
                    "lease past the attempt's start plus this, and an attempt that reaches "
                    "it fails with `timeout` like a nack (counted, retried with the queue's "
                    "backoff, dead-lettered past max_attempts).")

    @field_validator("run_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> "TaskIn":
        if self.delay_seconds is not None and self.run_at is not None:
            raise ValueError("give delay_seconds or run_at, not both")
        return self


class EnqueueOutcome(Model):
    id: UUID
    outcome: Outcome
    state: TaskState
    tenant: str
    key: str | None = None


class Enqueued(list[EnqueueOutcome]):
    """An enqueue's outcomes, one per task in call order; ``idempotent_replay`` is true when
    they are the kept answer of an earlier enqueue with the same idempotency key (nothing
    was enqueued now)."""

    idempotent_replay: bool = False


class TaskView(Model):
    """A task as stored (GET /v1/queues/{queue}/tasks/{id})."""

    id: UUID
    queue: str
    tenant: str
    key: str | None
    priority: int
    payload: Any
    state: TaskState
    run_at: datetime
    run_at_initially: datetime
    attempts: int
    max_attempts: int
    created_at: datetime
    ready_since: datetime | None = None
    finished_at: datetime | None = None
    last_error: str | None = None
    result: Any = None
    worker: str | None = None
    lease_expires_at: datetime | None = None
    group: str | None = Field(default=None, description="The task's group, if any.")
    progress: Any = Field(
        default=None, description="The last progress a heartbeat carried: of the running "
                                  "lease while the task is leased, else as its last attempt "
                                  "left it (null when none came).")
    progress_at: datetime | None = Field(default=None,
                                         description="When that progress came.")
    timeout_seconds: int | None = Field(
        default=None, description="The task's own time limit of an attempt, if any (the "
                                  "queue's applies otherwise).")
    parents: list[ParentView] | None = Field(
        default=None, description="What the task waits or waited for (`after`), in order: "
                                  "each parent's id, queue and final state (null while it "
                                  "is not finished), with its result once released.")
    trace: TraceView | None = Field(default=None,
                                    description="The trace context given at enqueue, if any.")
