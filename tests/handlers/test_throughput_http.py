"""GET /v1/queues/{queue}/throughput through the admin function, as API Gateway calls it:
counts after enqueues and acks made through the API, tenant filtering for pinned callers
(fail closed: another tenant is 403), 404 for an unknown queue to an admin, zeros to a pinned
caller (the same as for a queue with only other tenants' tasks: no oracle)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.handlers.support import Invoke

ACME = {"tenant": "acme"}
BETA = {"tenant": "beta"}


def enqueue(call: Invoke, queue: str, n: int, **kwargs: Any) -> None:
    reply = call("POST", f"/v1/queues/{queue}/tasks",
                 {"tasks": [{"payload": i} for i in range(n)]}, **kwargs)
    assert reply.status == 200, reply.body


def claim_and_ack(call: Invoke, queue: str, n: int, **kwargs: Any) -> None:
    reply = call("POST", f"/v1/queues/{queue}/claims", {"max": n}, **kwargs)
    assert reply.status == 200, reply.body
    tasks = reply.body["tasks"]
    assert len(tasks) == n
    acked = call("POST", f"/v1/queues/{queue}/acks",
                 {"acks": [{"id": t["id"], "lease_token": t["lease_token"]} for t in tasks]},
                 **kwargs)
    assert acked.status == 200 and len(acked.body["acked"]) == n, acked.body


def throughput(call: Invoke, queue: str, **kwargs: Any) -> Any:
    return call("GET", f"/v1/queues/{queue}/throughput", **kwargs)


def test_counts_of_a_queue_and_of_each_tenant(call: Invoke) -> None:
    enqueue(call, "jobs", 12, claims=ACME)
    enqueue(call, "jobs", 5, claims=BETA)
    claim_and_ack(call, "jobs", 4, claims=ACME)

    everyone = throughput(call, "jobs")
    assert everyone.status == 200, everyone.body
    body = everyone.body
    assert body["queue"] == "jobs" and body["tenant"] is None and body["tenants"] == 2
    assert (body["enqueued_total"], body["acked_total"]) == (17, 4)
    assert len(body["enqueued"]) == len(body["acked"]) == 900
    assert sum(body["enqueued"][-30:]) == 17 and sum(body["acked"][-30:]) == 4
    assert body["bucket_seconds"] == 1
    start, end = datetime.fromisoformat(body["start"]), datetime.fromisoformat(body["end"])
    assert end - start == timedelta(seconds=899)

    beta = throughput(call, "jobs", query={"tenant": "beta"}).body
    assert (beta["tenant"], beta["enqueued_total"], beta["acked_total"]) == ("beta", 5, 0)


def test_a_pinned_caller_sees_only_its_tenant(call: Invoke) -> None:
    enqueue(call, "jobs", 3, claims=ACME)
    enqueue(call, "jobs", 8, claims=BETA)
    claim_and_ack(call, "jobs", 2, claims=BETA)

    mine = throughput(call, "jobs", claims=ACME)
    assert mine.status == 200, mine.body
    assert (mine.body["tenant"], mine.body["enqueued_total"], mine.body["acked_total"]) == \
        ("acme", 3, 0)
    assert mine.body["tenants"] == 1
    named = throughput(call, "jobs", claims=ACME, query={"tenant": "acme"})
    assert named.status == 200 and named.body["enqueued_total"] == 3


def test_another_tenant_is_403_and_nothing_is_read(call: Invoke) -> None:
    enqueue(call, "jobs", 8, claims=BETA)
    refused = throughput(call, "jobs", claims=ACME, query={"tenant": "beta"})
    assert refused.status == 403, refused.body
    assert refused.body["error"]["code"] == "forbidden"
    assert "beta" not in str(refused.body.get("enqueued", ""))
    # no claims, or an invalid tenant claim: refused before the route runs
    assert throughput(call, "jobs", claims={}).status == 403
    assert throughput(call, "jobs", claims={"tenant": "_"}).status == 403


def test_an_unknown_queue_is_404_and_a_bad_tenant_name_422(call: Invoke) -> None:
    assert throughput(call, "never-used").status == 404
    enqueue(call, "jobs", 1)
    assert throughput(call, "jobs", query={"tenant": "no spaces"}).status == 422


def test_a_pinned_caller_cannot_tell_an_unknown_queue_from_another_tenants(
        call: Invoke) -> None:
    enqueue(call, "theirs", 5, claims=BETA)
    shown = []
    for queue in ("theirs", "never-used"):
        reply = throughput(call, queue, claims=ACME)
        assert reply.status == 200, reply.body
        body = {k: v for k, v in reply.body.items() if k not in ("queue", "start", "end")}
        shown.append(body)
    assert shown[0] == shown[1]
    assert (shown[0]["tenant"], shown[0]["enqueued_total"], shown[0]["acked_total"]) == \
        ("acme", 0, 0)
