"""Request bodies of the HTTP API. The items inside (tasks, acks, …) are the engine's own
models from :mod:`tierq.models`; this module only wraps them in the shapes of the HTTP API
(docs/architecture.md §10). The bodies of the lease routes (acks, nacks, releases,
heartbeats) are in :mod:`tierq.aws.http.lease_bodies`, imported by the ack function alone.
The response envelopes, which the client reads too, are defined once, in
:mod:`tierq.models.envelopes`."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from pydantic import ConfigDict, Discriminator, Field, Tag, model_validator

from tierq.logic.enqueue import MAX_BATCH
from tierq.models.base import Model
from tierq.models.tasks import TaskIn

MAX_IDS = 1000


class TaskBatch(Model):
    """``{"tasks": [...]}``: up to 500 tasks, enqueued in one transaction."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[TaskIn] = Field(min_length=1, max_length=MAX_BATCH)


def _enqueue_shape(value: Any) -> str:
    if isinstance(value, dict) and "tasks" in value:
        return "batch"
    if isinstance(value, TaskBatch):
        return "batch"
    return "task"


# One task object, or {"tasks": [...]}. The tag names are stripped from error locations
# (tierq.aws.http.errors.UNION_TAGS), so errors read "priority" or "tasks[3].priority".
EnqueueBody = Annotated[
    Annotated[TaskBatch, Tag("batch")] | Annotated[TaskIn, Tag("task")],
    Discriminator(_enqueue_shape),
]


class DeadLetterSelection(Model):
    """Which dead letters: ``{"ids": [...]}`` or ``{"all": true}``."""

    # exactly one of the two selections, as the validator below decides it
    model_config = ConfigDict(extra="forbid", json_schema_extra={"oneOf": [
        {"required": ["ids"], "properties": {"ids": {"type": "array"},
                                             "all": {"const": False}}},
        {"required": ["all"], "properties": {"all": {"const": True},
                                             "ids": {"type": "null"}}},
    ]})

    ids: list[UUID] | None = Field(default=None, min_length=1, max_length=MAX_IDS)
    all: bool = Field(default=False, strict=True)  # "true" or 1 is not a boolean

    @model_validator(mode="after")
    def _one_selection(self) -> DeadLetterSelection:
        if self.all and self.ids:
            raise ValueError('give "ids" or "all": true, not both')
        if not self.all and not self.ids:
            raise ValueError('give "ids" (a non-empty list) or "all": true')
        return self
