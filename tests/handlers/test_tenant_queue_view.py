"""What a caller pinned to a tenant is shown of a queue (GET /v1/queues/{queue} and
GET /v1/queues), through the admin function over the real stores: the settings its workers
read and its own counts — never the consumer, the limits, the capacity settings or another
tenant's numbers — and the same answer for a name nobody used as for a queue with other
tenants' tasks only. Admins keep the full view."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.handlers.support import Invoke
from tierq.config import get_settings

ACME = {"sub": "worker-1", "tenant": "acme"}
BETA = {"sub": "worker-2", "tenant": "beta"}
CONFIGURED = {
    "lease_seconds": 42, "max_attempts": 3, "paused": True, "warm_max": 777,
    "warm_max_bytes": 123_456, "retention_seconds": 999,
    "backoff": {"kind": "fixed", "base_seconds": 5, "cap_seconds": 5, "jitter": 0},
    "max_leased": 11, "rate": {"per_second": 7, "burst": 13},
    "tenant_max_leased": 2, "tenant_rate": {"per_second": 3, "burst": 4},
    "consumer": {"function": "orders-fn", "batch_size": 9, "max_concurrency": 6},
    "group_max_leased": 4, "timeout_seconds": 90,
}
TENANT_VIEW_FIELDS = {"view", "queue", "tenant", "settings", "counts", "mode"}
WORKER_SETTINGS = {"lease_seconds", "max_attempts", "backoff", "paused", "group_max_leased",
                   "timeout_seconds"}


@pytest.fixture(autouse=True)
def consumer_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack's allow-list of consumer functions names the one the tests configure."""
    monkeypatch.setenv("TIERQ_CONSUMER_FUNCTIONS", "orders-fn")


def conforms(body: Any, path: str) -> None:
    """``body`` is what the API document says ``GET path`` answers (its oneOf: exactly one
    of the views)."""
    from jsonschema import Draft202012Validator

    from tierq.aws.http.resolver import openapi_document

    document = openapi_document()
    schema = document["paths"][path]["get"]["responses"]["200"]["content"][
        "application/json"]["schema"]
    Draft202012Validator({**schema, "components": document["components"]}).validate(body)


def enqueue(call: Invoke, queue: str, n: int, claims: dict[str, str]) -> None:
    reply = call("POST", f"/v1/queues/{queue}/tasks",
                 {"tasks": [{"payload": i} for i in range(n)]}, claims=claims)
    assert reply.status == 200, reply.body


def test_a_pinned_caller_sees_the_worker_settings_and_its_own_counts(call: Invoke) -> None:
    assert call("PUT", "/v1/queues/jobs", CONFIGURED).status == 200
    enqueue(call, "jobs", 2, ACME)
    enqueue(call, "jobs", 5, BETA)
    reply = call("GET", "/v1/queues/jobs", claims=ACME)
    assert reply.status == 200, reply.body
    view = reply.body
    assert set(view) == TENANT_VIEW_FIELDS
    assert (view["view"], view["queue"], view["tenant"]) == ("tenant", "jobs", "acme")
    assert view["settings"] == {
        "lease_seconds": 42, "max_attempts": 3, "paused": True,
        "backoff": {"kind": "fixed", "base_seconds": 5.0, "cap_seconds": 5.0, "jitter": 0.0},
        "group_max_leased": 4,  # (a worker reads how many of a group run at once)
        "timeout_seconds": 90}  # (and how long an attempt may run)
    assert view["counts"]["warm"] + view["counts"]["cold"] == 2  # acme's, not beta's 5
    conforms(view, "/v1/queues/{queue}")
    conforms(call("GET", "/v1/queues", claims=ACME).body, "/v1/queues")
    # nothing of the admin's configuration, in any field
    text = json.dumps(view)
    for secret in ("orders-fn", "consumer", '"max_leased"', "tenant_max_leased", "rate", "777",
                   "123456", "999", "beta", "limits_use", "tenants"):
        assert secret not in text, secret


def test_admins_keep_the_full_view(call: Invoke) -> None:
    assert call("PUT", "/v1/queues/jobs", CONFIGURED).status == 200
    enqueue(call, "jobs", 2, ACME)
    enqueue(call, "jobs", 5, BETA)
    view = call("GET", "/v1/queues/jobs").body
    assert view["view"] == "admin"
    assert view["settings"]["consumer"]["function"] == "orders-fn"
    assert (view["settings"]["max_leased"], view["settings"]["warm_max"]) == (11, 777)
    assert view["tenants"] == ["acme", "beta"]
    assert view["counts"]["warm"] + view["counts"]["cold"] == 7
    assert view["limits_use"] is not None
    [listed] = call("GET", "/v1/queues").body["queues"]
    assert listed["view"] == "admin" and listed["settings"]["consumer"] is not None
    conforms(view, "/v1/queues/{queue}")
    conforms(call("GET", "/v1/queues").body, "/v1/queues")


def test_a_pinned_caller_cannot_tell_a_queue_name_nobody_used(call: Invoke) -> None:
    """200 with the deployment's defaults and zero counts for any valid name: the same
    answer whether the queue does not exist or holds only another tenant's tasks."""
    enqueue(call, "theirs", 5, BETA)
    answers = {}
    for queue in ("theirs", "never-used"):
        reply = call("GET", f"/v1/queues/{queue}", claims=ACME)
        assert reply.status == 200, reply.body
        answers[queue] = {k: v for k, v in reply.body.items() if k != "queue"}
    assert answers["theirs"] == answers["never-used"]
    defaults = get_settings()
    shown = answers["never-used"]
    assert shown["settings"]["lease_seconds"] == defaults.lease_seconds
    assert shown["settings"]["max_attempts"] == defaults.max_attempts
    assert shown["counts"] == {"warm": 0, "waiting": 0, "held": 0, "cold": 0, "delayed": 0,
                               "leased": 0, "dead": 0}
    # an admin is told: the name is unknown
    assert call("GET", "/v1/queues/never-used").status == 404
    # a name that is not valid is refused as for anyone
    bad = call("GET", "/v1/queues/" + "x" * 300, claims=ACME)
    assert bad.status == 422, bad.body


def test_a_configured_queue_of_another_tenant_looks_like_a_name_nobody_used(
        call: Invoke) -> None:
    """The settings shown depend on the caller's own pair: a queue an admin configured and
    another tenant uses shows a tenant with no part in it the defaults, as a name nobody
    used does; once the tenant has tasks there, the queue's settings its workers need."""
    assert call("PUT", "/v1/queues/globex-payroll", CONFIGURED).status == 200
    enqueue(call, "globex-payroll", 1, BETA)
    theirs = call("GET", "/v1/queues/globex-payroll", claims=ACME)
    nobodys = call("GET", "/v1/queues/never-used", claims=ACME)
    assert theirs.status == nobodys.status == 200
    assert {k: v for k, v in theirs.body.items() if k != "queue"} == \
        {k: v for k, v in nobodys.body.items() if k != "queue"}
    assert theirs.body["settings"]["lease_seconds"] == get_settings().lease_seconds
    # the tenant's own pair: the queue's settings
    enqueue(call, "globex-payroll", 1, ACME)
    mine = call("GET", "/v1/queues/globex-payroll", claims=ACME).body
    assert (mine["settings"]["lease_seconds"], mine["settings"]["paused"]) == (42, True)
    assert call("GET", "/v1/queues/globex-payroll", claims=BETA).body["settings"] == \
        mine["settings"]


def test_a_pinned_callers_list_holds_tenant_views_of_its_own_queues(call: Invoke) -> None:
    assert call("PUT", "/v1/queues/shared", CONFIGURED).status == 200
    enqueue(call, "shared", 1, ACME)
    enqueue(call, "shared", 4, BETA)
    enqueue(call, "only-beta", 3, BETA)
    enqueue(call, "only-acme", 2, ACME)
    reply = call("GET", "/v1/queues", claims=ACME)
    assert reply.status == 200, reply.body
    queues = reply.body["queues"]
    assert [q["queue"] for q in queues] == ["only-acme", "shared"]
    for q in queues:
        assert set(q) == TENANT_VIEW_FIELDS and set(q["settings"]) == WORKER_SETTINGS
        assert (q["view"], q["tenant"]) == ("tenant", "acme")
    counts = {q["queue"]: q["counts"]["warm"] + q["counts"]["cold"] for q in queues}
    assert counts == {"only-acme": 2, "shared": 1}
    assert "orders-fn" not in json.dumps(reply.body)


@pytest.mark.parametrize("path", ["/v1/queues/{queue}", "/v1/queues"])
def test_the_document_describes_both_views(path: str) -> None:
    from tierq.aws.http.resolver import openapi_document

    document = openapi_document()
    schema: dict[str, Any] = \
        document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"][
            "schema"]
    if path == "/v1/queues":
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = document["components"]["schemas"][name]["properties"]["queues"]["items"]
    refs = sorted(branch["$ref"].rsplit("/", 1)[-1] for branch in schema["oneOf"])
    assert refs == ["QueueView", "TenantQueueView"]
    tenant = document["components"]["schemas"]["TenantQueueView"]
    assert set(tenant["properties"]) == TENANT_VIEW_FIELDS
    assert tenant["properties"]["view"]["const"] == "tenant"
    settings = document["components"]["schemas"]["WorkerSettings"]
    assert set(settings["properties"]) == WORKER_SETTINGS
