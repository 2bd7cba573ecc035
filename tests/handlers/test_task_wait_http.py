"""``GET /v1/queues/{queue}/tasks/{id}?wait_seconds=N`` through the function API Gateway
routes it to: answered at the ack, 422 naming wait_seconds outside 0 < N ≤ 20, a tenant's
long-poll place while it waits (429 past its cap, claims and waits together), another
tenant's task 404 at once, and the parameter in the OpenAPI document. Real stores."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.handlers.support import Invoke, Reply
from tierq.aws.http.resolver import openapi_document
from tierq.aws.runtime import default_engine
from tierq.dal.warm_tier import TenantKeys

ACME = {"tenant": "acme"}
GLOBEX = {"tenant": "globex"}


def enqueued(call: Invoke, claims: dict[str, Any] = ACME) -> str:
    made = call("POST", "/v1/queues/q/tasks", {"payload": {"n": 1}}, claims=claims)
    assert made.status in (200, 201), made.body
    return str(made.body["id"])


def in_thread(call: Invoke, path: str, query: dict[str, str],
              claims: dict[str, Any]) -> tuple[threading.Thread, list[Reply]]:
    out: list[Reply] = []
    thread = threading.Thread(target=lambda: out.append(
        call("GET", path, query=query, claims=claims)), daemon=True)
    thread.start()
    return thread, out


def test_a_wait_answers_done_at_the_ack(call: Invoke) -> None:
    task_id = enqueued(call)
    [task] = call("POST", "/v1/queues/q/claims", {}, claims=ACME).body["tasks"]
    started = time.monotonic()
    thread, out = in_thread(call, f"/v1/queues/q/tasks/{task_id}", {"wait_seconds": "15"},
                            ACME)
    time.sleep(0.5)
    acked = call("POST", "/v1/queues/q/acks",
                 {"acks": [{"id": task_id, "lease_token": task["lease_token"]}]},
                 claims=ACME)
    assert acked.status == 200, acked.body
    thread.join(10)
    [reply] = out
    assert reply.status == 200 and reply.body["state"] == "done", reply.body
    assert time.monotonic() - started < 5
    # a task acked without a result still answers done to its tenant, at once
    again = call("GET", f"/v1/queues/q/tasks/{task_id}", query={"wait_seconds": "10"},
                 claims=ACME)
    assert again.status == 200 and again.body["state"] == "done"
    assert call("GET", f"/v1/queues/q/tasks/{task_id}", claims=ACME).status == 404


@pytest.mark.parametrize("value", ["0", "-1", "20.5", "soon"])
def test_a_wait_outside_0_to_20_seconds_is_422_naming_it(call: Invoke, value: str) -> None:
    task_id = enqueued(call)
    reply = call("GET", f"/v1/queues/q/tasks/{task_id}", query={"wait_seconds": value},
                 claims=ACME)
    assert reply.status == 422, reply.body
    assert "wait_seconds" in str(reply.body)


def test_another_tenants_task_is_404_without_waiting(call: Invoke) -> None:
    task_id = enqueued(call)
    started = time.monotonic()
    reply = call("GET", f"/v1/queues/q/tasks/{task_id}", query={"wait_seconds": "10"},
                 claims=GLOBEX)
    assert reply.status == 404 and time.monotonic() - started < 2


def test_waits_count_toward_the_tenants_long_polls(call: Invoke,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_TENANT_LONG_POLLS", "1")
    monkeypatch.setenv("TIERQ_TENANT_REQUESTS_PER_SECOND", "0")
    task_id = enqueued(call)
    path = f"/v1/queues/q/tasks/{task_id}"
    thread, out = in_thread(call, path, {"wait_seconds": "2"}, ACME)
    polls = TenantKeys.of("acme").polls
    warm = default_engine().ctx.warm
    deadline = time.monotonic() + 5
    while warm.client.zcard(polls) < 1:  # the wait holds acme's one place
        assert time.monotonic() < deadline
        time.sleep(0.01)
    refused = call("GET", path, query={"wait_seconds": "1"}, claims=ACME)
    assert refused.status == 429 and refused.headers["retry-after"] == "1"
    assert refused.body["error"]["details"][0]["field"] == "wait_seconds"
    claim = call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.2}, claims=ACME)
    assert claim.status == 429  # claims and waits share the cap
    assert call("GET", path, claims=ACME).status == 200  # a read that does not wait
    thread.join(10)
    assert out[0].status == 200 and out[0].body["state"] == "warm"
    assert warm.client.zcard(polls) == 0  # given back


def test_the_openapi_document_names_wait_seconds() -> None:
    operation = openapi_document()["paths"]["/v1/queues/{queue}/tasks/{id}"]["get"]
    [param] = [p for p in operation["parameters"] if p["name"] == "wait_seconds"]
    assert param["in"] == "query" and not param.get("required", False)
    schema = str(param["schema"])
    assert "20" in schema and "exclusiveMinimum" in schema
    assert "wait_seconds" in operation["description"]
