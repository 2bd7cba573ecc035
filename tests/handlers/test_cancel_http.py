"""``POST /v1/queues/{queue}/tasks/{id}/cancel`` and ``timeout_seconds`` through the
functions API Gateway invokes, on the real stores: a tenant cancels only its own tasks
(another's is 404, a caller without tenant or admin scope 403), a running task's worker is
told at its heartbeat and ack, a finished task is 409, and a bad time limit is 422 with
nothing written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.handlers.support import Invoke, task_count
from tests.integration.test_cancel_races import valkey_fails_once  # noqa: F401  (fixture)
from tierq.aws.runtime import engine
from tierq.engine import Tierq
from tierq.models.tasks import MAX_TIMEOUT_SECONDS

ACME = {"tenant": "acme"}
GLOBEX = {"tenant": "globex"}


def test_a_tenant_cancels_its_running_task_and_its_worker_is_told(call: Invoke) -> None:
    made = call("POST", "/v1/queues/jobs/tasks", {"payload": 1}, claims=ACME).body
    [task] = call("POST", "/v1/queues/jobs/claims", {"max": 1}, claims=ACME).body["tasks"]
    # another tenant: as if it did not exist, and nothing changes
    assert call("POST", f"/v1/queues/jobs/tasks/{made['id']}/cancel",
                claims=GLOBEX).status == 404
    assert call("GET", f"/v1/queues/jobs/tasks/{made['id']}",
                claims=ACME).body["state"] == "leased"
    reply = call("POST", f"/v1/queues/jobs/tasks/{made['id']}/cancel", claims=ACME)
    assert reply.status == 200 and reply.body["state"] == "cancelled"
    item = {"id": task["id"], "lease_token": task["lease_token"]}
    beat = call("POST", "/v1/queues/jobs/heartbeats", {"leases": [item]}, claims=ACME).body
    assert beat["cancelled"] == [task["id"]]
    assert [r["reason"] for r in beat["rejected"]] == ["not_owner"]  # (older clients)
    acked = call("POST", "/v1/queues/jobs/acks", {"acks": [item]}, claims=ACME).body
    assert (acked["acked"], acked["cancelled"]) == ([], [task["id"]])
    # kept, as a finished task, and cancelling again answers it as it is
    assert call("GET", f"/v1/queues/jobs/tasks/{made['id']}",
                claims=ACME).body["state"] == "cancelled"
    again = call("POST", f"/v1/queues/jobs/tasks/{made['id']}/cancel", claims=ACME)
    assert again.status == 200 and again.body["state"] == "cancelled"


def test_cancel_refuses_callers_without_scope_and_unknown_or_finished_tasks(
        call: Invoke) -> None:
    made = call("POST", "/v1/queues/jobs/tasks", {"payload": 1}).body
    nobody = {"sub": "user-1", "scope": "openid"}
    assert call("POST", f"/v1/queues/jobs/tasks/{made['id']}/cancel",
                claims=nobody).status == 403
    missing = "0190b8a0-0000-7000-8000-000000000001"
    assert call("POST", f"/v1/queues/jobs/tasks/{missing}/cancel").status == 404
    assert call("POST", "/v1/queues/jobs/tasks/not-a-uuid/cancel").status == 422
    [task] = call("POST", "/v1/queues/jobs/claims", {"max": 1}).body["tasks"]
    call("POST", "/v1/queues/jobs/acks", {"acks": [
        {"id": task["id"], "lease_token": task["lease_token"], "result": 1}]})
    finished = call("POST", f"/v1/queues/jobs/tasks/{made['id']}/cancel")
    assert finished.status == 409
    assert finished.body["error"]["code"] == "task_finished"
    assert call("GET", f"/v1/queues/jobs/tasks/{made['id']}").body["state"] == "done"


def test_a_time_limit_comes_back_with_the_claim(call: Invoke) -> None:
    call("PUT", "/v1/queues/jobs", {"timeout_seconds": 30})
    call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": 1, "timeout_seconds": 5},
                                                     {"payload": 2}]})
    tasks = call("POST", "/v1/queues/jobs/claims", {"max": 2}).body["tasks"]
    assert [t["timeout_seconds"] for t in tasks] == [5, 30]
    assert call("GET", "/v1/queues/jobs").body["settings"]["timeout_seconds"] == 30
    status = call("GET", f"/v1/queues/jobs/tasks/{tasks[0]['id']}").body
    assert status["timeout_seconds"] == 5


@pytest.mark.parametrize("bad", [0, -5, MAX_TIMEOUT_SECONDS + 1, 2.5, "ten", None])
def test_a_bad_time_limit_is_422_and_nothing_is_written(
        call: Invoke, pg: psycopg.Connection[Any], bad: Any) -> None:
    if bad is not None:
        reply = call("POST", "/v1/queues/jobs/tasks",
                     {"tasks": [{"payload": 1}, {"payload": 2, "timeout_seconds": bad}]})
        assert reply.status == 422, reply.body
        assert "timeout_seconds" in reply.body["error"]["message"]
        assert task_count(pg) == 0
        put = call("PUT", "/v1/queues/jobs", {"timeout_seconds": bad})
        assert put.status == 422, put.body
        assert pg.execute("SELECT count(*) FROM tierq_queues").fetchone()[0] == 0  # type: ignore[index]
    else:  # null is no limit (a PUT clears the queue's)
        assert call("POST", "/v1/queues/jobs/tasks",
                    {"payload": 1, "timeout_seconds": None}).status == 200


def test_another_tenants_cancelled_task_is_not_reported_to_a_made_up_token(
        call: Invoke) -> None:
    """A pinned tenant sending another tenant's task id with a token of its own (made up)
    is refused and told nothing of that task: its ``cancelled`` lists name only tasks of
    the tenant the token names."""
    made = call("POST", "/v1/queues/jobs/tasks", {"payload": 1}, claims=ACME).body
    [task] = call("POST", "/v1/queues/jobs/claims", {"max": 1}, claims=ACME).body["tasks"]
    assert call("POST", f"/v1/queues/jobs/tasks/{made['id']}/cancel",
                claims=ACME).status == 200
    forged = {"id": made["id"], "lease_token": "globex~0123456789abcdef01234567~1~0"}
    for route, key in (("heartbeats", "leases"), ("acks", "acks"), ("nacks", "nacks")):
        item = dict(forged, error="x") if route == "nacks" else forged
        body = call("POST", f"/v1/queues/jobs/{route}", {key: [item]}, claims=GLOBEX).body
        assert [r["reason"] for r in body["rejected"]] == ["not_owner"], (route, body)
        assert body.get("cancelled", []) == [], (route, body)  # (left out when empty)
    # the owner's own worker is still told
    mine = {"id": task["id"], "lease_token": task["lease_token"]}
    beat = call("POST", "/v1/queues/jobs/heartbeats", {"leases": [mine]}, claims=ACME).body
    assert beat["cancelled"] == [task["id"]]


@pytest.mark.parametrize("how", ["cancel", "delete"])
def test_a_cancel_or_delete_that_valkey_fails_is_a_503_whose_retry_does_it(
        call: Invoke, pg: psycopg.Connection[Any],
        valkey_fails_once: Callable[[Tierq], None],  # noqa: F811  (the fixture)
        how: str) -> None:
    """Valkey fails the removal (a connection to a closed port): 503 with nothing changed,
    the retry is 200, and no claim returns the task after it."""
    made = call("POST", "/v1/queues/jobs/tasks", {"payload": 1}, claims=ACME).body
    method, path = (("POST", f"/v1/queues/jobs/tasks/{made['id']}/cancel") if how == "cancel"
                    else ("DELETE", f"/v1/queues/jobs/tasks/{made['id']}"))
    tq = engine()
    assert isinstance(tq, Tierq)
    valkey_fails_once(tq)
    failed = call(method, path, claims=ACME)
    assert failed.status == 503, failed.body
    assert call("GET", f"/v1/queues/jobs/tasks/{made['id']}",
                claims=ACME).body["state"] == "warm"
    retried = call(method, path, claims=ACME)
    assert retried.status == 200, retried.body
    assert call("POST", "/v1/queues/jobs/claims", {"max": 5}, claims=ACME).body["tasks"] == []
    assert task_count(pg) == (1 if how == "cancel" else 0)
