"""``tierq dev`` answers a request body over Lambda's request limit as the function does on
AWS: 413 in the API's error shape, nothing written — whether the body is too large as bytes
(the local gateway refuses it before any function) or only once its quotes are escaped in
the event (the function's resolver refuses it)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import psycopg
import pytest
import redis

from tests.e2e.test_api import untouched
from tierq.core import sizing

pytestmark = pytest.mark.e2e


def post(http: httpx.Client, queue: str, text: str) -> httpx.Response:
    return http.post(f"/v1/queues/{queue}/tasks", content=text.encode(),
                     headers={"content-type": "application/json"})


def assert_413(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "payload_too_large"
    assert str(sizing.REQUEST_BODY_LIMIT) in error["message"].replace(",", "")


def test_a_body_over_lambdas_request_limit_is_413_in_the_error_shape(
        http: httpx.Client, queue: str, pg: psycopg.Connection[Any],
        valkey: redis.Redis) -> None:
    # 6.25 MB: between Lambda's 6 MB and API Gateway's 10 MB
    too_many_bytes = json.dumps({"tasks": [{"payload": "x" * 250_000} for _ in range(25)]})
    assert sizing.REQUEST_BODY_LIMIT < len(too_many_bytes) < 10 * 1024 * 1024
    assert_413(post(http, queue, too_many_bytes))
    # 3 MB as bytes, over 6 MB once the event escapes its quotes and backslashes
    escaped = json.dumps({"tasks": [{"payload": '"' * 60_000} for _ in range(25)]})
    assert len(escaped) < sizing.REQUEST_BODY_LIMIT < sizing.body_cost(escaped.encode())
    assert_413(post(http, queue, escaped))
    assert untouched(pg, valkey, queue)
    # just under the limit is served
    fits = json.dumps({"tasks": [{"payload": "x" * 230_000} for _ in range(25)]})
    assert post(http, queue, fits).status_code == 200
