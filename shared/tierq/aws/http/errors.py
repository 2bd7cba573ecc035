"""Every error the HTTP API returns has one shape (docs/architecture.md §10):

    {"error": {"code": "invalid_input", "message": "...",
               "details": [{"field": "tasks[3].priority", "message": "..."}]}}

``tierq.errors.TierqError`` subclasses carry their own status and code; request validation
errors become 422 ``invalid_input`` (400 ``malformed_request`` when the body is not JSON),
with one detail per offending field named as a client would write it (``tasks[3].priority``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

import orjson
from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import ConfigDict, Field

from tierq.aws.runtime import logger
from tierq.errors import (
    DatabaseTimedOut,
    MalformedRequest,
    TierqError,
    TooManyRequests,
    Unavailable,
)
from tierq.models.base import Model

# Where a parameter came from, as Powertools puts it first in an error's location.
_SOURCES = ("body", "query", "path", "header", "cookie")
# Tags of the enqueue body's two shapes (see tierq.aws.http.models.EnqueueBody).
UNION_TAGS = frozenset({"batch", "task"})
MAX_DETAILS = 50
# Errors found while parsing the body (tierq.aws.http.resolver): their location is the JSON path.
RAW_JSON_ERRORS = frozenset({"nul_character", "int_out_of_range", "object_expected", "too_deep"})


class ErrorDetail(Model):
    model_config = ConfigDict(extra="allow")

    field: str | None = Field(default=None,
                              description="The offending field, e.g. tasks[3].priority")
    message: str
    type: str | None = Field(default=None, description="A machine-readable kind, when known")


class ErrorBody(Model):
    code: str = Field(description="Stable code, e.g. invalid_input, not_found, forbidden")
    message: str
    details: list[ErrorDetail] = Field(default_factory=list)


class ErrorResponse(Model):
    error: ErrorBody


_DESCRIPTIONS: dict[int, str] = {
    400: "Malformed request (not JSON, wrong content type)",
    403: "The caller's tenant may not touch what the request names",
    404: "No such route, queue or task",
    409: "Conflict with the current state: idempotency_key_reused (the Idempotency-Key "
         "was used with another body; use a fresh key), idempotency_in_progress (its first "
         "request still runs; retry), quota_exceeded (a per-tenant limit), task_finished "
         "(a cancel of a task done or dead already)",
    413: "Payload too large",
    422: "Invalid input; nothing was written",
    429: "too_many_requests: the caller's tenant is over its requests a second or its long "
         "polls in flight (TIERQ_TENANT_*); retry after the Retry-After header",
    503: "A backing store is not answering, or did not finish in time (a statement or "
         "lock timeout); retry after the Retry-After header",
}


def error_responses(*codes: int) -> dict[int, OpenAPIResponse]:
    """OpenAPI ``responses`` entries for the given error statuses (plus 400/422/429/503,
    which any route can return; 429 to tenant callers)."""
    wanted = sorted({400, 422, 429, 503, *codes})
    return {
        code: {
            "description": _DESCRIPTIONS.get(code, HTTPStatus(code).phrase),
            "content": {content_types.APPLICATION_JSON: {"model": ErrorResponse}},
        }
        for code in wanted
    }


def responses(description: str, *codes: int, status: int = 200) -> dict[int, OpenAPIResponse]:
    """OpenAPI ``responses`` for a route: its success (schema from the return annotation)
    and the error statuses it can return."""
    return {status: {"description": description}, **error_responses(*codes)}


def body_of(code: str, message: str, details: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": list(details)}}


def json_response(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=orjson.dumps(body).decode(),
        headers=dict(headers or {}),
    )


# What gives a store's whereabouts or a driver's words away: a URL, an IP address, a
# host:port, libpq's `host=`/`port N` wording.
_INTERNALS = (
    r"[a-z][a-z0-9+.-]*://|\b\d{1,3}(?:\.\d{1,3}){3}\b|\[?[0-9a-f]*:[0-9a-f:]+\]?:\d+"
    r"|\b[\w.-]+:\d{2,5}\b|\bhost\s*=|\bport\s+\d+|server at|connection to|socket")
UNAVAILABLE_FALLBACK = "a backing store is not answering; retry later"


def public_unavailable(exc: Unavailable) -> Unavailable:
    """``exc`` as the caller may see it: its message, unless that gives internals away
    (then a generic one); the detail never."""
    # (compiled by the first 503: re caches it, and a request that fails none pays nothing)
    if re.search(_INTERNALS, exc.message, re.IGNORECASE) is None:
        return exc
    return Unavailable(UNAVAILABLE_FALLBACK, retry_after=exc.retry_after)


def error_response(exc: TierqError) -> Response:
    headers = {}
    if isinstance(exc, Unavailable):
        headers["Retry-After"] = str(exc.retry_after)
        exc = public_unavailable(exc)
    elif isinstance(exc, TooManyRequests):
        headers["Retry-After"] = str(exc.retry_after)
    return json_response(exc.status, exc.to_body(), headers)


def field_name(loc: Iterable[Any], *, tagged: bool = True) -> str:
    """A pydantic error location as a client writes it: ('body', 'batch', 'tasks', 3,
    'priority') -> 'tasks[3].priority'; ('query', 'limit') -> 'limit'. ``tagged``: the
    location may hold a union tag after 'body' (pydantic's, not a raw JSON path)."""
    parts = list(loc)
    source = None
    if parts and parts[0] in _SOURCES:
        source = parts.pop(0)
    if tagged and source == "body" and parts and parts[0] in UNION_TAGS:
        parts.pop(0)
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or source or "body"


def _clean_message(error: Mapping[str, Any]) -> str:
    message = str(error.get("msg") or error.get("type") or "invalid")
    # pydantic prefixes messages of custom validators with "Value error, "
    return message.removeprefix("Value error, ")


def validation_details(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    details = []
    seen: set[tuple[str, str]] = set()
    for error in errors:
        field = field_name(error.get("loc", ()),
                           tagged=error.get("type") not in RAW_JSON_ERRORS)
        message = _clean_message(error)
        if (field, message) in seen:
            continue
        seen.add((field, message))
        details.append({"field": field, "message": message, "type": str(error.get("type", ""))})
        if len(details) >= MAX_DETAILS:
            break
    return details


def summary(details: Sequence[Mapping[str, Any]]) -> str:
    if not details:
        return "invalid input"
    first = details[0]
    text = f"{first['field']}: {first['message']}"
    if len(details) > 1:
        text += f" (and {len(details) - 1} more)"
    return text


def validation_error_response(exc: RequestValidationError) -> Response:
    errors = list(exc.errors())
    invalid_json = [e for e in errors if e.get("type") == "json_invalid"]
    if invalid_json:
        reason = (invalid_json[0].get("ctx") or {}).get("error", "not valid JSON")
        return error_response(MalformedRequest(
            f"the request body is not valid JSON: {reason}",
            details=[{"field": "body", "message": str(reason), "type": "json_invalid"}],
        ))
    details = validation_details(errors)
    return json_response(422, body_of("invalid_input", summary(details), details))


def register(app: ApiGatewayResolver) -> None:
    """Install the error mapping on a resolver."""

    @app.exception_handler(TierqError)
    def _tierq_error(exc: TierqError) -> Response:
        if exc.status >= 500:
            # the whole story for the operator; the caller gets the public message only
            cause = exc.__cause__
            timed_out = isinstance(exc, DatabaseTimedOut)  # up, but slow or a row held
            logger.warning("store timed out" if timed_out else "store unavailable", extra={
                "error": exc.message,
                "detail": getattr(exc, "detail", None),
                "cause": None if cause is None else f"{type(cause).__name__}: {cause}",
            })
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    def _validation_error(exc: RequestValidationError) -> Response:
        return validation_error_response(exc)

    @app.exception_handler(RequestUnsupportedContentType)
    def _content_type(exc: RequestUnsupportedContentType) -> Response:
        return error_response(MalformedRequest(
            "the request body must be JSON (Content-Type: application/json)",
            details=[{"field": "body", "message": "unsupported content type"}],
        ))

    @app.not_found
    def _not_found(exc: NotFoundError) -> Response:
        event = app.current_event
        return json_response(404, body_of(
            "not_found", f"no route {event.http_method} {event.path}",
        ))

    @app.exception_handler(Exception)
    def _unexpected(exc: Exception) -> Response:
        logger.exception("unexpected error")
        return json_response(500, body_of("internal", "internal error; see the function's log"))
