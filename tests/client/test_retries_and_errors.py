"""The client against a scripted HTTP server: which answers it retries, how long it waits,
how errors are raised, and that input it refuses is never sent."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.client.scripted_server import Reply, ScriptedServer
from tierq.client import (
    Client,
    ConnectionFailed,
    InvalidInputError,
    NotFoundError,
    RetryPolicy,
    ServerError,
    TooManyRequestsError,
    UnavailableError,
)
from tierq.client.errors import ApiError, parse_retry_after
from tierq.local.services.process import free_port

OUTCOME = {"id": "01a2010d-0000-7000-8000-000000000001", "outcome": "created", "state": "warm",
           "tenant": "_", "key": None}


def error(status: int, code: str, message: str = "nope", details: list | None = None) -> dict:
    return {"error": {"code": code, "message": message, "details": details or []}}


def client_for(client_class: type[Client], server: ScriptedServer, waits: list[float],
               **policy: float) -> Client:
    retry = RetryPolicy(**{"max_retries": 3, "base_seconds": 0.5, "cap_seconds": 4.0,
                           **policy})
    client = client_class(server.url, retry=retry, timeout=5)
    client._sleep = waits.append  # record the backoff instead of sleeping
    return client


def test_503_is_retried_honouring_retry_after(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(
        Reply(503, error(503, "unavailable", "valkey down"), headers={"Retry-After": "2"}),
        Reply(503, error(503, "unavailable"), headers={"Retry-After": "7"}),
        Reply(200, {"tasks": [OUTCOME]}),
    )
    waits: list[float] = []
    with client_for(client_class, scripted, waits) as api:
        outcomes = api.enqueue("emails", [{"payload": {"n": 1}}])
    assert [o.outcome for o in outcomes] == ["created"]
    assert waits == [2.0, 7.0]
    assert len(scripted.received) == 3
    # the same request each time: a retried POST is identical
    assert len({r.body for r in scripted.received}) == 1


def test_429_and_5xx_use_exponential_backoff_with_jitter(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(Reply(429, error(429, "throttled")), Reply(500, error(500, "internal")),
                    Reply(502, raw=b"<html>bad gateway</html>"),
                    Reply(200, {"queues": [], "timestamp": "2026-11-22T00:00:00Z"}))
    waits: list[float] = []
    with client_for(client_class, scripted, waits) as api:
        assert api.metrics_detailed() == []
    assert len(waits) == 3
    for retry, wait in enumerate(waits):
        assert 0 <= wait <= min(4.0, 0.5 * 2 ** retry)


def test_gives_up_after_max_retries_with_the_last_error(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(*[Reply(503, error(503, "unavailable", "postgres down"),
                            headers={"Retry-After": "1"}) for _ in range(4)])
    waits: list[float] = []
    with client_for(client_class, scripted, waits) as api, \
            pytest.raises(UnavailableError) as caught:
        api.get_queue("emails")
    assert len(scripted.received) == 4  # the first try and 3 retries
    assert caught.value.status == 503
    assert caught.value.code == "unavailable"
    assert caught.value.message == "postgres down"
    assert caught.value.retry_after == 1.0
    assert isinstance(caught.value, ServerError)


def test_429_after_retries_is_its_own_error(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(*[Reply(429, error(429, "throttled")) for _ in range(2)])
    with client_for(client_class, scripted, [], max_retries=1) as api, \
            pytest.raises(TooManyRequestsError):
        api.list_queues()


def test_client_errors_are_not_retried_and_carry_code_and_details(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(Reply(404, error(404, "not_found", "no task x in queue 'emails'")),
                    Reply(422, error(422, "invalid_input", "tasks[0].payload: too large",
                                     [{"field": "tasks[0].payload", "message": "too large"}])))
    waits: list[float] = []
    with client_for(client_class, scripted, waits) as api:
        with pytest.raises(NotFoundError) as missing:
            api.get_task("emails", uuid.uuid4())
        with pytest.raises(InvalidInputError) as invalid:
            api.enqueue("emails", [{"payload": "x"}])
    assert waits == []
    assert len(scripted.received) == 2
    assert missing.value.code == "not_found"
    assert "no task x" in str(missing.value)
    assert invalid.value.details == [{"field": "tasks[0].payload", "message": "too large"}]
    assert invalid.value.url is not None  # refused by the API, not by the client


def test_a_gateway_error_without_the_api_body_still_raises_clearly(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(Reply(403, {"message": "Forbidden"}), Reply(418, raw=b"short and stout"))
    with client_for(client_class, scripted, []) as api:
        with pytest.raises(ApiError) as forbidden:
            api.list_queues()
        with pytest.raises(ApiError) as teapot:
            api.list_queues()
    assert (forbidden.value.status, forbidden.value.code) == (403, "http_403")
    assert forbidden.value.message == "Forbidden"
    assert (teapot.value.status, teapot.value.message) == (418, "short and stout")


def test_connection_errors_are_retried_then_raised(client_class: type[Client]) -> None:
    port = free_port()  # nobody listens on it
    waits: list[float] = []
    api = client_class(f"http://127.0.0.1:{port}", retry=RetryPolicy(max_retries=2), timeout=2)
    api._sleep = waits.append
    with api, pytest.raises(ConnectionFailed) as caught:
        api.list_queues()
    assert len(waits) == 2
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def test_a_read_timeout_is_retried(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(Reply(200, {"queues": []}, delay=1.5), Reply(200, {"queues": []}))
    waits: list[float] = []
    api = client_class(scripted.url, retry=RetryPolicy(max_retries=1), timeout=0.5)
    api._sleep = waits.append
    with api:
        assert api.list_queues() == []
    assert len(waits) == 1
    assert len(scripted.received) == 2


def test_long_poll_claims_wait_longer_than_the_timeout(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(Reply(200, {"tasks": []}, delay=1.0))
    api = client_class(scripted.url, retry=RetryPolicy(max_retries=0), timeout=0.5)
    with api:
        assert api.claim("emails", max=5, wait_seconds=1) == []
    assert scripted.received[0].json() == {"max": 5, "wait_seconds": 1.0}


@pytest.mark.parametrize(("call", "field"), [
    (lambda api: api.enqueue("q", [{"payload": 1}, {"payload": 2, "priority": 12}]),
     "tasks[1].priority"),
    (lambda api: api.enqueue("q", [{"payload": 1, "delay_seconds": 1, "run_at": "2030-01-01"}]),
     "tasks[0]"),
    (lambda api: api.enqueue("q", []), "tasks"),
    (lambda api: api.claim("q", max=0), "max"),
    (lambda api: api.ack("q", [{"id": "not-a-uuid", "lease_token": "t"}]), "acks[0].id"),
    (lambda api: api.nack("q", [{"id": str(uuid.uuid4()), "lease_token": ""}]),
     "nacks[0].lease_token"),
    (lambda api: api.put_queue("q", {"warm_max": 0}), "warm_max"),
    (lambda api: api.put_schedule("s", {"queue": "q", "payload": 1, "cron": "nope"}), "cron"),
])
def test_input_the_api_would_refuse_is_refused_before_sending(
        scripted: ScriptedServer, client_class: type[Client], call, field: str) -> None:
    with client_for(client_class, scripted, []) as api, pytest.raises(InvalidInputError) as caught:
        call(api)
    assert scripted.received == []
    assert caught.value.details[0]["field"] == field
    assert caught.value.url is None


def test_batches_above_500_are_split(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(Reply(200, {"tasks": [OUTCOME] * 500}), Reply(200, {"tasks": [OUTCOME] * 2}))
    with client_for(client_class, scripted, []) as api:
        outcomes = api.enqueue("q", [{"payload": i} for i in range(502)], tenant="acme")
    assert len(outcomes) == 502
    bodies = [r.json() for r in scripted.received]
    assert [len(b["tasks"]) for b in bodies] == [500, 2]
    assert bodies[1]["tasks"][1] == {"payload": 501, "tenant": "acme"}


def test_retry_after_parsing() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    policy = RetryPolicy(max_retry_after_seconds=10)
    assert policy.delay(0, retry_after=3600) == 10
    with pytest.raises(ValueError):
        RetryPolicy(base_seconds=5, cap_seconds=1)


def test_a_response_too_large_for_lambda_is_not_retried(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    # deterministic: the same request would be answered the same way every time
    scripted.script(Reply(500, error(500, "response_too_large", "over 6 MB")),
                    Reply(200, {"queues": [], "next": None}))
    waits: list[float] = []
    with client_for(client_class, scripted, waits) as client, pytest.raises(ServerError) as raised:
        client.list_queues()
    assert raised.value.code == "response_too_large" and raised.value.status == 500
    assert len(scripted.received) == 1 and waits == []
    assert not RetryPolicy().retries(500, "response_too_large")
    assert RetryPolicy().retries(500, "internal_error")
