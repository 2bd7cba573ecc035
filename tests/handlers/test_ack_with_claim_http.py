"""``POST /v1/queues/{queue}/acks`` with ``claim``: the ack, then the next tasks claimed in
the same request (tierq.aws.http.routes.leases, logic/ack_claim.py).

| request                                 | answer                                       |
| --------------------------------------- | -------------------------------------------- |
| acks without claim                      | as ever: acked, rejected (no tasks field)    |
| acks with claim                         | acked, rejected, tasks                       |
| a pinned caller                         | its own tasks only; another tenant named 403 |
| claim.wait_seconds (no claim of an ack  | 422 naming the field, nothing acked          |
| waits)                                  |                                              |
| a keyed repeat                          | the first answer again: the ack's outcome,   |
|                                         | the same tasks and tokens; nothing leased    |
"""

from __future__ import annotations

from typing import Any

import psycopg

from tests.handlers.support import Invoke, task_count


def enqueue(call: Invoke, n: int, tenant: str = "acme") -> None:
    reply = call("POST", "/v1/queues/jobs/tasks",
                 {"tasks": [{"payload": {"n": i}, "tenant": tenant} for i in range(n)]})
    assert reply.status == 200, reply.body


def claimed(call: Invoke, n: int, **claims: Any) -> list[dict[str, Any]]:
    reply = call("POST", "/v1/queues/jobs/claims", {"max": n}, **claims)
    assert reply.status == 200, reply.body
    return reply.body["tasks"]


def acks(tasks: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"id": t["id"], "lease_token": t["lease_token"]} for t in tasks]


def leased(pg: psycopg.Connection[Any]) -> int:
    """The tasks PostgreSQL still holds: those not acked (rows and batch members alike)."""
    return task_count(pg)


def test_an_ack_with_claim_answers_the_next_tasks(call: Invoke,
                                                   pg: psycopg.Connection[Any]) -> None:
    enqueue(call, 5)
    first = claimed(call, 2)
    reply = call("POST", "/v1/queues/jobs/acks", {"acks": acks(first), "claim": {"max": 2}})
    assert reply.status == 200, reply.body
    assert sorted(reply.body["acked"]) == sorted(t["id"] for t in first)
    assert reply.body["rejected"] == []
    assert len(reply.body["tasks"]) == 2 and "claim_error" not in reply.body
    assert {t["payload"]["n"] for t in reply.body["tasks"]} == {2, 3}
    assert leased(pg) == 3
    plain = call("POST", "/v1/queues/jobs/acks", {"acks": acks(reply.body["tasks"])})
    assert set(plain.body) == {"acked", "rejected"}  # (no claim: the answer as ever)


def test_a_pinned_caller_claims_its_own_tasks_only(call: Invoke) -> None:
    enqueue(call, 2, "acme")
    enqueue(call, 2, "globex")
    acme = {"claims": {"tenant": "acme"}}
    first = claimed(call, 1, **acme)
    refused = call("POST", "/v1/queues/jobs/acks",
                   {"acks": acks(first), "claim": {"tenant": "globex"}}, **acme)
    assert refused.status == 403, refused.body
    assert refused.body["error"]["details"][0]["field"] == "claim.tenant"
    reply = call("POST", "/v1/queues/jobs/acks",
                 {"acks": acks(first), "claim": {"max": 5}}, **acme)
    assert reply.status == 200, reply.body
    assert [t["tenant"] for t in reply.body["tasks"]] == ["acme"]


def test_a_waiting_claim_is_422_and_acks_nothing(call: Invoke,
                                                  pg: psycopg.Connection[Any]) -> None:
    enqueue(call, 2)
    first = claimed(call, 2)
    waiting = call("POST", "/v1/queues/jobs/acks",
                   {"acks": acks(first), "claim": {"wait_seconds": 1}})
    assert waiting.status == 422, waiting.body
    assert waiting.body["error"]["details"][0]["field"] == "claim.wait_seconds"
    assert leased(pg) == 2


def test_a_keyed_repeat_answers_the_first_answer_again(call: Invoke,
                                                       pg: psycopg.Connection[Any]) -> None:
    enqueue(call, 6)
    first = claimed(call, 2)
    body = {"acks": acks(first), "claim": {"max": 2}}
    headers = {"Idempotency-Key": "ack-claim-1"}
    once = call("POST", "/v1/queues/jobs/acks", body, headers=headers)
    assert once.status == 200 and len(once.body["tasks"]) == 2, once.body
    again = call("POST", "/v1/queues/jobs/acks", body, headers=headers)
    assert again.status == 200, again.body
    assert again.headers.get("idempotent-replayed") == "true"
    assert sorted(again.body["acked"]) == sorted(once.body["acked"])
    assert [(t["id"], t["lease_token"]) for t in again.body["tasks"]] == \
        [(t["id"], t["lease_token"]) for t in once.body["tasks"]]
    assert leased(pg) == 4  # (two acked; the repeat leased nothing more)
    assert len(claimed(call, 10)) == 2
