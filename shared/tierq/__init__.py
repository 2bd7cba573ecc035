"""tierq: a durable, serverless task queue for AWS — a bounded warm tier in Valkey over a
cold tier in PostgreSQL."""

from typing import TYPE_CHECKING, Any

from tierq.errors import (
    Conflict,
    DatabaseTimedOut,
    Forbidden,
    InvalidInput,
    MalformedRequest,
    NotFound,
    PayloadTooLarge,
    TierqError,
    Unavailable,
)
from tierq.models import (
    AckItem,
    ClaimedTask,
    ClaimRequest,
    EnqueueOutcome,
    HeartbeatItem,
    NackItem,
    QueueSettingsUpdate,
    TaskIn,
)

if TYPE_CHECKING:
    from tierq.engine import Tierq

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``tierq.Tierq`` is imported on first use: the engine brings psycopg, redis and the
    SQL, which the HTTP client and most ``tierq`` commands never need (about half a second
    of every command's start)."""
    if name == "Tierq":
        from tierq.engine import Tierq

        return Tierq
    raise AttributeError(f"module 'tierq' has no attribute {name!r}")

__all__ = [
    "AckItem",
    "ClaimRequest",
    "ClaimedTask",
    "Conflict",
    "DatabaseTimedOut",
    "EnqueueOutcome",
    "Forbidden",
    "HeartbeatItem",
    "InvalidInput",
    "MalformedRequest",
    "NackItem",
    "NotFound",
    "PayloadTooLarge",
    "QueueSettingsUpdate",
    "TaskIn",
    "Tierq",
    "TierqError",
    "Unavailable",
]
