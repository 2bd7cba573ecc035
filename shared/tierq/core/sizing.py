"""What a Lambda response weighs as the runtime sends it.

Lambda caps a synchronous invocation's response (and request) at 6 MB, counted on the bytes
the runtime writes: the handler's return value — ``{"statusCode", "headers", "body", …}`` —
encoded once more as JSON. The python3.12+ runtimes write that JSON as UTF-8
(``ensure_ascii=False``), the older ones with ``\\uXXXX`` escapes. The body is a JSON text
inside a JSON string, so each ``"`` and ``\\`` of the body costs a second byte on the wire.

Routes that return lists size their answers with :func:`body_cost`; tests check every
handler's return value with :func:`runtime_encoded_size`.
"""

from __future__ import annotations

import json
from typing import Any

# Lambda's limit for a synchronous response and request payload, in bytes.
LAMBDA_PAYLOAD_LIMIT = 6_000_000
# Room kept for the envelope around a response body: status, headers, cookies, the JSON
# punctuation around lists and the list's cursor.
ENVELOPE_RESERVE = 16 * 1024
# What the body of one response may cost (body_cost) so that the whole return value fits.
RESPONSE_BODY_BUDGET = LAMBDA_PAYLOAD_LIMIT - ENVELOPE_RESERVE
# Lambda's limit for a request as API Gateway hands it over: the event around the body
# (headers, request context) takes some of it.
REQUEST_BODY_LIMIT = LAMBDA_PAYLOAD_LIMIT - 64 * 1024

_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def body_cost(json_text: bytes) -> int:
    """Bytes a piece of UTF-8 JSON text adds to the runtime's encoding of a response whose
    body contains it: itself, plus one escape byte for every quote and backslash."""
    return len(json_text) + json_text.count(_QUOTE) + json_text.count(_BACKSLASH)


def runtime_encoded(response: Any, *, ascii_escapes: bool = False) -> bytes:
    """``response`` as the Lambda runtime sends it: UTF-8 JSON on python3.12+ runtimes, or
    with ASCII escapes (``ascii_escapes=True``) as python3.11's runtime writes it."""
    return json.dumps(response, ensure_ascii=ascii_escapes).encode("utf-8")


def runtime_encoded_size(response: Any, *, ascii_escapes: bool = False) -> int:
    return len(runtime_encoded(response, ascii_escapes=ascii_escapes))
