"""A tenant's schedules over HTTP: one schedule beyond TIERQ_MAX_SCHEDULES_PER_TENANT is 409
quota_exceeded (not 429, which clients retry) and writes nothing; replacing one is not one
more. A schedule whose install would hold more payload bytes than
TIERQ_SCHEDULE_MAX_INSTALLED_BYTES is 422 naming the field."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest


@pytest.fixture
def capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_MAX_SCHEDULES_PER_TENANT", "2")


def test_a_schedule_beyond_the_tenants_cap_is_409_and_writes_nothing(
        capped: None, call: Any, pg: psycopg.Connection[Any]) -> None:
    acme = {"tenant": "acme"}
    body = {"queue": "reports", "payload": {}, "every_seconds": 3600}
    for name in ("one", "two"):
        assert call("PUT", f"/v1/schedules/{name}", body, claims=acme).status == 200
    reply = call("PUT", "/v1/schedules/three", body, claims=acme)
    assert reply.status == 409, reply.body
    assert reply.body["error"]["code"] == "quota_exceeded"
    assert "TIERQ_MAX_SCHEDULES_PER_TENANT" in reply.body["error"]["message"]
    assert "retry-after" not in {k.lower() for k in reply.headers}
    assert pg.execute("SELECT count(*) FROM tierq_schedules WHERE name = 'three'"
                      ).fetchone() == (0,)
    # replacing one of its schedules, and another tenant's schedule, are fine
    assert call("PUT", "/v1/schedules/two", {**body, "payload": {"v": 2}},
                claims=acme).status == 200
    assert call("PUT", "/v1/schedules/three", body, claims={"tenant": "other"}).status == 200
    # a removal frees a place
    assert call("DELETE", "/v1/schedules/one", claims=acme).status == 200
    assert call("PUT", "/v1/schedules/three", body, claims=acme).status == 200


def test_a_schedule_over_the_install_budget_is_422(call: Any,
                                                   pg: psycopg.Connection[Any]) -> None:
    body = {"queue": "reports", "payload": "x" * (64 * 1024 - 2), "every_seconds": 3600,
            "horizon": 1000}
    reply = call("PUT", "/v1/schedules/big", body, claims={"tenant": "acme"})
    assert reply.status == 422, reply.body
    error = reply.body["error"]
    assert error["code"] == "invalid_input"
    assert error["details"][0]["field"] == "horizon"
    assert "at most 16 occurrences" in error["message"]
    assert pg.execute("SELECT count(*) FROM tierq_schedules").fetchone() == (0,)
