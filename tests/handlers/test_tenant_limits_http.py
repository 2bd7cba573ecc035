"""A tenant caller meets its own limits before the shared ones: requests a second (429 with
Retry-After once its bucket is empty) and long polls in flight (429 past the cap; a place a
dead function held frees itself at its deadline). One tenant's flood limits no other tenant,
and admins are not limited by them. All callers' long polls together stay below the claim
function's reserved concurrency (429 past a share of it). A limit that cannot be counted lets
the request go on. The counts live in the session's real Valkey."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from tests.handlers.support import Invoke, task_count
from tierq.aws.runtime import default_engine
from tierq.config import Settings, SettingsError
from tierq.dal.warm_tier import ALL_POLLS_KEY, TenantKeys
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
    assert task_count(pg) == 0  # nothing done


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
    assert warm.poll_begin(TenantKeys.of("acme").polls, cap=1, reservation="in-flight",
                           hold_ms=60_000)
    refused = call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.2}, claims=ACME)
    assert refused.status == 429 and refused.headers["retry-after"] == "1"
    assert refused.body["error"]["details"][0]["field"] == "wait_seconds"
    # a claim that does not wait takes no place; another tenant's long poll has its own
    assert call("POST", "/v1/queues/q/claims", {}, claims=ACME).status == 200
    assert call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.2},
                claims=GLOBEX).status == 200
    warm.poll_end(TenantKeys.of("acme").polls, "in-flight")
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
    assert warm.poll_begin(TenantKeys.of("acme").polls, cap=1, reservation="dead",
                           hold_ms=500)
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
                        tenant_requests_per_second=0.01, tenant_requests_burst=1,
                        tenant_long_polls=1, claim_reserved_concurrency=1)
    with Tierq(settings=settings) as tq:
        for _ in range(3):
            tenant_limits.admit_request(tq.ctx, "acme")  # not counted: goes on
        with tenant_limits.long_poll(tq.ctx, "acme"), tenant_limits.long_poll(tq.ctx, "acme"):
            pass


@pytest.fixture
def all_polls(monkeypatch: pytest.MonkeyPatch, lambda_env: None) -> int:
    """A claim function reserved 5 at once, of which long polls may hold 40 %: 2."""
    monkeypatch.setenv("TIERQ_TENANT_REQUESTS_PER_SECOND", "0")
    monkeypatch.setenv("TIERQ_TENANT_LONG_POLLS", "2")
    monkeypatch.setenv("TIERQ_CLAIM_RESERVED_CONCURRENCY", "5")
    monkeypatch.setenv("TIERQ_LONG_POLLS_PERCENT", "40")
    return 2


def test_all_callers_long_polls_stay_below_the_claim_functions_concurrency(
        all_polls: int, call: Invoke) -> None:
    """The per-tenant cap alone lets enough tenants fill the claim function (with the
    defaults 20 tenants at 10 polls fill its 200; here 1 tenant at 2 fills a cap of 2),
    then everyone's claims throttle into 5xx. The cap over all callers answers 429 first."""
    warm = default_engine().ctx.warm
    # acme's two long polls in flight: both its places and both of all callers'
    for n in range(all_polls):
        assert warm.poll_begin(TenantKeys.of("acme").polls, cap=2, reservation=f"a{n}",
                               hold_ms=60_000)
        assert warm.poll_begin(ALL_POLLS_KEY, cap=all_polls, reservation=f"a{n}",
                               hold_ms=60_000)
    refused = call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.1}, claims=GLOBEX)
    assert refused.status == 429, refused.body
    assert refused.headers["retry-after"] == "1"
    assert refused.body["error"]["details"] == [
        {"field": "wait_seconds", "message": "too many long polls in flight in all"}]
    assert warm.client.zcard(TenantKeys.of("globex").polls) == 0  # its own place given back
    assert call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.1}).status == 429  # admin
    # a claim that does not wait is not a long poll
    assert call("POST", "/v1/queues/q/claims", {}, claims=GLOBEX).status == 200
    warm.poll_end(ALL_POLLS_KEY, "a0")  # one of acme's polls ends
    assert call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.1},
                claims=GLOBEX).status == 200
    assert warm.client.zcard(ALL_POLLS_KEY) == 1  # globex's place given back as it ended


def test_the_cap_over_all_callers_follows_the_reserved_concurrency() -> None:
    assert Settings(claim_reserved_concurrency=200).long_polls_cap == 160  # the defaults
    assert Settings(claim_reserved_concurrency=200, long_polls_percent=50).long_polls_cap == 100
    assert Settings(claim_reserved_concurrency=1).long_polls_cap == 1
    assert Settings(claim_reserved_concurrency=0).long_polls_cap == 0  # no reservation, no cap
    with pytest.raises(SettingsError, match="TIERQ_LONG_POLLS_PERCENT"):
        Settings(TIERQ_LONG_POLLS_PERCENT=0)  # (as the environment gives it)


def test_a_rate_too_small_to_count_is_refused_naming_the_variable() -> None:
    with pytest.raises(SettingsError, match="TIERQ_TENANT_REQUESTS_PER_SECOND must be 0"):
        Settings(TIERQ_TENANT_REQUESTS_PER_SECOND="0.000001")
    assert Settings(tenant_requests_per_second=0).tenant_requests_per_second == 0
    assert Settings(tenant_requests_per_second=0.01).tenant_requests_per_second == 0.01


@pytest.fixture
def no_tenant_keys(valkey_url: str, valkey: redis.Redis) -> Iterator[str]:
    """A Valkey URL of a user that may touch every tierq key but the tenant limits' (the
    tag ``{~...}``): each of their scripts is refused with NOPERM, as a real server refuses
    a user whose access string lacks a key or a command."""
    valkey.execute_command("ACL", "SETUSER", "no-tenant-keys", "on", ">secret",
                           "~tq:{[^~]*", "~tq:[^{]*", "&*", "+@all")
    parts = urlsplit(valkey_url)
    yield urlunsplit(parts._replace(netloc=f"no-tenant-keys:secret@{parts.hostname}:"
                                           f"{parts.port}"))
    valkey.execute_command("ACL", "DELUSER", "no-tenant-keys")


def test_a_limit_valkey_refuses_to_count_lets_the_request_go_on(
        lambda_env: None, no_tenant_keys: str, monkeypatch: pytest.MonkeyPatch, call: Invoke,
        caplog: pytest.LogCaptureFixture) -> None:
    """Valkey answers the limits' scripts with an error (NOPERM here; BUSY, a script error
    or no credentials for the IAM token alike): the limits fail open, as documented, and
    the request goes on instead of a 500 before its route runs."""
    monkeypatch.setenv("VALKEY_URL", no_tenant_keys)
    monkeypatch.setenv("TIERQ_CLAIM_RESERVED_CONCURRENCY", "10")
    with caplog.at_level(logging.WARNING, logger="tierq.logic.tenant_limits"):
        assert call("GET", "/v1/queues", claims=ACME).status == 200
        enqueued = call("POST", "/v1/queues/q/tasks", {"payload": 1}, claims=ACME)
        assert enqueued.status == 200, enqueued.body
        claimed = call("POST", "/v1/queues/q/claims", {"wait_seconds": 0.1}, claims=ACME)
        assert claimed.status == 200 and len(claimed.body["tasks"]) == 1, claimed.body
    warned = [r.getMessage() for r in caplog.records]
    assert any("request of tenant 'acme' not counted" in m and "NoPermissionError" in m
               for m in warned), warned
    assert any("long poll of tenant 'acme' not counted" in m for m in warned), warned
    assert any("long poll of all callers not counted" in m for m in warned), warned
