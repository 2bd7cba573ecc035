"""What the HTTP client raises.

Every error the API returns has the body ``{"error": {"code", "message", "details"}}``; the
client raises it as an :class:`ApiError` subclass chosen by status, carrying the ``code``,
``message``, ``details`` and (for 429/503) ``retry_after``. A request that cannot reach the
API after all retries raises :class:`ConnectionFailed`. Input the client can check itself is
refused before anything is sent, as :class:`InvalidInputError` naming the field, exactly as
the API would have.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import ValidationError

from tierq.errors import TierqError


class ApiError(TierqError):
    """An error response of the API (or input refused by the client before sending)."""

    def __init__(self, message: str, *, status: int, code: str,
                 details: list[dict[str, Any]] | None = None,
                 retry_after: float | None = None, method: str | None = None,
                 url: str | None = None) -> None:
        super().__init__(message, details=details)
        self.status = status
        self.code = code
        self.retry_after = retry_after
        self.method = method
        self.url = url

    def __str__(self) -> str:
        where = f" ({self.method} {self.url})" if self.method and self.url else ""
        return f"{self.status} {self.code}: {self.message}{where}"


class MalformedRequestError(ApiError):
    """400: the request could not be parsed."""


class ForbiddenError(ApiError):
    """403: the caller (its token's tenant) may not touch what the request names."""


class NotFoundError(ApiError):
    """404: no such route, queue, task or schedule."""


class ConflictError(ApiError):
    """409."""


class PayloadTooLargeError(ApiError):
    """413."""


class InvalidInputError(ApiError):
    """422: invalid input, nothing was written; ``details`` name each offending field."""


class TooManyRequestsError(ApiError):
    """429 (still, after the client's retries)."""


class ServerError(ApiError):
    """A 5xx other than 503 (still, after the client's retries)."""


class UnavailableError(ServerError):
    """503: a backing store did not answer (still, after the client's retries)."""


class PayloadTransferError(ApiError):
    """A big payload's upload to, or download from, the payload store (a presigned URL) was
    refused, or failed after the client's retries; ``status`` is the store's (0: never
    reached)."""


class ConnectionFailed(TierqError):
    """The API could not be reached (connection refused, reset, timed out) after retries."""

    status = 0
    code = "connection_failed"

    def __init__(self, message: str, *, method: str, url: str) -> None:
        super().__init__(message)
        self.method = method
        self.url = url

    def __str__(self) -> str:
        return f"{self.message} ({self.method} {self.url})"


class AuthConfigError(TierqError):
    """Request signing is asked for but cannot work (no AWS credentials or region)."""

    status = 0
    code = "auth_config"


_BY_STATUS: dict[int, type[ApiError]] = {
    400: MalformedRequestError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: InvalidInputError,
    429: TooManyRequestsError,
    503: UnavailableError,
}


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime
    from time import time

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time())


def error_from_response(response: httpx.Response) -> ApiError:
    """The :class:`ApiError` for an error response (the API's error body, or a plain one
    from a gateway in front of it)."""
    status = response.status_code
    code = f"http_{status}"
    message = response.reason_phrase or "error"
    details: list[dict[str, Any]] = []
    try:
        body = response.json()
    except ValueError:
        body = None
        text = response.text.strip()
        if text:
            message = text[:500]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            code = str(error.get("code") or code)
            message = str(error.get("message") or message)
            raw = error.get("details") or []
            details = [d if isinstance(d, dict) else {"message": str(d)} for d in raw]
        elif isinstance(body.get("message"), str):  # API Gateway's own errors
            message = body["message"]
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return cls(message, status=status, code=code, details=details,
               retry_after=parse_retry_after(response.headers.get("retry-after")),
               method=response.request.method, url=str(response.request.url))


def field_path(loc: tuple[Any, ...], prefix: str = "") -> str:
    """A pydantic location as the API names fields: ``tasks[3].priority``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def invalid_input(exc: ValidationError, prefix: str = "") -> InvalidInputError:
    """The :class:`InvalidInputError` for input the client refused before sending."""
    details = []
    for error in exc.errors():
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        details.append({"field": field_path(tuple(error.get("loc", ())), prefix),
                        "message": message, "type": str(error.get("type", ""))})
    first = details[0] if details else {"field": prefix or "body", "message": "invalid"}
    summary = f"{first['field']}: {first['message']}"
    if len(details) > 1:
        summary += f" (and {len(details) - 1} more)"
    return InvalidInputError(summary, status=422, code="invalid_input", details=details)
