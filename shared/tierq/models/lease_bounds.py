"""The bounds of a claim, a lease and a heartbeat's progress, apart from the claim's
models: the lease outcomes read them without defining the claimed task's model (the ack
function claims nothing)."""


from typing import Any

import orjson
from pydantic.config import JsonDict

from tierq.models.names import NO_NUL_PATTERN

NO_NUL: JsonDict = {"pattern": NO_NUL_PATTERN}

MAX_LEASE_SECONDS = 43_200  # 12 hours, as SQS's visibility timeout
MAX_CLAIM = 500
# The most a heartbeat's progress holds, encoded as JSON (UTF-8 bytes): it is kept in Valkey
# with the lease, and in the task's row once the attempt ends.
MAX_PROGRESS_BYTES = 4096


def progress_size(value: Any) -> int:
    """The bytes of ``value`` encoded as JSON, as the API keeps it."""
    return len(orjson.dumps(value))
