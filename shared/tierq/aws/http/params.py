"""Path and query parameters shared by the routers (validated by Powertools against these
annotations; a bad value is 422 naming the parameter)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from tierq.models.names import NAME_PATTERN

QueuePath = Annotated[str, Path(
    pattern=NAME_PATTERN, description="Queue name: letters, digits, _ . - (at most 64).",
)]
TaskIdPath = Annotated[UUID, Path(alias="id", description="The task's id (a UUID).")]
TenantQuery = Annotated[str | None, Query(
    pattern=NAME_PATTERN, description="Only this tenant.",
)]
QueueQuery = Annotated[str | None, Query(pattern=NAME_PATTERN, description="Only this queue.")]
