"""The local gateway's access rules over real HTTP: on a loopback address a request without
the x-tierq-jwt-claims header acts as an admin; with the header the claims are judged as on
AWS (tenant-less claims are 403); bound to a non-loopback address (``--host 0.0.0.0``)
anyone on the network could send the header, so the server's access token is required as
the bearer token (401 without it), and with it the header's claims are judged (without the
header: the local caller)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.support.dev_server import DevServer, start_dev_server

CLAIMS = "x-tierq-jwt-claims"
ADMIN = {CLAIMS: json.dumps({"scope": ["openid", "tierq/admin"]})}  # an array claim
ACME = {CLAIMS: json.dumps({"tenant": "acme"})}
NOBODY = {CLAIMS: json.dumps({"sub": "user-1", "scope": "openid"})}
TOKEN = "dev-token-for-the-test"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def test_loopback_without_header_acts_as_admin(http: httpx.Client, queue: str) -> None:
    assert http.put(f"/v1/queues/{queue}", json={"paused": False}).status_code == 200
    reply = http.post(f"/v1/queues/{queue}/tasks", json={"payload": 1, "tenant": "globex"})
    assert reply.status_code == 200, reply.text


def test_with_the_header_claims_are_judged_as_on_aws(http: httpx.Client, queue: str) -> None:
    refused = http.post(f"/v1/queues/{queue}/tasks", json={"payload": 1}, headers=NOBODY)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    assert http.get("/v1/queues", headers=NOBODY).status_code == 403
    assert http.post(f"/v1/queues/{queue}/tasks", json={"payload": 1},
                     headers=ACME).status_code == 200
    assert http.put(f"/v1/queues/{queue}", json={"paused": False},
                    headers=ACME).status_code == 403
    assert http.put(f"/v1/queues/{queue}", json={"paused": False},
                    headers=ADMIN).status_code == 200
    # the public routes need nothing
    assert http.get("/v1/openapi.json", headers=NOBODY).status_code == 200


def without_name(reply: httpx.Response) -> dict[str, object]:
    return {k: v for k, v in reply.json().items() if k != "queue"}


def test_a_tenants_queue_view_over_http(http: httpx.Client, queue: str) -> None:
    """A pinned caller's view shows the settings workers read and its own counts — the queue's
    settings once its tenant has used the queue — and is the same for a queue name nobody
    used as for a queue with another tenant's tasks only, configured or not; an admin keeps
    the full view and the 404."""
    assert http.put(f"/v1/queues/{queue}", json={"lease_seconds": 21, "max_leased": 5},
                    headers=ADMIN).status_code == 200
    assert http.post(f"/v1/queues/{queue}/tasks", json={"payload": 1, "tenant": "globex"},
                     headers=ADMIN).status_code == 200
    configured = http.get(f"/v1/queues/{queue}", headers=ACME)
    assert http.post(f"/v1/queues/{queue}-theirs/tasks",
                     json={"payload": 1, "tenant": "globex"}).status_code == 200
    other_tenants = http.get(f"/v1/queues/{queue}-theirs", headers=ACME)
    nobody = http.get(f"/v1/queues/{queue}-nobody", headers=ACME)
    assert configured.status_code == other_tenants.status_code == nobody.status_code == 200
    assert without_name(configured) == without_name(other_tenants) == without_name(nobody)
    assert nobody.json()["counts"] == {"warm": 0, "waiting": 0, "held": 0, "cold": 0, "delayed": 0,
                                       "leased": 0, "dead": 0}
    # once acme has used the queue: the queue's settings, its own counts
    assert http.post(f"/v1/queues/{queue}/tasks", json={"payload": 2},
                     headers=ACME).status_code == 200
    mine = http.get(f"/v1/queues/{queue}", headers=ACME)
    assert mine.status_code == 200, mine.text
    view = mine.json()
    assert (view["view"], view["tenant"], view["settings"]["lease_seconds"]) == \
        ("tenant", "acme", 21)
    # the queue's limits stay the admin's (a group's own, group_max_leased, a worker reads)
    assert '"max_leased"' not in mine.text and "globex" not in mine.text
    assert "max_leased" not in view["settings"] and view["settings"]["group_max_leased"] == 1
    assert view["counts"]["warm"] + view["counts"]["cold"] == 1
    full = http.get(f"/v1/queues/{queue}", headers=ADMIN).json()
    assert full["view"] == "admin" and full["settings"]["max_leased"] == 5
    assert http.get(f"/v1/queues/{queue}-nobody", headers=ADMIN).status_code == 404


@pytest.fixture(scope="module")
def open_server(database_url: str, valkey_url: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = start_dev_server(database_url, valkey_url,
                              tmp_path_factory.mktemp("tierq-dev-any") / "tierq-dev.log",
                              args=("--host", "0.0.0.0", "--no-schedules"),
                              extra_env={"TIERQ_DEV_TOKEN": TOKEN})
    yield server
    code = server.stop()
    if code != 0:
        print(f"tierq dev exited with {code}:\n{server.log()[-5000:]}", file=sys.stderr)


def test_off_loopback_every_api_route_needs_the_token(open_server: DevServer,
                                                      clean_stores: None) -> None:
    log = open_server.log()
    assert "requires 'Authorization: Bearer <token>'" in log
    assert TOKEN not in log  # a token it was given is not printed (only a made one is)
    with httpx.Client(base_url=open_server.url, timeout=30) as http:
        for method, path in (("GET", "/v1/queues"), ("POST", "/v1/queues/jobs/tasks"),
                             ("GET", "/v1/metrics/queues/detailed"),
                             ("PUT", "/v1/schedules/nightly"), ("GET", "/v1/schedules")):
            for headers in ({}, ADMIN, {**ADMIN, "Authorization": "Bearer wrong"},
                            {**ADMIN, "Authorization": TOKEN}):  # (no scheme)
                reply = http.request(method, path, json={"payload": 1}, headers=headers)
                assert reply.status_code == 401, (method, path, headers, reply.text)
                assert reply.json()["error"]["code"] == "unauthorized"
        assert http.get("/v1/openapi.json").status_code == 200
        assert http.get("/dashboard").status_code == 200
        assert http.post("/v1/queues/jobs/tasks", json={"payload": 1},
                         headers={**BEARER, **NOBODY}).status_code == 403
        assert http.post("/v1/queues/jobs/tasks", json={"payload": 1},
                         headers={**BEARER, **ACME}).status_code == 200
        assert http.get("/v1/queues", headers={**BEARER, **ADMIN}).json()["queues"][0][
            "queue"] == "jobs"
        # the token without claims: the local caller (the dashboard's bearer token)
        assert http.post("/v1/queues/jobs/tasks", json={"payload": 2, "tenant": "globex"},
                         headers=BEARER).status_code == 200
