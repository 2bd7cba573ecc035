"""The per-tenant cap on distinct queues over HTTP: one queue more is 409 quota_exceeded
(not 429, which clients retry), and nothing is written."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.handlers.support import task_count


@pytest.fixture
def capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_MAX_QUEUES_PER_TENANT", "2")


def test_a_queue_beyond_the_tenants_cap_is_409_and_writes_nothing(
        capped: None, call: Any, pg: psycopg.Connection[Any]) -> None:
    acme = {"tenant": "acme"}
    for queue in ("one", "two"):
        assert call("POST", f"/v1/queues/{queue}/tasks", {"payload": 1}, claims=acme).status \
            == 200
    reply = call("POST", "/v1/queues/three/tasks", {"payload": 1}, claims=acme)
    assert reply.status == 409, reply.body
    assert reply.body["error"]["code"] == "quota_exceeded"
    assert "retry-after" not in {k.lower() for k in reply.headers}
    assert task_count(pg, "three") == 0
    # a known queue of that tenant, and the same queue for another tenant, are fine
    assert call("POST", "/v1/queues/one/tasks", {"payload": 2}, claims=acme).status == 200
    assert call("POST", "/v1/queues/three/tasks", {"payload": 1},
                claims={"tenant": "other"}).status == 200
    # a schedule on a new queue of the tenant is refused the same way
    reply = call("PUT", "/v1/schedules/nightly",
                 {"queue": "four", "payload": {}, "every_seconds": 60}, claims=acme)
    assert reply.status == 409 and reply.body["error"]["code"] == "quota_exceeded"
    assert pg.execute("SELECT count(*) FROM tierq_schedules").fetchone() == (0,)
