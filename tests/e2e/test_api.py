"""Every route of the HTTP API (docs/architecture.md §10) over real HTTP against
``tierq dev``: success and error cases, bad input (the documented 4xx, nothing written),
tenant pinning, the local stack's own 404/405/413, and the scheduled functions doing their
work on their own."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import psycopg
import pytest
import redis

from tests.support.every_task import EVERY_TASK
from tests.support.polling import eventually

pytestmark = pytest.mark.e2e

ACME = {"x-tierq-jwt-claims": '{"tenant": "acme"}'}


def rows(pg: psycopg.Connection[Any], queue: str) -> int:
    """How many tasks of ``queue`` PostgreSQL holds: rows and batch members alike."""
    return int(pg.execute(f"SELECT count(*) FROM {EVERY_TASK} WHERE queue = %s",
                          (queue,)).fetchone()[0])


def untouched(pg: psycopg.Connection[Any], valkey: redis.Redis, queue: str) -> bool:
    settings = pg.execute("SELECT count(*) FROM tierq_queues WHERE queue = %s",
                          (queue,)).fetchone()[0]
    return rows(pg, queue) == 0 and settings == 0 and \
        not list(valkey.scan_iter(f"tq:{{{queue}|*"))


def enqueue(http: httpx.Client, queue: str, body: Any, **kwargs: Any) -> httpx.Response:
    return http.post(f"/v1/queues/{queue}/tasks", json=body, **kwargs)


def claim(http: httpx.Client, queue: str, **body: Any) -> list[dict[str, Any]]:
    response = http.post(f"/v1/queues/{queue}/claims", json=body)
    assert response.status_code == 200, response.text
    return response.json()["tasks"]


# ----------------------------------------------------------------------- the happy path


def test_producer_worker_round_trip(http: httpx.Client, queue: str,
                                    pg: psycopg.Connection[Any]) -> None:
    one = enqueue(http, queue, {"payload": {"to": "a@b.c"}, "key": "mail-1", "priority": 5})
    assert one.status_code == 200
    assert one.headers["content-type"].startswith("application/json")
    task = one.json()
    assert set(task) >= {"id", "outcome", "state"} and task["outcome"] == "created"
    batch = enqueue(http, queue, {"tasks": [{"payload": i} for i in range(3)]}).json()["tasks"]
    assert [t["state"] for t in batch] == ["warm"] * 3

    claimed = claim(http, queue, max=10, lease_seconds=60, worker="w-1")
    assert [t["id"] for t in claimed] == [task["id"]] + [t["id"] for t in batch]
    first = claimed[0]
    assert set(first) >= {"id", "payload", "priority", "tenant", "key", "attempt",
                          "lease_token", "lease_expires_at", "redelivered", "enqueued_at"}
    assert first["payload"] == {"to": "a@b.c"} and first["key"] == "mail-1"

    beat = http.post(f"/v1/queues/{queue}/heartbeats", json={"leases": [
        {"id": first["id"], "lease_token": first["lease_token"], "extend_seconds": 120}]})
    assert beat.status_code == 200 and len(beat.json()["extended"]) == 1

    acks = http.post(f"/v1/queues/{queue}/acks", json={"acks": [
        {"id": t["id"], "lease_token": t["lease_token"], "result": {"ok": True}}
        for t in claimed[:2]]})
    assert acks.status_code == 200
    assert sorted(acks.json()["acked"]) == sorted(t["id"] for t in claimed[:2])
    done = http.get(f"/v1/queues/{queue}/tasks/{first['id']}").json()
    assert done["state"] == "done" and done["result"] == {"ok": True}

    nacks = http.post(f"/v1/queues/{queue}/nacks", json={"nacks": [
        {"id": claimed[2]["id"], "lease_token": claimed[2]["lease_token"], "error": "x",
         "dead": True},
        {"id": claimed[3]["id"], "lease_token": claimed[3]["lease_token"], "error": "y",
         "retry_in_seconds": 30},
    ]}).json()
    assert nacks["dead"] == [claimed[2]["id"]] and nacks["retried"] == [claimed[3]["id"]]
    counts = http.get(f"/v1/queues/{queue}").json()["counts"]
    assert counts == {"warm": 0, "waiting": 0, "held": 0, "cold": 0, "delayed": 1, "leased": 0,
                      "dead": 1}
    assert rows(pg, queue) == 4  # two done (kept with results), one dead, one delayed


def test_queue_admin_routes(http: httpx.Client, queue: str) -> None:
    assert http.get(f"/v1/queues/{queue}").status_code == 404
    put = http.put(f"/v1/queues/{queue}", json={
        "warm_max": 3, "lease_seconds": 30, "max_attempts": 2,
        "backoff": {"kind": "fixed", "base_seconds": 1, "cap_seconds": 1, "jitter": 0},
        "retention_seconds": 60, "paused": True})
    assert put.status_code == 200
    view = put.json()
    assert set(view) >= {"queue", "settings", "counts", "mode"}
    assert view["settings"]["paused"] is True
    enqueue(http, queue, {"tasks": [{"payload": i} for i in range(5)]})
    assert claim(http, queue, max=5) == []  # paused
    view = http.put(f"/v1/queues/{queue}", json={"paused": False}).json()
    assert view["settings"]["warm_max"] == 3 and view["settings"]["paused"] is False
    assert view["counts"]["warm"] == 3 and view["counts"]["cold"] == 2 and view["mode"] == "cold"
    assert queue in [q["queue"] for q in http.get("/v1/queues").json()["queues"]]
    detailed = http.get("/v1/metrics/queues/detailed").json()
    mine = [r for r in detailed["queues"] if r["queue"] == queue]
    assert len(mine) == 1 and mine[0]["warm"] == 3 and mine[0]["oldest_ready_at"]
    got = claim(http, queue, max=5, worker="w-9")
    assert len(got) == 5  # the claim refills the warm set inline from the cold line
    running = http.get("/v1/metrics/queues/running", params={"queue": queue}).json()["running"]
    assert sorted(r["id"] for r in running) == sorted(t["id"] for t in got)
    assert {r["worker"] for r in running} == {"w-9"}
    assert all(set(r) >= {"id", "worker", "started_at", "running_for_ms", "lease_expires_at"}
               for r in running)


def test_task_routes_and_dlq_routes(http: httpx.Client, queue: str) -> None:
    made = enqueue(http, queue, {"tasks": [{"payload": i, "max_attempts": 1}
                                           for i in range(4)]}).json()["tasks"]
    ids = [t["id"] for t in made]
    assert http.get(f"/v1/queues/{queue}/tasks/{ids[0]}").json()["state"] == "warm"
    assert http.delete(f"/v1/queues/{queue}/tasks/{ids[0]}").status_code == 200
    assert http.get(f"/v1/queues/{queue}/tasks/{ids[0]}").status_code == 404
    assert http.delete(f"/v1/queues/{queue}/tasks/{ids[0]}").status_code == 404
    got = claim(http, queue, max=3)
    http.post(f"/v1/queues/{queue}/nacks", json={"nacks": [
        {"id": t["id"], "lease_token": t["lease_token"], "error": f"e{t['payload']}"}
        for t in got]})
    dlq = http.get(f"/v1/queues/{queue}/dlq", params={"limit": 2}).json()
    assert len(dlq["tasks"]) == 2 and dlq["next_cursor"]
    assert all(set(t) >= {"id", "last_error", "attempts"} for t in dlq["tasks"])
    rest = http.get(f"/v1/queues/{queue}/dlq", params={"after": dlq["next_cursor"]}).json()
    assert len(rest["tasks"]) == 1 and rest["next_cursor"] is None
    replay = http.post(f"/v1/queues/{queue}/dlq/replay", json={"ids": ids[1:2]}).json()
    assert replay == {"replayed": ids[1:2], "skipped": [], "more": False}
    purged = http.post(f"/v1/queues/{queue}/dlq/purge", json={"ids": ids[2:3]}).json()
    assert purged == {"purged": ids[2:3], "more": False}
    replay_all = http.post(f"/v1/queues/{queue}/dlq/replay", json={"all": True}).json()
    assert replay_all["replayed"] == ids[3:4]
    purge_all = http.post(f"/v1/queues/{queue}/dlq/purge")  # no body: all of them
    assert purge_all.json() == {"purged": [], "more": False}
    # the purge's DELETE of the list is gone: the list stays, only emptied
    gone = http.delete(f"/v1/queues/{queue}/dlq")
    assert gone.status_code == 405 and gone.headers["allow"] == "GET"
    assert http.get(f"/v1/queues/{queue}/dlq").json()["tasks"] == []


def test_openapi_and_dashboard_are_served(http: httpx.Client) -> None:
    spec = http.get("/v1/openapi.json")
    assert spec.status_code == 200 and spec.json()["info"]["title"] == "tierq"
    page = http.get("/dashboard")
    assert page.status_code in (200, 404)
    if page.status_code == 200:
        assert page.headers["content-type"].startswith("text/html")
        assert "<html" in page.text.lower()
    else:
        assert "dashboard" in page.json()["error"]["message"]


# ----------------------------------------------------------------------- the local stack


def test_unknown_path_is_404_and_wrong_method_405(http: httpx.Client) -> None:
    missing = http.get("/v1/nothing/here")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    wrong = http.delete("/v1/queues")
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "GET"
    assert http.patch("/v1/queues/q/tasks").status_code == 405
    for method in ("TRACE", "PROPFIND"):  # methods http.server has no handler for
        other = http.request(method, "/v1/queues/q")
        assert other.status_code == 405, other.text
        assert other.headers["allow"] == "GET, PUT"
        assert other.json()["error"]["code"] == "method_not_allowed"
    assert http.request("TRACE", "/v1/nothing/here").json()["error"]["code"] == "not_found"


def test_a_body_over_10_mib_is_413(http: httpx.Client, queue: str,
                                   pg: psycopg.Connection[Any]) -> None:
    body = b'{"payload": "' + b"x" * (10 * 1024 * 1024) + b'"}'
    response = http.post(f"/v1/queues/{queue}/tasks", content=body,
                         headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert rows(pg, queue) == 0


def test_scheduled_functions_run_on_their_own(http: httpx.Client, queue: str) -> None:
    """The delayed mover and the reaper run from the local scheduler, not from the test."""
    later = enqueue(http, queue, {"payload": "later", "delay_seconds": 1}).json()
    assert later["state"] == "delayed"
    eventually(lambda: http.get(f"/v1/queues/{queue}/tasks/{later['id']}").json()["state"]
               == "warm", what="the delayed mover made the task ready")
    [task] = claim(http, queue, lease_seconds=1)
    eventually(lambda: http.get(f"/v1/queues/{queue}").json()["counts"]["warm"] == 1,
               what="the reaper returned the expired lease to the line")
    [again] = claim(http, queue)
    assert again["id"] == task["id"] and again["attempt"] == 2 and again["redelivered"]


def test_concurrent_requests_are_served_while_a_claim_long_polls(http: httpx.Client,
                                                                 queue: str,
                                                                 base_url: str) -> None:
    import threading

    got: list[list[dict[str, Any]]] = []

    def long_poll() -> None:
        with httpx.Client(base_url=base_url, timeout=30) as other:
            got.append(other.post(f"/v1/queues/{queue}/claims",
                                  json={"wait_seconds": 10}).json()["tasks"])

    poller = threading.Thread(target=long_poll)
    poller.start()
    time.sleep(0.3)
    started = time.monotonic()
    assert enqueue(http, queue, {"payload": "wake"}).status_code == 200
    assert time.monotonic() - started < 5  # not stuck behind the long poll
    poller.join(15)
    assert [t["payload"] for t in got[0]] == ["wake"]


# ----------------------------------------------------------------------- bad input


BAD_ENQUEUES: list[tuple[Any, int, str]] = [
    ({"tasks": [{"payload": 1}, {"payload": 2, "priority": 10}]}, 422, "tasks[1].priority"),
    ({"payload": 1, "priority": "high"}, 422, "priority"),
    ({"payload": 1, "extra": 1}, 422, "extra"),
    ({"tasks": [{"payload": i} for i in range(501)]}, 422, "tasks"),
    ({"payload": 1, "tenant": "no spaces"}, 422, "tenant"),
    ({"payload": 1, "delay_seconds": 10**9}, 422, "delay_seconds"),
    ({"payload": 1, "run_at": "2100-01-01T00:00:00Z"}, 422, "run_at"),
    ({"payload": 1, "run_at": "yesterday"}, 422, "run_at"),
    ({"payload": "nul\u0000"}, 422, "payload"),
    ({"payload": {"deep": 10**25}}, 422, "payload.deep"),
    ({"payload": "x" * (256 * 1024)}, 413, "payload"),
    ([{"payload": 1}], 422, "body"),
    (None, 422, "body"),
]


@pytest.mark.parametrize(("body", "status", "field"), BAD_ENQUEUES)
def test_bad_enqueue_is_the_documented_4xx_and_writes_nothing(
        http: httpx.Client, queue: str, pg: psycopg.Connection[Any], valkey: redis.Redis,
        body: Any, status: int, field: str) -> None:
    response = http.post(f"/v1/queues/{queue}/tasks", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and field in [d["field"] for d in error["details"]], error
    assert untouched(pg, valkey, queue)


@pytest.mark.parametrize(("content", "content_type"), [
    (b"{oops", "application/json"),
    (b'{"payload": Infinity}', "application/json"),
    (b'{"payload": "\\udc00"}', "application/json"),
    (b'{"payload": 1}', "text/plain"),
    (b"payload=1", "application/x-www-form-urlencoded"),
    (b"\xff\xfe\x00", "application/octet-stream"),
    (b"\xff\xfe\x00", "application/json"),
    ("é€😀".encode("utf-16"), "application/json"),
])
def test_unparseable_bodies_are_400(http: httpx.Client, queue: str, pg: psycopg.Connection[Any],
                                    valkey: redis.Redis, content: bytes,
                                    content_type: str) -> None:
    response = http.post(f"/v1/queues/{queue}/tasks", content=content,
                         headers={"content-type": content_type})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "malformed_request"
    assert untouched(pg, valkey, queue)


@pytest.mark.parametrize(("method", "path", "body", "status", "field"), [
    ("POST", "/v1/queues/{q}/claims", {"max": 100000}, 422, "max"),
    ("POST", "/v1/queues/{q}/claims", {"worker": "w" * 129}, 422, "worker"),
    ("POST", "/v1/queues/{q}/claims", {"tenant": "bad|tenant"}, 422, "tenant"),
    ("POST", "/v1/queues/{q}/acks", {"acks": [{"id": "x", "lease_token": ""}]}, 422,
     "acks[0].id"),
    ("POST", "/v1/queues/{q}/nacks", {"nacks": "all"}, 422, "nacks"),
    ("POST", "/v1/queues/{q}/heartbeats", {"leases": [{"id": str(uuid.uuid4()),
                                                       "lease_token": "t",
                                                       "extend_seconds": 10**6}]}, 422,
     "leases[0].extend_seconds"),
    ("PUT", "/v1/queues/{q}", {"lease_seconds": -5}, 422, "lease_seconds"),
    ("PUT", "/v1/queues/{q}", {"backoff": {"kind": "fixed", "jitter": 2}}, 422, "backoff.jitter"),
    ("PUT", "/v1/queues/{q}", {"retention_seconds": "long"}, 422, "retention_seconds"),
    ("GET", "/v1/queues/{q}/tasks/123", None, 422, "id"),
    ("GET", "/v1/queues/{q}/dlq?limit=100000", None, 422, "limit"),
    ("GET", "/v1/queues/{q}/dlq?tenant=a%20b", None, 422, "tenant"),
    ("POST", "/v1/queues/{q}/dlq/replay", {"ids": []}, 422, "ids"),
    ("GET", "/v1/metrics/queues/running?queue=..bad", None, 422, "queue"),
    ("POST", "/v1/queues/bad%20name/tasks", {"payload": 1}, 422, "queue"),
    ("POST", "/v1/queues/" + "q" * 65 + "/claims", {}, 422, "queue"),
])
def test_bad_input_elsewhere(http: httpx.Client, queue: str, pg: psycopg.Connection[Any],
                             valkey: redis.Redis, method: str, path: str, body: Any, status: int,
                             field: str) -> None:
    response = http.request(method, path.replace("{q}", queue), json=body)
    assert response.status_code == status, response.text
    assert field in [d["field"] for d in response.json()["error"]["details"]], response.text
    assert untouched(pg, valkey, queue)


def test_unicode_oddities_that_are_valid_are_kept_exactly(http: httpx.Client,
                                                          queue: str) -> None:
    payload = {"emoji": "😀", "rtl": "\u202egnp.exe", "zw": "a\u200bb", "bom": "\ufeff",
               "nested": [[[[{"k": "é"}]]]], "big": 2**63 - 1, "neg": -(2**63),
               "float": 1.5e300, "ctl": "\u0001\u001f"}
    made = enqueue(http, queue, {"payload": payload, "key": "ключ-😀"}).json()
    [task] = claim(http, queue)
    assert task["payload"] == payload and task["key"] == "ключ-😀"
    assert task["id"] == made["id"]


# ----------------------------------------------------------------------- tenant pinning


def test_tenant_pinning_over_http(http: httpx.Client, queue: str,
                                  pg: psycopg.Connection[Any]) -> None:
    mine = enqueue(http, queue, {"payload": "mine"}, headers=ACME).json()
    assert mine["tenant"] == "acme"
    theirs = enqueue(http, queue, {"payload": "theirs", "tenant": "globex"}).json()
    denied = enqueue(http, queue, {"payload": "x", "tenant": "globex"}, headers=ACME)
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    assert rows(pg, queue) == 2
    assert http.post(f"/v1/queues/{queue}/claims", json={"tenant": "globex"},
                     headers=ACME).status_code == 403
    got = http.post(f"/v1/queues/{queue}/claims", json={"max": 5}, headers=ACME).json()["tasks"]
    assert [t["tenant"] for t in got] == ["acme"]
    assert http.get(f"/v1/queues/{queue}/tasks/{theirs['id']}", headers=ACME).status_code == 404
    assert http.get(f"/v1/queues/{queue}/tasks/{mine['id']}", headers=ACME).status_code == 200
    assert http.get(f"/v1/queues/{queue}/dlq", params={"tenant": "globex"},
                    headers=ACME).status_code == 403
    assert http.put(f"/v1/queues/{queue}", json={}, headers=ACME).status_code == 403
    rows_seen = http.get("/v1/metrics/queues/detailed", headers=ACME).json()["queues"]
    assert {r["tenant"] for r in rows_seen} == {"acme"}
    assert http.post(f"/v1/queues/{queue}/tasks", json={"payload": 1},
                     headers={"x-tierq-jwt-claims": "not json"}).status_code == 400
    # the public routes get no authorizer context at all
    assert http.get("/v1/openapi.json", headers=ACME).status_code == 200


def test_concurrent_requests_to_one_function_each_get_their_own_answer(
        http: httpx.Client, base_url: str) -> None:
    """The local stack serves one function from many threads; no request may see another's
    event (path, body, claims)."""
    from concurrent.futures import ThreadPoolExecutor

    names = [f"c-{uuid.uuid4().hex[:8]}-{i}" for i in range(200)]

    def put_then_get(i: int) -> tuple[str, int, str, int]:
        with httpx.Client(base_url=base_url, timeout=30) as client:
            put = client.put(f"/v1/queues/{names[i]}", json={"warm_max": 100 + i}).json()
            got = client.get(f"/v1/queues/{names[i]}").json()
            return put["queue"], put["settings"]["warm_max"], got["queue"], \
                got["settings"]["warm_max"]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(put_then_get, range(len(names))))
    assert answers == [(n, 100 + i, n, 100 + i) for i, n in enumerate(names)]
