"""The Python client of the tierq HTTP API, and the errors it raises.

    from tierq.client import Client

    api = Client("http://127.0.0.1:3000")          # or Client.from_env(): TIERQ_URL, …
    api.enqueue_one("emails", {"to": "a@example.com"}, key="welcome-42")

:class:`AsyncClient` has the same methods as coroutines, for asyncio. Workers:
:class:`tierq.client.worker.Worker` runs a handler over a client on threads,
:class:`tierq.client.worker.AsyncWorker` a coroutine handler over an ``AsyncClient``.
"""

from tierq.extras import MissingExtraError

try:
    import httpx  # noqa: F401  (every module of the client uses it)
except ModuleNotFoundError as error:
    raise MissingExtraError.from_error(error, "client", "tierq.client") from error

from tierq.client.aio import AsyncClient
from tierq.client.auth import BearerAuth, SigV4Auth
from tierq.client.errors import (
    ApiError,
    AuthConfigError,
    ConflictError,
    ConnectionFailed,
    ForbiddenError,
    InvalidInputError,
    MalformedRequestError,
    NotFoundError,
    PayloadTooLargeError,
    PayloadTransferError,
    ServerError,
    TooManyRequestsError,
    UnavailableError,
)
from tierq.client.http import DEFAULT_URL, Client
from tierq.client.retry import NO_RETRIES, RetryPolicy
from tierq.models.envelopes import (
    DeadLetterPage,
    DetailedMetrics,
    PurgeResult,
    ReplayResult,
    RunningMetrics,
)

__all__ = [
    "DEFAULT_URL",
    "NO_RETRIES",
    "ApiError",
    "AsyncClient",
    "AuthConfigError",
    "BearerAuth",
    "Client",
    "ConflictError",
    "ConnectionFailed",
    "DeadLetterPage",
    "DetailedMetrics",
    "ForbiddenError",
    "InvalidInputError",
    "MalformedRequestError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PayloadTransferError",
    "PurgeResult",
    "ReplayResult",
    "RetryPolicy",
    "RunningMetrics",
    "ServerError",
    "SigV4Auth",
    "TooManyRequestsError",
    "UnavailableError",
]
