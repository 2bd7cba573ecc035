"""One idempotency key, two doors: a call to the engine in Python and a request to the HTTP
API with the same caller, key and body are one request (the HTTP layer only reads the
header; the records are the engine's)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from tests.handlers.support import Invoke, task_count
from tierq.aws.http.access import subject_of
from tierq.aws.runtime import engine
from tierq.logic import idempotency
from tierq.logic.idempotency import Caller, IdempotencyKeyReused
from tierq.models import TaskIn

TENANT_A = {"sub": "a", "tenant": "acme"}
CALLER_A = Caller.of_tenant("acme", subject_of(TENANT_A))


def test_an_engine_enqueue_is_replayed_over_http(call: Invoke,
                                                 pg: psycopg.Connection[Any]) -> None:
    key = str(uuid.uuid4())
    body = {"tasks": [{"payload": {"n": 1}}, {"payload": {"n": 2}}]}
    first = engine().enqueue("both", [TaskIn.model_validate(t) for t in body["tasks"]],
                             tenant="acme", idempotency_key=key, caller=CALLER_A,
                             body_fingerprint=idempotency.fingerprint(body))
    again = call("POST", "/v1/queues/both/tasks", body, headers={"Idempotency-Key": key},
                 claims=TENANT_A)
    assert again.status == 200 and again.headers.get("idempotent-replayed") == "true"
    assert [t["id"] for t in again.body["tasks"]] == [str(o.id) for o in first]
    assert task_count(pg, "both") == 2
    other = call("POST", "/v1/queues/both/tasks", {"payload": "other"},
                 headers={"Idempotency-Key": key}, claims=TENANT_A)
    assert other.status == 409 and other.body["error"]["code"] == "idempotency_key_reused"
    # another caller's key of the same name is its own
    theirs = call("POST", "/v1/queues/both/tasks", body, headers={"Idempotency-Key": key},
                  claims={"sub": "b", "tenant": "acme"})
    assert theirs.status == 200 and "idempotent-replayed" not in theirs.headers
    assert task_count(pg, "both") == 4


def test_an_http_enqueue_is_replayed_by_the_engine(call: Invoke,
                                                   pg: psycopg.Connection[Any]) -> None:
    key = str(uuid.uuid4())
    body = {"payload": {"n": 1}}
    first = call("POST", "/v1/queues/both/tasks", body, headers={"Idempotency-Key": key},
                 claims=TENANT_A)
    assert first.status == 200
    again = engine().enqueue("both", [TaskIn.model_validate(body)], tenant="acme",
                             idempotency_key=key, caller=CALLER_A,
                             body_fingerprint=idempotency.fingerprint(body))
    # the single task's record, as the route kept it, read by the engine
    assert again.idempotent_replay and [str(o.id) for o in again] == [first.body["id"]]
    with pytest.raises(IdempotencyKeyReused):
        engine().enqueue("both", [TaskIn(payload="x")], tenant="acme", idempotency_key=key,
                         caller=CALLER_A)
    assert task_count(pg, "both") == 1


def test_a_replayed_response_is_the_first_byte_for_byte(call: Invoke) -> None:
    key = {"Idempotency-Key": str(uuid.uuid4())}
    for body in ({"payload": {"n": 1}, "priority": 3},
                 {"tasks": [{"payload": i, "key": f"k{i}"} for i in range(3)]}):
        key = {"Idempotency-Key": str(uuid.uuid4())}
        first = call("POST", "/v1/queues/bytes/tasks", body, headers=key, claims=TENANT_A)
        again = call("POST", "/v1/queues/bytes/tasks", body, headers=key, claims=TENANT_A)
        assert again.headers.get("idempotent-replayed") == "true"
        assert again.raw["body"] == first.raw["body"]
    claimed = call("POST", "/v1/queues/bytes/claims", {"max": 2}, claims=TENANT_A)
    acks = {"acks": [{"id": t["id"], "lease_token": t["lease_token"]}
                     for t in claimed.body["tasks"]]}
    first = call("POST", "/v1/queues/bytes/acks", acks, headers=key, claims=TENANT_A)
    again = call("POST", "/v1/queues/bytes/acks", acks, headers=key, claims=TENANT_A)
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.raw["body"] == first.raw["body"] and len(first.body["acked"]) == 2
