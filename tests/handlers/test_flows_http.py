"""Flows over HTTP, through the Lambda handlers over real PostgreSQL and Valkey: `after` on
an enqueue, ``POST /v1/flows`` (a tenant route pinned to the caller's tenant, taking an
Idempotency-Key), the parents a claim carries and what a waiting task's GET shows."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from tests.handlers.support import Invoke, task_count

TENANT_A = {"sub": "a", "tenant": "acme"}
TENANT_B = {"sub": "b", "tenant": "bolt"}


def test_enqueue_after_then_claim_carries_the_parents(call: Invoke) -> None:
    parent = call("POST", "/v1/queues/q/tasks", {"payload": 1}).body
    child = call("POST", "/v1/queues/r/tasks",
                 {"payload": 2, "after": [parent["id"]]}).body
    assert child["state"] == "waiting"
    view = call("GET", f"/v1/queues/r/tasks/{child['id']}").body
    assert view["state"] == "waiting"
    assert view["parents"] == [{"id": parent["id"], "queue": "q", "state": None,
                                "result": None}]
    [task] = call("POST", "/v1/queues/q/claims", {"max": 1}).body["tasks"]
    acked = call("POST", "/v1/queues/q/acks", {"acks": [
        {"id": task["id"], "lease_token": task["lease_token"], "result": {"ok": True}}]})
    assert acked.status == 200
    [got] = call("POST", "/v1/queues/r/claims", {"max": 1}).body["tasks"]
    assert got["id"] == child["id"]
    assert got["parents"] == [{"id": parent["id"], "queue": "q", "state": "done",
                               "result": {"ok": True}}]


def test_a_flow_maps_refs_and_is_pinned_to_the_callers_tenant(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    body = {"tasks": [
        {"ref": "a", "queue": "q", "payload": 1},
        {"ref": "b", "queue": "r", "payload": 2, "after": ["a"]},
    ]}
    reply = call("POST", "/v1/flows", body, claims=TENANT_A)
    assert reply.status == 200, reply.body
    assert reply.body["tenant"] == "acme"
    assert {ref: t["state"] for ref, t in reply.body["tasks"].items()} == {
        "a": "warm", "b": "waiting"}
    # a tenant token cannot name another tenant
    refused = call("POST", "/v1/flows", {**body, "tenant": "bolt"}, claims=TENANT_A)
    assert refused.status == 403
    # nor wait for another tenant's task: 422 naming the field, nothing written
    before = task_count(pg)
    foreign = call("POST", "/v1/flows", {"tasks": [
        {"ref": "x", "queue": "q", "payload": 0,
         "after": [reply.body["tasks"]["a"]["id"]]}]}, claims=TENANT_B)
    assert foreign.status == 422
    assert foreign.body["error"]["details"][0]["field"] == "tasks[0].after[0]"
    cycle = call("POST", "/v1/flows", {"tasks": [
        {"ref": "x", "queue": "q", "payload": 0, "after": ["y"]},
        {"ref": "y", "queue": "q", "payload": 0, "after": ["x"]}]}, claims=TENANT_A)
    assert cycle.status == 422
    assert cycle.body["error"]["details"][0]["field"] == "tasks[1].after[0]"
    assert task_count(pg) == before


def test_a_retried_flow_with_the_same_key_is_created_once(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    body = {"tasks": [{"ref": "a", "queue": "q", "payload": 1},
                      {"ref": "b", "queue": "q", "payload": 2, "after": ["a"]}]}
    first = call("POST", "/v1/flows", body, headers=headers)
    again = call("POST", "/v1/flows", body, headers=headers)
    assert first.status == again.status == 200
    assert again.body == first.body
    assert again.headers.get("idempotent-replayed") == "true"
    assert task_count(pg) == 2


def test_waiting_tasks_are_counted_in_the_queue_metrics(call: Invoke) -> None:
    parent = call("POST", "/v1/queues/q/tasks", {"payload": 1, "tenant": "acme"}).body
    call("POST", "/v1/queues/r/tasks", {"tasks": [
        {"payload": i, "tenant": "acme", "after": [parent["id"]]} for i in range(2)]})
    call("POST", "/v1/queues/r/tasks", {"payload": "ready", "tenant": "acme"})
    rows = call("GET", "/v1/metrics/queues/detailed").body["queues"]
    by_pair = {(r["queue"], r["tenant"]): r for r in rows}
    assert (by_pair[("r", "acme")]["waiting"], by_pair[("r", "acme")]["warm"]) == (2, 1)
    assert by_pair[("q", "acme")]["waiting"] == 0
    assert call("GET", "/v1/queues/r").body["counts"]["waiting"] == 2
    pinned = call("GET", "/v1/queues/r", claims=TENANT_A).body
    assert pinned["counts"]["waiting"] == 2
    [task] = call("POST", "/v1/queues/q/claims", {"max": 1}).body["tasks"]
    call("POST", "/v1/queues/q/acks", {"acks": [
        {"id": task["id"], "lease_token": task["lease_token"]}]})
    assert call("GET", "/v1/queues/r").body["counts"]["waiting"] == 0
