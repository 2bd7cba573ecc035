"""POST /v1/queues/{queue}/claims under the queue's limits: what they allow, and
retry_after_ms; none without limits, and none for a caller pinned to a tenant with nothing
ready of its own (which would tell it of other tenants' use of the queue)."""

from __future__ import annotations

from tests.handlers.support import Invoke


def test_a_claim_past_max_leased_answers_retry_after(call: Invoke) -> None:
    assert call("PUT", "/v1/queues/jobs", {"max_leased": 2}).status == 200
    call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": i} for i in range(5)]})
    first = call("POST", "/v1/queues/jobs/claims", {"max": 5})
    assert first.status == 200, first.body
    assert len(first.body["tasks"]) == 2
    assert 0 < first.body["retry_after_ms"] <= 1000
    second = call("POST", "/v1/queues/jobs/claims", {"max": 5})
    assert second.body["tasks"] == [] and second.body["retry_after_ms"] > 0
    acks = [{"id": t["id"], "lease_token": t["lease_token"]} for t in first.body["tasks"]]
    assert call("POST", "/v1/queues/jobs/acks", {"acks": acks[:1]}).status == 200
    third = call("POST", "/v1/queues/jobs/claims", {"max": 5})
    assert len(third.body["tasks"]) == 1


def test_without_limits_there_is_no_retry_after(call: Invoke) -> None:
    call("POST", "/v1/queues/free/tasks", {"tasks": [{"payload": i} for i in range(3)]})
    reply = call("POST", "/v1/queues/free/claims", {"max": 5})
    assert len(reply.body["tasks"]) == 3
    assert "retry_after_ms" not in reply.body


def test_a_rate_limited_claim_answers_the_next_token(call: Invoke) -> None:
    assert call("PUT", "/v1/queues/slow", {"rate": {"per_second": 1, "burst": 2}}).status == 200
    call("POST", "/v1/queues/slow/tasks", {"tasks": [{"payload": i} for i in range(5)]})
    reply = call("POST", "/v1/queues/slow/claims", {"max": 5})
    assert len(reply.body["tasks"]) == 2
    assert 500 < reply.body["retry_after_ms"] <= 1000


def test_a_claim_tells_nothing_of_other_tenants_use_of_a_queue_wide_limit(
        call: Invoke) -> None:
    globex = {"sub": "worker-2", "tenant": "globex"}
    acme = {"sub": "worker-1", "tenant": "acme"}
    assert call("PUT", "/v1/queues/jobs", {"max_leased": 1}).status == 200
    assert call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": 1}, {"payload": 2}]},
                claims=globex).status == 200
    held = call("POST", "/v1/queues/jobs/claims", {"max": 1}, claims=globex)
    assert len(held.body["tasks"]) == 1  # globex now fills the queue's max_leased
    theirs = call("POST", "/v1/queues/jobs/claims", {"max": 1}, claims=acme)
    nobodys = call("POST", "/v1/queues/never-used/claims", {"max": 1}, claims=acme)
    assert theirs.status == nobodys.status == 200
    assert theirs.body == nobodys.body == {"tasks": []}
    # globex itself, with work waiting, is told when more may be had
    again = call("POST", "/v1/queues/jobs/claims", {"max": 1}, claims=globex)
    assert again.body["tasks"] == [] and again.body["retry_after_ms"] > 0
