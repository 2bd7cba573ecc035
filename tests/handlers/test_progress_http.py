"""A task's progress through the function API Gateway routes it to: a heartbeat carries it,
the task's view and the running leases show it while the task is leased and the task keeps
it once its attempt ends; a progress past 4 KiB is a 422 naming the item, nothing written;
the fields are in the OpenAPI document. Real stores."""

from __future__ import annotations

import redis

from tests.handlers.support import Invoke
from tierq.aws.http.resolver import openapi_document
from tierq.dal.warm_tier import PairKeys

ACME = {"tenant": "acme"}


def claimed(call: Invoke) -> tuple[str, str]:
    made = call("POST", "/v1/queues/q/tasks", {"payload": {"n": 1}}, claims=ACME)
    assert made.status in (200, 201), made.body
    [task] = call("POST", "/v1/queues/q/claims", {"worker": "w-1"}, claims=ACME).body["tasks"]
    return str(made.body["id"]), task["lease_token"]


def test_progress_is_seen_while_running_and_kept_after_the_nack(call: Invoke,
                                                                valkey_url: str) -> None:
    task_id, token = claimed(call)
    beat = call("POST", "/v1/queues/q/heartbeats",
                {"leases": [{"id": task_id, "lease_token": token,
                             "progress": {"done": 40, "of": 100}}]}, claims=ACME)
    assert beat.status == 200 and len(beat.body["extended"]) == 1, beat.body
    view = call("GET", f"/v1/queues/q/tasks/{task_id}", claims=ACME).body
    assert view["state"] == "leased" and view["progress"] == {"done": 40, "of": 100}
    assert view["progress_at"]
    [lease] = call("GET", "/v1/metrics/queues/running", query={"queue": "q"},
                   claims=ACME).body["running"]
    assert (lease["progress"], lease["progress_at"]) == (view["progress"], view["progress_at"])
    nacked = call("POST", "/v1/queues/q/nacks",
                  {"nacks": [{"id": task_id, "lease_token": token, "error": "x",
                              "retry_in_seconds": 60}]}, claims=ACME)
    assert nacked.status == 200 and nacked.body["retried"] == [task_id], nacked.body
    after = call("GET", f"/v1/queues/q/tasks/{task_id}", claims=ACME).body
    assert after["state"] == "delayed"
    assert (after["progress"], after["progress_at"]) == (view["progress"], view["progress_at"])
    valkey = redis.Redis.from_url(valkey_url)
    try:
        assert int(valkey.hget(PairKeys.of("q", "acme").meta, "progress") or 0) == 0
        assert valkey.hlen(PairKeys.of("q", "acme").progress) == 0
    finally:
        valkey.close()


def test_a_progress_past_4_kib_is_422_naming_the_item(call: Invoke) -> None:
    task_id, token = claimed(call)
    before = call("GET", f"/v1/queues/q/tasks/{task_id}", claims=ACME).body
    reply = call("POST", "/v1/queues/q/heartbeats",
                 {"leases": [{"id": task_id, "lease_token": token, "extend_seconds": 900},
                             {"id": task_id, "lease_token": token, "progress": "x" * 5000}]},
                 claims=ACME)
    assert reply.status == 422, reply.body
    [detail] = reply.body["error"]["details"]
    assert detail["field"] == "leases[1].progress"
    assert detail["message"] == "progress is 5002 bytes encoded as JSON, at most 4096"
    after = call("GET", f"/v1/queues/q/tasks/{task_id}", claims=ACME).body
    assert after["progress"] is None
    assert after["lease_expires_at"] == before["lease_expires_at"]  # nothing extended


def test_the_openapi_document_has_progress() -> None:
    schemas = openapi_document()["components"]["schemas"]
    assert "4 KiB" in schemas["HeartbeatItem"]["properties"]["progress"]["description"]
    for name in ("TaskView", "RunningLease"):
        assert {"progress", "progress_at"} <= set(schemas[name]["properties"])
