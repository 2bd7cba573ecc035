"""A tenant caller meets its own limits before the shared ones: requests a second (429 with
Retry-After once its bucket is empty) and long polls in flight (429 past the cap; a place a
dead function held frees itself at its deadline). One tenant's flood limits no other tenant,
and admins are not limited. The counts live in the session's real Valkey."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.handlers.support import Invoke
from tierq.aws.runtime import default_engine
from tierq.dal.warm_tier import TenantKeys
from tierq.logic import tenant_limits

ACME = {"tenant": "acme"}
GLOBEX = {"tenant": "globex"}


@pytest.fixture
def limited(monkeypatch: pytest.MonkeyPatch, lambda_env: None) -> None:
    """Small limits (the engine of each test is made after this, with them)."""
    monkeypatch.setenv("TIERQ_TENANT_REQUESTS_PER_SECOND", "0.5")
    monkeypatch.setenv("TIERQ_TENANT_REQUESTS_BURST", "3")
    monkeypatch.setenv("TIERQ_TENANT_LONG_POLLS", "1")


def test_a_tenant_over_its_rate_is_429_with_retry_after(limited: None, call: Invoke,
                                                        pg: Any) -> None:
    for _ in range(3):  # the burst
        assert call("GET", "/v1/queues", claims=ACME).status == 200
    refused = call("POST", "/v1/queues/q/tasks", {"payload": 1}, claims=ACME)
    assert refused.status == 429, refused.body
    assert refused.body["error"]["code"] == "too_many_requests"
    assert "acme" in refused.body["error"]["message"]
    assert refused.headers["retry-after"] == "2"  # one token at 0.5 a second
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (0,)  # nothing done


def test_one_tenants_flood_limits_no_other_tenant_nor_an_admin(limited: None,
                                                               call: Invoke) -> None:
    statuses = [call("GET", "/v1/queues", claims=ACME).status for _ in range(20)]
    assert statuses.count(200) == 3 and statuses.count(429) == 17
    assert [call("GET", "/v1/queues", claims=GLOBEX).status for _ in range(3)] == [200] * 3
    # an admin (no tenant claim) is not limited by the tenants' limits
    assert {call("GET", "/v1/queues").status for _ in range(10)} == {200}


def test_a_tenants_long_polls_past_its_cap_are_429(limited: None, call: Invoke,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_TENANT_REQUESTS_PER_SECOND", "0")  # (only the polls here)
    warm = default_engine().ctx.warm
    # a long poll of acme's in flight (its place taken as the claim route takes it)
    assert warm.tenant_poll_begin("acme", cap=1, reservation="in-flight", hold_ms=60_000)
    refused = call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.2}, claims=ACME)
    assert refused.status == 429 and refused.headers["retry-after"] == "1"
    assert refused.body["error"]["details"][0]["field"] == "wait_seconds"
    # a claim that does not wait takes no place; another tenant's long poll has its own
    assert call("POST", "/v1/queues/q/claims", {}, claims=ACME).status == 200
    assert call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.2},
                claims=GLOBEX).status == 200
    warm.tenant_poll_end("acme", "in-flight")
    assert call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.2},
                claims=ACME).status == 200
    # a finished long poll gave its place back
    assert warm.client.zcard(TenantKeys.of("acme").polls) == 0


def test_a_place_held_by_a_function_that_died_frees_itself(limited: None, call: Invoke,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("TIERQ_TENANT_REQUESTS_PER_SECOND", "0")
    warm = default_engine().ctx.warm
    # taken, never given back (the function was killed mid-poll); held 0.5 s here
    assert warm.tenant_poll_begin("acme", cap=1, reservation="dead", hold_ms=500)
    assert call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.1},
                claims=ACME).status == 429
    time.sleep(0.6)
    assert call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.1},
                claims=ACME).status == 200


def test_the_claim_route_holds_its_place_only_while_it_runs(limited: None,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            call: Invoke) -> None:
    monkeypatch.setenv("TIERQ_TENANT_REQUESTS_PER_SECOND", "0")
    seen: list[int] = []
    engine = default_engine()
    original = engine.claim_outcome

    def claim_outcome(*args: object, **kwargs: object) -> object:
        seen.append(int(engine.ctx.warm.client.zcard(TenantKeys.of("acme").polls)))
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "claim_outcome", claim_outcome)
    assert call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.1},
                claims=ACME).status == 200
    assert seen == [1]  # held during the claim
    assert engine.ctx.warm.client.zcard(TenantKeys.of("acme").polls) == 0
    assert tenant_limits.POLL_HOLD_MS > 30_000  # past the HTTP API's 30 s


def test_the_limits_fail_open_when_valkey_does_not_answer(app_database_url: str) -> None:
    from tierq.config import Settings
    from tierq.engine import Tierq

    settings = Settings(database_url=app_database_url, valkey_url="redis://127.0.0.1:1/0",
                        tenant_requests_per_second=0.001, tenant_requests_burst=1,
                        tenant_long_polls=1)
    with Tierq(settings=settings) as tq:
        for _ in range(3):
            tenant_limits.admit_request(tq.ctx, "acme")  # not counted: goes on
        with tenant_limits.long_poll(tq.ctx, "acme"), tenant_limits.long_poll(tq.ctx, "acme"):
            pass
