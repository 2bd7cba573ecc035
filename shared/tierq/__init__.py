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

if TYPE_CHECKING:
    from tierq.engine import Tierq
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


_MODELS = frozenset({"AckItem", "ClaimedTask", "ClaimRequest", "EnqueueOutcome", "HeartbeatItem",
                     "NackItem", "QueueSettingsUpdate", "TaskIn"})


def __getattr__(name: str) -> Any:
    """``tierq.Tierq`` and the models are imported on first use: the engine brings psycopg,
    redis and the SQL, which the HTTP client and most ``tierq`` commands never need (about
    half a second of every command's start), and a Lambda function imports only the models
    its requests use (``tierq.models``)."""
    if name == "Tierq":
        from tierq.engine import Tierq

        return Tierq
    if name in _MODELS:
        import tierq.models

        return getattr(tierq.models, name)
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
