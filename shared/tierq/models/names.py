"""Names of queues and tenants: safe inside Valkey hash tags ``{queue|tenant}`` and lease
tokens ``tenant~…``, so ``{ } | ~ /`` and spaces are excluded."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
KEY_PATTERN = r"^[^\x00-\x1f]{1,512}$"
DEFAULT_TENANT = "_"

QueueName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
TenantName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
TaskKey = Annotated[str, StringConstraints(pattern=KEY_PATTERN)]
