"""tierq: a durable, serverless task queue for AWS — a bounded warm tier in Valkey over a
cold tier in PostgreSQL."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierq.engine import Tierq
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

__version__ = "0.1.0"


_ERRORS = frozenset({"Conflict", "DatabaseTimedOut", "Forbidden", "InvalidInput",
                     "MalformedRequest", "NotFound", "PayloadTooLarge", "TierqError",
                     "Unavailable"})
_MODELS = frozenset({"AckItem", "ClaimedTask", "ClaimRequest", "EnqueueOutcome", "HeartbeatItem",
                     "NackItem", "QueueSettingsUpdate", "TaskIn"})


def __getattr__(name: str) -> Any:
    """``tierq.Tierq``, the models and the errors are imported on first use.

    The engine brings psycopg, redis and the SQL, which the HTTP client and most ``tierq``
    commands never need (about half a second of every command's start); a Lambda function
    imports only the models its requests use (``tierq.models``); and importing this package
    allocates next to nothing, so that a handler's first import,
    ``tierq.core.cold_start``, pauses the cycle collector before any of tierq's objects
    exist (a collection there walked the runtime's objects: ~4 ms of a cold start).
    """
    if name == "Tierq":
        from tierq.engine import Tierq

        return Tierq
    if name in _ERRORS or name == "errors":
        import tierq.errors

        return tierq.errors if name == "errors" else getattr(tierq.errors, name)
    if name in _MODELS:
        import tierq.models

        return getattr(tierq.models, name)
    raise AttributeError(f"module 'tierq' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The names of ``__all__`` too, which ``__getattr__`` reads on first use."""
    return sorted({*globals(), *__all__})


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
