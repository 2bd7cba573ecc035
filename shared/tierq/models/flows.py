"""Flows: a graph of tasks created in one request (``POST /v1/flows``)."""


from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from tierq.models.base import Model, Replayable
from tierq.models.names import NAME_PATTERN, RUN_AT_PATTERN, QueueName, TenantName
from tierq.models.strict import RequestModel
from tierq.models.tasks import MAX_DELAY_SECONDS, MAX_PARENTS, TaskState
from tierq.models.traces import TraceContext

MAX_FLOW_TASKS = 500
# a ref names a task of the request; `after` takes refs or the ids of existing tasks
FlowRef = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
ParentRef = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class FlowTaskIn(RequestModel):
    """One task of a flow: a task to enqueue (without a key), its queue and its ref."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"anyOf": [
        {"properties": {"delay_seconds": {"type": "null"}}},
        {"properties": {"run_at": {"type": "null"}}},
    ]})

    ref: FlowRef = Field(description="The task's name within this request (unique in it).")
    queue: QueueName
    payload: Any = Field(description="Any JSON value; at most 256 KiB once serialised.")
    priority: int = Field(default=0, ge=0, le=9)
    delay_seconds: float | None = Field(default=None, ge=0, le=MAX_DELAY_SECONDS)
    run_at: datetime | None = Field(default=None, json_schema_extra={"pattern": RUN_AT_PATTERN})
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    after: list[ParentRef] = Field(
        default_factory=list, max_length=MAX_PARENTS,
        description="Refs of tasks of this request, or ids of existing tasks of the tenant "
                    "on the same shard, that this task waits for.")
    on_parent_failure: Literal["dead", "run"] = "dead"
    wait_timeout_seconds: float | None = Field(default=None, gt=0, le=MAX_DELAY_SECONDS)
    trace: TraceContext | None = Field(
        default=None, description="The producer's trace context (as a task's `trace`).")

    @field_validator("run_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> "FlowTaskIn":
        if self.delay_seconds is not None and self.run_at is not None:
            raise ValueError("give delay_seconds or run_at, not both")
        return self


class FlowIn(RequestModel):
    """A whole graph, created all or nothing."""

    model_config = ConfigDict(extra="forbid")

    tenant: TenantName | None = Field(
        default=None, description="The tenant of every task (a tenant's token: its own).")
    tasks: list[FlowTaskIn] = Field(min_length=1, max_length=MAX_FLOW_TASKS)


class FlowTaskOut(Model):
    id: UUID
    queue: str
    state: TaskState


class FlowResult(Replayable):
    """Each ref of the request, with its task's id, queue and state."""

    tenant: str
    tasks: dict[str, FlowTaskOut]
