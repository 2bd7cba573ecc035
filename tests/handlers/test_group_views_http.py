"""Groups over HTTP, through the Lambda handlers over real PostgreSQL and Valkey: held
tasks in the queue counts (admin and pinned views), each pair's groups with work and its
oldest group head in ``/v1/metrics/queues/detailed``, and a task's group in its GET, a
claim, the running leases and the dead letters, all described by the OpenAPI document."""

from __future__ import annotations

from tests.handlers.support import Invoke

TENANT_A = {"sub": "a", "tenant": "acme"}


def test_held_tasks_and_groups_in_the_queue_metrics(call: Invoke) -> None:
    made = call("POST", "/v1/queues/q/tasks", {"tasks": [
        {"payload": i, "tenant": "acme", "group": g} for g in ("x", "y") for i in range(3)]
        + [{"payload": "free", "tenant": "acme"}]}).body["tasks"]
    assert [t["state"] for t in made] == ["warm", "held", "held"] * 2 + ["warm"]
    rows = call("GET", "/v1/metrics/queues/detailed").body["queues"]
    [row] = [r for r in rows if (r["queue"], r["tenant"]) == ("q", "acme")]
    assert (row["warm"], row["held"], row["groups"]) == (3, 4, 2)
    assert row["oldest_group_head_at"] is not None
    assert 0 <= row["oldest_group_head_age_seconds"] < 60
    counts = call("GET", "/v1/queues/q").body["counts"]
    assert counts == {"warm": 3, "waiting": 0, "held": 4, "cold": 0, "delayed": 0,
                      "leased": 0, "dead": 0}
    assert call("GET", "/v1/queues/q", claims=TENANT_A).body["counts"] == counts


def test_a_tasks_group_in_its_get_claim_running_and_dead_letters(call: Invoke) -> None:
    call("PUT", "/v1/queues/q", {"max_attempts": 1})
    first, second = call("POST", "/v1/queues/q/tasks", {"tasks": [
        {"payload": i, "group": "g"} for i in range(2)]}).body["tasks"]
    assert call("GET", f"/v1/queues/q/tasks/{second['id']}").body["group"] == "g"
    [task] = call("POST", "/v1/queues/q/claims", {"max": 5}).body["tasks"]
    assert (task["id"], task["group"]) == (first["id"], "g")
    [lease] = call("GET", "/v1/metrics/queues/running").body["running"]
    assert (lease["id"], lease["group"]) == (first["id"], "g")
    call("POST", "/v1/queues/q/nacks", {"nacks": [
        {"id": task["id"], "lease_token": task["lease_token"], "dead": True}]})
    [dead] = call("GET", "/v1/queues/q/dlq").body["tasks"]
    assert (dead["id"], dead["group"]) == (first["id"], "g")


def test_the_openapi_document_names_the_new_fields(call: Invoke) -> None:
    schemas = call("GET", "/v1/openapi.json", content_type=None).body["components"]["schemas"]
    assert {"held", "groups", "oldest_group_head_at", "oldest_group_head_age_seconds"} \
        <= set(schemas["TenantCounts"]["properties"])
    assert "held" in schemas["QueueCounts"]["properties"]
    assert "group" in schemas["RunningLease"]["properties"]
    assert "group" in schemas["TaskView"]["properties"]
