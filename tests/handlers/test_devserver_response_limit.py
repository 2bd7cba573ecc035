"""The local gateway answers a function's result over Lambda's response limit as AWS does: the
invocation fails (Lambda refuses a response payload over 6 MB as its runtime encodes it) and
the HTTP API answers 500 ``Internal Server Error``, so a route that would fail on AWS fails
under ``tierq dev`` too instead of answering the oversized body."""

from __future__ import annotations

import json
from typing import Any

from tests.handlers.support import stand_in_gateway
from tierq.core import sizing
from tierq.local.gateway.http import LocalApi


def api_answering(body: str) -> tuple[LocalApi, list[str]]:
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200, "headers": {"Content-Type": "application/json"},
                "body": body, "isBase64Encoded": False, "cookies": []}

    lines: list[str] = []
    return stand_in_gateway(handler, log=lines.append, open_without_claims=True), lines


def get(api: LocalApi) -> int:
    return api.handle("GET", "/v1/queues", [], b"", "127.0.0.1")[0].status


def test_a_result_over_the_limit_as_the_runtime_encodes_it_is_500() -> None:
    # 3.1 MB of quotes: 6.2 MB once the runtime escapes each one
    quotes = json.dumps({"queues": ['"' * 1_550_000]})
    assert len(quotes.encode()) < sizing.LAMBDA_PAYLOAD_LIMIT
    api, lines = api_answering(quotes)
    response, _ = api.handle("GET", "/v1/queues", [], b"", "127.0.0.1")
    assert response.status == 500
    assert json.loads(response.body) == {"message": "Internal Server Error"}
    assert any("response" in line and "6,000,000" in line for line in lines), lines
    # plain bytes over the limit too
    assert get(api_answering(json.dumps({"queues": ["x" * 6_100_000]}))[0]) == 500


def test_a_large_result_within_the_limit_is_served_whole() -> None:
    body = json.dumps({"queues": ["x" * 5_900_000]})
    api, _ = api_answering(body)
    response, _ = api.handle("GET", "/v1/queues", [], b"", "127.0.0.1")
    assert response.status == 200 and response.body == body.encode()
