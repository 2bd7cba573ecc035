"""The local gateway's side of access (tierq.local.gateway.http): it lets a request without the
claims header through — marked with the in-process LOCAL_GATEWAY object — only once it knows
it listens on a loopback address; otherwise such a request is 401 and no function runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.handlers.support import stand_in_gateway
from tierq.aws.http.access import LOCAL_GATEWAY, LOCAL_GATEWAY_KEY
from tierq.local.gateway.http import LocalApi, LocalHttpServer, is_loopback


def recording_api(*, open_without_claims: bool | None = None) -> tuple[LocalApi, list[Any]]:
    events: list[dict[str, Any]] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        events.append(event)
        return {"statusCode": 200, "body": "{}"}

    return stand_in_gateway(handler, open_without_claims=open_without_claims), events


def test_until_told_it_is_on_loopback_the_gateway_requires_the_header() -> None:
    api, events = recording_api()
    response, _ = api.handle("GET", "/v1/queues", [], b"", "10.0.0.9")
    assert response.status == 401
    assert json.loads(response.body)["error"]["code"] == "unauthorized"
    assert events == []
    # public routes need nothing
    assert api.handle("GET", "/v1/openapi.json", [], b"", "10.0.0.9")[0].status == 200
    # with the header the function runs and judges the claims; no marker
    header = [("X-Tierq-Jwt-Claims", '{"tenant": "acme"}')]
    assert api.handle("GET", "/v1/queues", header, b"", "10.0.0.9")[0].status == 200
    claims = events[-1]["requestContext"]["authorizer"]["jwt"]["claims"]
    assert claims == {"tenant": "acme"} and LOCAL_GATEWAY_KEY not in events[-1]
    assert all(LOCAL_GATEWAY_KEY not in e for e in events)


def test_on_loopback_a_request_without_the_header_carries_the_marker() -> None:
    api, events = recording_api(open_without_claims=True)
    assert api.handle("POST", "/v1/queues/q/tasks", [], b'{"payload": 1}',
                      "127.0.0.1")[0].status == 200
    assert events[-1][LOCAL_GATEWAY_KEY] is LOCAL_GATEWAY
    assert "authorizer" not in events[-1]["requestContext"]
    api.handle("POST", "/v1/queues/q/tasks", [("x-tierq-jwt-claims", '{"sub": "x"}')],
               b'{"payload": 1}', "127.0.0.1")
    assert LOCAL_GATEWAY_KEY not in events[-1]  # claims given: judged as claims


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("192.168.0.1", False),
    ("localhost", False), ("", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(("host", "open_without_claims"), [
    ("127.0.0.1", True), ("localhost", True), ("0.0.0.0", False)])
def test_the_server_decides_on_the_address_it_bound(host: str,
                                                    open_without_claims: bool) -> None:
    api, _ = recording_api(open_without_claims=not open_without_claims)
    server = LocalHttpServer(host, 0, api, access_log=False)
    try:
        assert server.loopback is open_without_claims
        assert api.open_without_claims is open_without_claims
    finally:
        server.server_close()


def test_off_loopback_the_server_makes_an_access_token_and_requires_it() -> None:
    api, events = recording_api()
    server = LocalHttpServer("0.0.0.0", 0, api, access_log=False)
    try:
        token = api.access_token
        assert token and len(token) >= 24
    finally:
        server.server_close()
    claims = ("x-tierq-jwt-claims", '{"scope": "tierq/admin"}')
    for given in ([claims], [claims, ("Authorization", "Bearer " + token[:-1])],
                  [claims, ("Authorization", "Basic " + token)]):
        assert api.handle("GET", "/v1/queues", given, b"", "10.0.0.9")[0].status == 401
    assert events == []
    assert api.handle("GET", "/v1/openapi.json", [], b"", "10.0.0.9")[0].status == 200
    bearer = ("authorization", "bearer " + token)  # (names and scheme in any case)
    assert api.handle("GET", "/v1/queues", [claims, bearer], b"", "10.0.0.9")[0].status == 200
    assert events[-1]["requestContext"]["authorizer"]["jwt"]["claims"] == {
        "scope": "tierq/admin"}
    assert all(n.lower() != "authorization" for n in events[-1]["headers"])  # not passed on
    # the token without claims: the local caller, as on loopback
    assert api.handle("GET", "/v1/queues", [bearer], b"", "10.0.0.9")[0].status == 200
    assert events[-1][LOCAL_GATEWAY_KEY] is LOCAL_GATEWAY


def test_on_loopback_no_token_is_made() -> None:
    api, _ = recording_api()
    server = LocalHttpServer("127.0.0.1", 0, api, access_log=False)
    server.server_close()
    assert api.access_token is None
