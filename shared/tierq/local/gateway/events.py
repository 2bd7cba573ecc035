"""API Gateway HTTP API, payload format 2.0: the event a request becomes, and what the
function's result becomes as an HTTP response — as API Gateway does both.

Event (https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html):

| part of the request | in the event                                                        |
| ------------------- | ------------------------------------------------------------------- |
| headers             | names lower-cased, repeated headers joined with commas; cookies     |
|                     | moved to ``cookies``                                                |
| query parameters    | decoded, repeats joined with commas                                 |
| path parameters     | decoded                                                             |
| the body            | as text, or base64 (``isBase64Encoded``) when it is not text        |
| the rest            | ``requestContext``: the route key, method, path, source IP, request |
|                     | id, time, stage ``$default`` and, when the caller's token carried   |
|                     | claims, ``authorizer.jwt.claims``                                   |

Response: a result with ``statusCode`` is used as given (``headers``, ``cookies``, ``body``,
``isBase64Encoded``); any other JSON result is a 200 ``application/json`` of that JSON.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote

ACCOUNT_ID = "123456789012"
API_ID = "local"
DOMAIN = "localhost"

_TEXT_TYPES = ("application/json", "application/xml", "application/javascript",
               "application/x-www-form-urlencoded", "application/yaml")


def is_text_type(content_type: str | None) -> bool:
    if not content_type:
        return True
    media = content_type.split(";")[0].strip().lower()
    return (media.startswith("text/") or media in _TEXT_TYPES
            or media.endswith("+json") or media.endswith("+xml"))


def _joined(pairs: Iterable[tuple[str, str]], *, lower: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in pairs:
        key = name.lower() if lower else name
        out[key] = f"{out[key]},{value}" if key in out else value
    return out


def build_event(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    route_key: str,
    path_parameters: Mapping[str, str],
    source_ip: str = "127.0.0.1",
    claims: Mapping[str, Any] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The payload v2 event API Gateway would send for this request."""
    header_map = _joined(headers, lower=True)
    cookies = header_map.pop("cookie", None)
    at = time.time() if now is None else now
    request_id = base64.b32encode(uuid.uuid4().bytes).decode().rstrip("=")[:16]
    http_path = unquote(raw_path)
    context: dict[str, Any] = {
        "accountId": ACCOUNT_ID,
        "apiId": API_ID,
        "domainName": header_map.get("host", DOMAIN).split(":")[0],
        "domainPrefix": API_ID,
        "http": {
            "method": method,
            "path": http_path,
            "protocol": "HTTP/1.1",
            "sourceIp": source_ip,
            "userAgent": header_map.get("user-agent", ""),
        },
        "requestId": request_id,
        "routeKey": route_key,
        "stage": "$default",
        "time": datetime.fromtimestamp(at, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
        "timeEpoch": int(at * 1000),
    }
    if claims is not None:
        context["authorizer"] = {"jwt": {"claims": {k: _claim(v) for k, v in claims.items()},
                                         "scopes": None}}
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": header_map,
        "requestContext": context,
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = [c.strip() for c in cookies.split(";") if c.strip()]
    if raw_query:
        query = _joined(parse_qsl(raw_query, keep_blank_values=True), lower=False)
        if query:
            event["queryStringParameters"] = query
    if path_parameters:
        event["pathParameters"] = {k: unquote(v) for k, v in path_parameters.items()}
    if body:
        text = None
        if is_text_type(header_map.get("content-type")):
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        if text is None:
            event["body"] = base64.b64encode(body).decode()
            event["isBase64Encoded"] = True
        else:
            event["body"] = text
    return event


def _claim(value: Any) -> str:
    """JWT claims reach the function as strings (arrays as "[a b]"), as API Gateway does."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + " ".join(str(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, dict) else str(value)


@dataclass
class HttpResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def to_http_response(result: Any) -> HttpResponse:
    """What API Gateway answers for a function's result (payload format 2.0)."""
    if isinstance(result, dict) and "statusCode" in result:
        status = int(result["statusCode"])
        headers = [(str(k), str(v)) for k, v in (result.get("headers") or {}).items()]
        for name, values in (result.get("multiValueHeaders") or {}).items():
            headers.extend((str(name), str(v)) for v in values)
        headers.extend(("Set-Cookie", str(c)) for c in result.get("cookies") or [])
        raw = result.get("body")
        if raw is None:
            body = b""
        elif result.get("isBase64Encoded"):
            body = base64.b64decode(str(raw))
        else:
            body = str(raw).encode("utf-8")
        return HttpResponse(status, headers, body)
    body = (result if isinstance(result, str) else json.dumps(result)).encode("utf-8")
    return HttpResponse(200, [("Content-Type", "application/json")], body)
