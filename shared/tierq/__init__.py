"""tierq: a durable, serverless task queue for AWS — a bounded warm tier in Valkey over a
cold tier in PostgreSQL."""

from tierq.engine import Tierq
from tierq.errors import (
    Conflict,
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

__version__ = "0.1.0"

__all__ = [
    "AckItem",
    "ClaimRequest",
    "ClaimedTask",
    "Conflict",
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
