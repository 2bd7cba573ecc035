"""Names of queues and tenants: safe inside Valkey hash tags ``{queue|tenant}`` and lease
tokens ``tenant~…``, so ``{ } | ~ /`` and spaces are excluded."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
KEY_PATTERN = r"^[^\x00-\x1f]{1,512}$"
GROUP_PATTERN = r"^[^\x00-\x1f]{1,128}$"  # a key's characters, at most 128
DEFAULT_TENANT = "_"

QueueName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
TenantName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
TaskKey = Annotated[str, StringConstraints(pattern=KEY_PATTERN)]
GroupName = Annotated[str, StringConstraints(pattern=GROUP_PATTERN)]

# Every string the API takes is stored, and PostgreSQL stores no NUL character: the HTTP
# layer refuses one anywhere in a body. The API document says so of each free-text field.
NO_NUL_PATTERN = r"^[^\u0000]*$"
# RFC 3339 date-times from the year 1970 on (as written, before the offset applies).
RUN_AT_PATTERN = (r"^(19[7-9][0-9]|[2-9][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
                  r"[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?"
                  r"([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$")
