"""A web page cannot drive the loopback gateway of ``tierq dev``: a request it makes the
browser send carries the page's Origin (a typeless POST needs no preflight), or, after DNS
rebinding, a Host that is not a loopback name. On loopback, such a request is 403 in the
error shape and no function runs; loopback clients (curl, the Python client, a page served
from localhost) are unaffected."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.handlers.support import stand_in_gateway
from tierq.local.gateway.http import LocalHttpServer, is_loopback_authority


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def handler(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.events.append(event)
        return {"statusCode": 200, "headers": {"Content-Type": "application/json"},
                "body": '{"ok": true}'}


@pytest.fixture
def served() -> Iterator[tuple[LocalHttpServer, Recorder]]:
    """A real gateway bound to 127.0.0.1 (so open to the local caller), its functions
    recording the events they get."""
    recorder = Recorder()
    server = LocalHttpServer("127.0.0.1", 0, stand_in_gateway(recorder.handler),
                             access_log=False)
    server.start()
    try:
        yield server, recorder
    finally:
        server.shutdown()
        server.server_close()


def send(server: LocalHttpServer, method: str, path: str, headers: dict[str, str],
         body: bytes | None = None) -> tuple[int, Any]:
    """One request over a real connection; ``Host`` is sent exactly as given (none when
    absent from ``headers``)."""
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(str(host), int(port), timeout=10)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def port_of(server: LocalHttpServer) -> int:
    return int(server.server_address[1])


def test_a_cross_site_form_post_is_refused(served: tuple[LocalHttpServer, Recorder]) -> None:
    server, recorder = served
    # what fetch("http://127.0.0.1:PORT/...", {method: "POST", body: "..."}) sends from a
    # page on another site: text/plain, no preflight, the page's Origin
    status, body = send(server, "POST", "/v1/queues/jobs/tasks", {
        "Host": f"127.0.0.1:{port_of(server)}", "Origin": "https://evil.example",
        "Content-Type": "text/plain;charset=UTF-8"}, b'{"payload": 1}')
    assert status == 403
    assert body["error"]["code"] == "forbidden" and "evil.example" in body["error"]["message"]
    for origin in ("null", "http://localhost.evil.example", "http://127.0.0.1.nip.io:8000"):
        status, _ = send(server, "POST", "/v1/queues/jobs/dlq/replay", {
            "Host": "localhost", "Origin": origin}, b'{"all": true}')
        assert status == 403, origin
    assert recorder.events == []


@pytest.mark.parametrize("host", ["rebind.evil.example", "rebind.evil.example:8000",
                                  "127.0.0.1.nip.io", "localhost.evil.example", "10.1.2.3",
                                  "user@localhost", ""])
def test_a_request_addressed_to_another_host_name_is_refused(
        served: tuple[LocalHttpServer, Recorder], host: str) -> None:
    # DNS rebinding: the page's own name now resolves to 127.0.0.1, so its requests are
    # same-origin to the browser and may even carry the claims header; Host still names it
    server, recorder = served
    for headers in ({"Host": host}, {"Host": host, "x-tierq-jwt-claims":
                                     '{"scope": "tierq/admin"}'}):
        status, body = send(server, "GET", "/v1/queues", headers)
        assert status == 403, headers
        assert body["error"]["code"] == "forbidden"
        assert "Host" in body["error"]["message"]
    assert recorder.events == []


@pytest.mark.parametrize("headers", [
    {"Host": "127.0.0.1"}, {"Host": "localhost:8000"}, {"Host": "LOCALHOST"},
    {"Host": "[::1]:8000"}, {"Host": "127.0.0.1:8000", "Origin": "http://localhost:3000"},
    {"Host": "localhost", "Origin": "http://[::1]:5173"},
    {"Host": "127.0.0.1", "Origin": "https://127.0.0.1"},
])
def test_loopback_callers_are_let_in(served: tuple[LocalHttpServer, Recorder],
                                     headers: dict[str, str]) -> None:
    server, recorder = served
    status, _ = send(server, "POST", "/v1/queues/jobs/tasks",
                     {**headers, "Content-Type": "application/json"}, b'{"payload": 1}')
    assert status == 200 and len(recorder.events) == 1


def test_public_routes_stay_readable(served: tuple[LocalHttpServer, Recorder]) -> None:
    server, _ = served
    assert send(server, "GET", "/v1/openapi.json", {"Host": "anything.example"})[0] == 200


def test_off_loopback_the_claims_header_rule_applies_instead() -> None:
    # bound elsewhere the header is required and judged by the functions, whatever the Host
    recorder = Recorder()
    api = stand_in_gateway(recorder.handler)
    header = [("Host", "queue-box.internal:8000"), ("x-tierq-jwt-claims", '{"tenant": "a"}')]
    assert api.handle("GET", "/v1/queues", header, b"", "10.0.0.9")[0].status == 200
    assert api.handle("GET", "/v1/queues", header[:1], b"", "10.0.0.9")[0].status == 401


def test_is_loopback_authority() -> None:
    assert all(map(is_loopback_authority, ["127.0.0.1", "127.0.0.1:1", "localhost",
                                           "[::1]", "[::1]:80", "127.9.9.9:80"]))
    assert not any(map(is_loopback_authority, ["::1", "[::1]x", "localhost:x", "evil",
                                               "localhost.", "0.0.0.0", "[::]"]))
