"""The HTTP functions' handlers with API Gateway (payload v2) events, over real stores."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import psycopg
import pytest
import redis

from tests.handlers.support import Context, Invoke, function_module, load_event, reply_of
from tests.support.every_task import EVERY_TASK
from tierq.aws.http.routes import docs
from tierq.aws.runtime import engine


def rows(pg: psycopg.Connection[Any], queue: str) -> list[dict[str, Any]]:
    """The tasks of ``queue`` PostgreSQL holds, in their order: rows and batch members alike."""
    cur = pg.execute(f"SELECT id, tenant, state, payload::text AS payload FROM {EVERY_TASK} "
                     "WHERE queue = %s ORDER BY seq", (queue,))
    names = [c.name for c in cur.description or []]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def nothing_written(pg: psycopg.Connection[Any], valkey: redis.Redis, queue: str) -> bool:
    return not rows(pg, queue) and not list(valkey.scan_iter(f"tq:{{{queue}|*"))


def claim(call: Invoke, queue: str, **body: Any) -> list[dict[str, Any]]:
    reply = call("POST", f"/v1/queues/{queue}/claims", body)
    assert reply.status == 200, reply.body
    return reply.body["tasks"]


# ----------------------------------------------------------------------- enqueue


def test_sam_generated_enqueue_event_as_is(lambda_env: None, pg: psycopg.Connection[Any]) -> None:
    """The event exactly as `sam local generate-event` makes it: base64 body, no
    content-type header, a JWT authorizer without a tenant claim, mixed-case headers. Its
    claims name neither a tenant nor the admin scope: refused, nothing written. With a
    tenant claim added it goes through."""
    event = load_event("http_api_enqueue.json")
    refused = reply_of(function_module("enqueue").lambda_handler(event, Context()))
    assert refused.status == 403, refused.body
    assert refused.body["error"]["code"] == "forbidden"
    assert rows(pg, "emails") == []
    event["requestContext"]["authorizer"]["jwt"]["claims"]["tenant"] = "acme"
    reply = reply_of(function_module("enqueue").lambda_handler(event, Context()))
    assert reply.status == 200, reply.body
    assert reply.body["outcome"] == "created"
    assert reply.body["state"] == "warm"
    [row] = rows(pg, "emails")
    assert str(row["id"]) == reply.body["id"]
    assert json.loads(row["payload"]) == {"to": "a@b.c"}
    assert engine().get_task("emails", row["id"]).priority == 3


def test_enqueue_batch_then_claim_ack(call: Invoke, pg: psycopg.Connection[Any]) -> None:
    tasks = [{"payload": {"n": i}, "priority": i % 3} for i in range(5)]
    reply = call("POST", "/v1/queues/jobs/tasks", {"tasks": tasks})
    assert reply.status == 200
    outcomes = reply.body["tasks"]
    assert [o["outcome"] for o in outcomes] == ["created"] * 5
    claimed = claim(call, "jobs", max=10, worker="w1")
    assert [t["payload"]["n"] for t in claimed] == [2, 1, 4, 0, 3]  # priority, then order
    acks = [{"id": t["id"], "lease_token": t["lease_token"]} for t in claimed]
    reply = call("POST", "/v1/queues/jobs/acks", {"acks": acks})
    assert reply.status == 200
    assert sorted(reply.body["acked"]) == sorted(o["id"] for o in outcomes)
    assert reply.body["rejected"] == []
    assert rows(pg, "jobs") == []


def test_enqueue_same_key_twice_is_ignored(call: Invoke) -> None:
    first = call("POST", "/v1/queues/jobs/tasks", {"payload": 1, "key": "k1"})
    again = call("POST", "/v1/queues/jobs/tasks", {"payload": 2, "key": "k1"})
    assert first.body["outcome"] == "created"
    assert again.body == {**first.body, "outcome": "ignored"}


# ----------------------------------------------------------------------- leases


def test_nack_retries_then_dead_letters(call: Invoke, pg: psycopg.Connection[Any]) -> None:
    call("POST", "/v1/queues/jobs/tasks", {"payload": "x", "max_attempts": 2})
    [task] = claim(call, "jobs")
    reply = call("POST", "/v1/queues/jobs/nacks", {"nacks": [
        {"id": task["id"], "lease_token": task["lease_token"], "error": "boom",
         "retry_in_seconds": 0}]})
    assert reply.status == 200
    assert reply.body["retried"] == [task["id"]]
    [again] = claim(call, "jobs")
    assert again["id"] == task["id"] and again["attempt"] == 2 and again["redelivered"]
    reply = call("POST", "/v1/queues/jobs/nacks", {"nacks": [
        {"id": again["id"], "lease_token": again["lease_token"], "error": "boom again"}]})
    assert reply.body["dead"] == [task["id"]]
    dlq = call("GET", "/v1/queues/jobs/dlq")
    assert dlq.status == 200
    [dead] = dlq.body["tasks"]
    assert dead["id"] == task["id"]
    assert dead["last_error"] == "boom again"
    assert dead["attempts"] == 2


def test_a_workers_long_error_is_kept_to_2_kib_cut_on_a_character(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    # what a worker's nack may send (10,000 characters, here 30,000 bytes of UTF-8) is kept
    # to its first 2,048 bytes, less the character the cut would split
    call("POST", "/v1/queues/jobs/tasks", {"payload": "x"})
    [task] = claim(call, "jobs")
    error = "Traceback:" + "€" * 9_990
    reply = call("POST", "/v1/queues/jobs/nacks", {"nacks": [
        {"id": task["id"], "lease_token": task["lease_token"], "error": error}]})
    assert reply.status == 200 and reply.body["retried"] == [task["id"]], reply.body
    kept = "Traceback:" + "€" * 679  # 10 + 679 * 3 = 2,047 bytes: a 680th would pass 2,048
    [(stored, size)] = pg.execute(
        "SELECT last_error, octet_length(last_error) FROM tierq_tasks").fetchall()
    assert (stored, size) == (kept, 2047)
    assert call("GET", f"/v1/queues/jobs/tasks/{task['id']}").body["last_error"] == kept


def test_release_gives_back_without_counting_an_attempt(call: Invoke,
                                                       pg: psycopg.Connection[Any]) -> None:
    call("POST", "/v1/queues/jobs/tasks", {"tasks": [
        {"payload": "first", "max_attempts": 1}, {"payload": "second"}]})
    [task] = claim(call, "jobs")
    assert task["payload"] == "first"
    reply = call("POST", "/v1/queues/jobs/releases", {"releases": [
        {"id": task["id"], "lease_token": task["lease_token"]},
        {"id": task["id"], "lease_token": "_~forged~1~1"},
    ]})
    assert reply.status == 200
    assert reply.body == {"released": [task["id"]],
                          "rejected": [{"id": task["id"], "reason": "not_owner"}]}
    [again] = claim(call, "jobs")  # its old place: before "second"
    assert (again["id"], again["attempt"], again["redelivered"]) == (task["id"], 1, False)


def test_heartbeat_extends_and_rejects_a_wrong_token(call: Invoke) -> None:
    call("POST", "/v1/queues/jobs/tasks", {"payload": "x"})
    [task] = claim(call, "jobs", lease_seconds=30)
    reply = call("POST", "/v1/queues/jobs/heartbeats", {"leases": [
        {"id": task["id"], "lease_token": task["lease_token"], "extend_seconds": 600},
        {"id": task["id"], "lease_token": "_~forged~1"},
    ]})
    assert reply.status == 200
    [extended] = reply.body["extended"]
    assert extended["lease_expires_at"] > task["lease_expires_at"]
    assert reply.body["rejected"] == [{"id": task["id"], "reason": "not_owner"}]


def test_ack_with_a_wrong_token_is_rejected(call: Invoke, pg: psycopg.Connection[Any]) -> None:
    call("POST", "/v1/queues/jobs/tasks", {"payload": "x"})
    [task] = claim(call, "jobs")
    reply = call("POST", "/v1/queues/jobs/acks", {"acks": [
        {"id": task["id"], "lease_token": "_~0000~1"}]})
    assert reply.status == 200
    assert reply.body == {"acked": [], "rejected": [{"id": task["id"], "reason": "not_owner"}]}
    assert len(rows(pg, "jobs")) == 1


def test_ack_result_too_large_is_413_and_keeps_the_lease(call: Invoke,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_MAX_PAYLOAD_BYTES", "100")
    call("POST", "/v1/queues/jobs/tasks", {"payload": "x"})
    [task] = claim(call, "jobs")
    reply = call("POST", "/v1/queues/jobs/acks", {"acks": [
        {"id": task["id"], "lease_token": task["lease_token"], "result": "r" * 200}]})
    assert reply.status == 413
    assert reply.body["error"]["details"][0]["field"] == "acks[0].result"
    ok = call("POST", "/v1/queues/jobs/acks", {"acks": [
        {"id": task["id"], "lease_token": task["lease_token"], "result": "small"}]})
    assert ok.body["acked"] == [task["id"]]


# ----------------------------------------------------------------------- admin


def test_queue_settings_and_counts(call: Invoke) -> None:
    assert call("GET", "/v1/queues/jobs").status == 404
    reply = call("PUT", "/v1/queues/jobs", {
        "warm_max": 2, "lease_seconds": 60, "max_attempts": 3,
        "backoff": {"kind": "linear", "base_seconds": 1, "cap_seconds": 10, "jitter": 0},
        "retention_seconds": 3600, "paused": False,
    })
    assert reply.status == 200, reply.body
    assert reply.body["settings"]["warm_max"] == 2
    assert reply.body["settings"]["backoff"] == {"kind": "linear", "base_seconds": 1.0,
                                                 "cap_seconds": 10.0, "jitter": 0.0}
    call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": i} for i in range(3)]})
    call("POST", "/v1/queues/jobs/tasks", {"payload": "later", "delay_seconds": 600})
    view = call("GET", "/v1/queues/jobs").body
    assert view["queue"] == "jobs"
    assert view["counts"] == {"warm": 2, "waiting": 0, "held": 0, "cold": 1, "delayed": 1,
                              "leased": 0, "dead": 0}
    assert view["mode"] == "cold"
    listed = call("GET", "/v1/queues").body["queues"]
    assert [q["queue"] for q in listed] == ["jobs"]
    detailed = call("GET", "/v1/metrics/queues/detailed").body
    [row] = detailed["queues"]
    assert {k: row[k] for k in ("queue", "tenant", "warm", "cold", "delayed", "leased",
                                "dead")} == {"queue": "jobs", "tenant": "_", "warm": 2,
                                             "cold": 1, "delayed": 1, "leased": 0, "dead": 0}
    assert row["oldest_ready_at"] is not None
    assert "timestamp" in detailed


def test_put_queue_with_cap_below_base_is_422(call: Invoke, pg: psycopg.Connection[Any]) -> None:
    reply = call("PUT", "/v1/queues/jobs", {"backoff": {"kind": "fixed", "base_seconds": 10,
                                                        "cap_seconds": 1}})
    assert reply.status == 422
    assert reply.body["error"]["details"][0]["field"] == "backoff"
    assert "cap_seconds" in reply.body["error"]["message"]
    assert pg.execute("SELECT count(*) FROM tierq_queues").fetchone()[0] == 0


def test_task_status_cancel_and_running(call: Invoke) -> None:
    made = call("POST", "/v1/queues/jobs/tasks", {"payload": {"a": 1}, "key": "k"}).body
    [task] = claim(call, "jobs", worker="worker-7")
    status = call("GET", f"/v1/queues/jobs/tasks/{made['id']}").body
    assert status["state"] == "leased"
    assert status["worker"] == "worker-7"
    running = call("GET", "/v1/metrics/queues/running", query={"queue": "jobs"}).body["running"]
    assert [(r["id"], r["worker"]) for r in running] == [(made["id"], "worker-7")]
    cancelled = call("DELETE", f"/v1/queues/jobs/tasks/{made['id']}")
    assert cancelled.status == 200
    assert call("GET", f"/v1/queues/jobs/tasks/{made['id']}").status == 404
    late = call("POST", "/v1/queues/jobs/acks", {"acks": [
        {"id": task["id"], "lease_token": task["lease_token"]}]})
    assert late.body["acked"] == []
    assert [r["id"] for r in late.body["rejected"]] == [task["id"]]
    assert call("DELETE", f"/v1/queues/jobs/tasks/{made['id']}").status == 404


def dead_letters(call: Invoke, n: int, queue: str = "jobs", tenant: str | None = None,
                 claims: dict[str, str] | None = None) -> list[str]:
    tasks = [{"payload": i, "max_attempts": 1} | ({"tenant": tenant} if tenant else {})
             for i in range(n)]
    call("POST", f"/v1/queues/{queue}/tasks", {"tasks": tasks}, claims=claims)
    got = claim(call, queue, max=n, **({"tenant": tenant} if tenant else {}))
    reply = call("POST", f"/v1/queues/{queue}/nacks", {"nacks": [
        {"id": t["id"], "lease_token": t["lease_token"], "error": "e"} for t in got]})
    assert len(reply.body["dead"]) == n
    return [t["id"] for t in got]


def test_dlq_pages_replay_and_purge(call: Invoke) -> None:
    ids = dead_letters(call, 5)
    first = call("GET", "/v1/queues/jobs/dlq", query={"limit": "2"}).body
    assert len(first["tasks"]) == 2 and first["next_cursor"]
    second = call("GET", "/v1/queues/jobs/dlq",
                  query={"limit": "2", "after": first["next_cursor"]}).body
    third = call("GET", "/v1/queues/jobs/dlq",
                 query={"limit": "2", "after": second["next_cursor"]}).body
    seen = [t["id"] for page in (first, second, third) for t in page["tasks"]]
    assert sorted(seen) == sorted(ids) and len(set(seen)) == 5
    assert call("GET", "/v1/queues/jobs/dlq", query={"after": "garbage!"}).status == 422

    replay = call("POST", "/v1/queues/jobs/dlq/replay", {"ids": ids[:2]}).body
    assert sorted(replay["replayed"]) == sorted(ids[:2]) and replay["skipped"] == []
    again = call("POST", "/v1/queues/jobs/dlq/replay", {"ids": ids[:1]}).body
    assert again == {"replayed": [], "skipped": ids[:1], "more": False}
    purged = call("POST", "/v1/queues/jobs/dlq/purge", {"ids": ids[2:3]}).body
    assert purged == {"purged": ids[2:3], "more": False}
    rest = call("POST", "/v1/queues/jobs/dlq/purge").body  # no body: all of them
    assert sorted(rest["purged"]) == sorted(ids[3:])
    # the list it emptied is still there
    assert call("GET", "/v1/queues/jobs/dlq").body["tasks"] == []
    assert call("GET", "/v1/queues/jobs").body["counts"]["warm"] == 2


def test_replay_all(call: Invoke) -> None:
    ids = dead_letters(call, 3)
    reply = call("POST", "/v1/queues/jobs/dlq/replay", {"all": True}).body
    assert sorted(reply["replayed"]) == sorted(ids)
    assert call("POST", "/v1/queues/jobs/dlq/replay", {}).status == 422
    assert call("POST", "/v1/queues/jobs/dlq/replay", {"all": True, "ids": ids}).status == 422


def test_openapi_route_and_dashboard(call: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = call("GET", "/v1/openapi.json", content_type=None)
    assert spec.status == 200 and spec.body["openapi"].startswith("3.")
    page = call("GET", "/dashboard", content_type=None)
    if docs.dashboard_html:
        assert page.status == 200
        assert page.headers["content-type"].startswith("text/html")
    monkeypatch.setattr(docs, "DASHBOARD", ("dashboard", "missing.html"))
    missing = call("GET", "/dashboard", content_type=None)
    assert missing.status == 404
    assert "dashboard" in missing.body["error"]["message"]


# ----------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"tasks": [{"payload": 1}, {"payload": 2, "priority": 10}]}, 422, "tasks[1].priority"),
    ({"payload": 1, "priority": -1}, 422, "priority"),
    ({"payload": 1, "priority": True}, 422, "priority"),
    ({"payload": 1, "bogus": True}, 422, "bogus"),
    ({"priority": 1}, 422, "payload"),
    ({"tasks": []}, 422, "tasks"),
    ({"tasks": [{"payload": i} for i in range(501)]}, 422, "tasks"),
    ({"payload": 1, "tenant": "a|b"}, 422, "tenant"),
    ({"payload": 1, "key": "bad\nkey"}, 422, "key"),
    ({"payload": 1, "delay_seconds": 366 * 86400 + 1}, 422, "delay_seconds"),
    ({"payload": 1, "run_at": "2999-01-01T00:00:00Z"}, 422, "run_at"),
    ({"payload": 1, "run_at": "0001-01-01T00:00:00+05:00"}, 422, "run_at"),
    ({"payload": 1, "delay_seconds": 5, "run_at": "2030-01-01T00:00:00Z"}, 422, "body"),
    ({"payload": {"text": "nul \u0000 here"}}, 422, "payload.text"),
    ({"tasks": [{"payload": 1}, {"payload": [1, {"\u0000": 2}]}]}, 422, "tasks[1].payload[1]"),
    ({"payload": 1, "max_attempts": 0}, 422, "max_attempts"),
    ({"task": "\u0000", "payload": 1}, 422, "task"),
    ({"batch": {"x": 10**20}, "payload": 1}, 422, "batch.x"),
    ({"payload": 1, "on_conflict": "merge"}, 422, "on_conflict"),
    ([{"payload": 1}], 422, "body"),
    ([{"payload": 1}, {"payload": 2}], 422, "body"),
    ({"payload": {"n": [1, 2, 10**20]}}, 422, "payload.n[2]"),
    ("just a string", 422, "body"),
])
def test_bad_enqueue_is_4xx_naming_the_field_and_writes_nothing(
        call: Invoke, pg: psycopg.Connection[Any], valkey: redis.Redis,
        body: Any, status: int, field: str) -> None:
    reply = call("POST", "/v1/queues/jobs/tasks", body)
    assert reply.status == status, reply.body
    error = reply.body["error"]
    assert error["code"] == "invalid_input"
    assert field in [d["field"] for d in error["details"]], error
    assert nothing_written(pg, valkey, "jobs")


@pytest.mark.parametrize(("raw", "content_type", "base64_body", "status", "code"), [
    ("{not json", "application/json", False, 400, "malformed_request"),
    ('{"payload": NaN}', "application/json", False, 400, "malformed_request"),
    ('{"payload": "\\ud800"}', "application/json", False, 400, "malformed_request"),
    ("[" * 1100 + "]" * 1100, "application/json", False, 400, "malformed_request"),
    ('{"payload": 123456789012345678901234567890}', "application/json", False, 422,
     "invalid_input"),
    ('{"payload": 1}', "text/plain", False, 400, "malformed_request"),
    ("payload=1", "application/x-www-form-urlencoded", False, 400, "malformed_request"),
    ('{"payload": 1}', "multipart/form-data; boundary=x", False, 400, "malformed_request"),
    ("", "application/json", False, 422, "invalid_input"),
])
def test_unparseable_bodies(call: Invoke, pg: psycopg.Connection[Any], valkey: redis.Redis,
                            raw: str, content_type: str, base64_body: bool, status: int,
                            code: str) -> None:
    reply = call("POST", "/v1/queues/jobs/tasks", raw_body=raw, content_type=content_type,
                 base64_body=base64_body)
    assert reply.status == status, reply.body
    assert reply.body["error"]["code"] == code
    assert reply.body["error"]["message"]
    assert nothing_written(pg, valkey, "jobs")


def test_base64_body_that_is_not_utf8_is_400(lambda_env: None, api_event: Any,
                                             pg: psycopg.Connection[Any]) -> None:
    event = api_event("POST", "/v1/queues/jobs/tasks", raw_body="x", base64_body=True)
    event["body"] = "/w=="  # 0xff
    reply = reply_of(function_module("enqueue").lambda_handler(event, Context()))
    assert reply.status == 400
    assert rows(pg, "jobs") == []


def test_payload_over_256_kib_is_413(call: Invoke, pg: psycopg.Connection[Any],
                                     valkey: redis.Redis) -> None:
    big = "x" * (256 * 1024)
    reply = call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": 1}, {"payload": big}]})
    assert reply.status == 413
    assert reply.body["error"]["code"] == "payload_too_large"
    assert reply.body["error"]["details"][0]["field"] == "tasks[1].payload"
    single = call("POST", "/v1/queues/jobs/tasks", {"payload": big})
    assert single.status == 413
    assert single.body["error"]["details"][0]["field"] == "payload"
    assert nothing_written(pg, valkey, "jobs")


@pytest.mark.parametrize(("method", "path", "body", "field"), [
    ("POST", "/v1/queues/jobs/claims", {"max": 0}, "max"),
    ("POST", "/v1/queues/jobs/claims", {"max": 501}, "max"),
    ("POST", "/v1/queues/jobs/claims", {"wait_seconds": 21}, "wait_seconds"),
    ("POST", "/v1/queues/jobs/claims", {"lease_seconds": 10**30}, "lease_seconds"),
    ("POST", "/v1/queues/jobs/acks", {"acks": []}, "acks"),
    ("POST", "/v1/queues/jobs/acks", {"acks": [{"id": "nope", "lease_token": "t"}]},
     "acks[0].id"),
    ("POST", "/v1/queues/jobs/nacks", {"nacks": [{"id": str(uuid.uuid4()), "lease_token": "t",
                                                   "error": "\u0000"}]}, "nacks[0].error"),
    ("POST", "/v1/queues/jobs/heartbeats", {"leases": [{"id": str(uuid.uuid4())}]},
     "leases[0].lease_token"),
    ("POST", "/v1/queues/jobs/releases", {"releases": []}, "releases"),
    ("POST", "/v1/queues/jobs/releases", {"releases": [{"id": str(uuid.uuid4()),
                                                        "lease_token": ""}]},
     "releases[0].lease_token"),
    ("PUT", "/v1/queues/jobs", {"warm_max": 0}, "warm_max"),
    ("PUT", "/v1/queues/jobs", {"backoff": {"kind": "cubic"}}, "backoff.kind"),
    ("PUT", "/v1/queues/bad%7Cname", {}, "queue"),
    ("GET", "/v1/queues/jobs/tasks/not-a-uuid", None, "id"),
    ("GET", "/v1/queues/jobs/dlq?limit=0", None, "limit"),
    ("POST", "/v1/queues/jobs/dlq/replay", {"ids": ["x"]}, "ids[0]"),
    # booleans are JSON booleans, as the API document says
    ("POST", "/v1/queues/jobs/dlq/replay", {"all": "true"}, "all"),
    ("POST", "/v1/queues/jobs/dlq/purge", {"all": 1}, "all"),
    ("PUT", "/v1/queues/jobs", {"paused": "yes"}, "paused"),
    ("PUT", "/v1/queues/jobs", {"warm_max": True}, "warm_max"),  # nor are they numbers
    ("POST", "/v1/queues/jobs/claims", {"max": True}, "max"),
    ("POST", "/v1/queues/jobs/nacks", {"nacks": [{"id": str(uuid.uuid4()), "lease_token": "t",
                                                   "dead": "true"}]}, "nacks[0].dead"),
])
def test_bad_input_on_other_routes(call: Invoke, pg: psycopg.Connection[Any],
                                   method: str, path: str, body: Any, field: str) -> None:
    query = None
    if "?" in path:
        path, _, qs = path.partition("?")
        query = dict([qs.split("=")])
    reply = call(method, path, body, query=query)
    assert reply.status == 422, reply.body
    assert field in [d["field"] for d in reply.body["error"]["details"]], reply.body
    assert pg.execute("SELECT count(*) FROM tierq_queues").fetchone()[0] == 0


def test_run_at_counts_the_year_as_written(call: Invoke) -> None:
    """The document's pattern takes years from 1970 on, whatever the offset: an instant
    just before the epoch written in 1970 is a time in the past, due at once."""
    reply = call("POST", "/v1/queues/jobs/tasks",
                 {"payload": 1, "run_at": "1970-01-01T00:30:00+01:00"})
    assert reply.status == 200, reply.body
    assert reply.body["state"] in ("warm", "cold")
    refused = call("POST", "/v1/queues/jobs/tasks",
                   {"payload": 1, "run_at": "1969-12-31T23:59:59Z"})
    assert refused.status == 422
    assert refused.body["error"]["details"][0]["field"] == "run_at"


def test_claim_without_a_body_uses_defaults(call: Invoke) -> None:
    call("POST", "/v1/queues/jobs/tasks", {"payload": 1})
    reply = call("POST", "/v1/queues/jobs/claims", None)
    assert reply.status == 200 and len(reply.body["tasks"]) == 1


# ----------------------------------------------------------------------- tenant pinning


def test_tenant_pinning(call: Invoke, pg: psycopg.Connection[Any]) -> None:
    acme = {"tenant": "acme"}
    mine = call("POST", "/v1/queues/jobs/tasks", {"payload": "a"}, claims=acme)
    assert mine.status == 200 and mine.body["tenant"] == "acme"
    other = call("POST", "/v1/queues/jobs/tasks", {"payload": "b", "tenant": "globex"})
    assert other.body["tenant"] == "globex"

    forbidden = call("POST", "/v1/queues/jobs/tasks",
                     {"tasks": [{"payload": 1}, {"payload": 2, "tenant": "globex"}]}, claims=acme)
    assert forbidden.status == 403
    assert forbidden.body["error"]["code"] == "forbidden"
    assert forbidden.body["error"]["details"][0]["field"] == "tasks[1].tenant"
    assert len(rows(pg, "jobs")) == 2

    assert call("POST", "/v1/queues/jobs/claims", {"tenant": "globex"}, claims=acme).status == 403
    got = claim(call, "jobs", max=10) if False else call(
        "POST", "/v1/queues/jobs/claims", {"max": 10}, claims=acme).body["tasks"]
    assert [t["tenant"] for t in got] == ["acme"]

    assert call("GET", f"/v1/queues/jobs/tasks/{other.body['id']}", claims=acme).status == 404
    assert call("DELETE", f"/v1/queues/jobs/tasks/{other.body['id']}", claims=acme).status == 404
    assert call("GET", f"/v1/queues/jobs/tasks/{mine.body['id']}", claims=acme).status == 200
    assert call("GET", "/v1/queues/jobs/dlq", query={"tenant": "globex"},
                claims=acme).status == 403
    assert call("PUT", "/v1/queues/jobs", {"paused": True}, claims=acme).status == 403

    detailed = call("GET", "/v1/metrics/queues/detailed", claims=acme).body["queues"]
    assert {r["tenant"] for r in detailed} == {"acme"}
    view = call("GET", "/v1/queues/jobs", claims=acme).body
    assert view["tenant"] == "acme" and view["counts"]["leased"] == 1
    running = call("GET", "/v1/metrics/queues/running", claims=acme).body["running"]
    assert [r["tenant"] for r in running] == ["acme"]

    # a lease token of another tenant is never the pinned caller's
    [theirs] = claim(call, "jobs", tenant="globex")
    reply = call("POST", "/v1/queues/jobs/acks", {"acks": [
        {"id": theirs["id"], "lease_token": theirs["lease_token"]}]}, claims=acme)
    assert reply.body == {"acked": [], "rejected": [{"id": theirs["id"], "reason": "not_owner"}]}

    assert call("POST", "/v1/queues/jobs/tasks", {"payload": 1},
                claims={"tenant": "not|valid"}).status == 403


def test_pinned_dlq_touches_only_its_tenant(call: Invoke) -> None:
    acme = {"tenant": "acme"}
    mine = dead_letters(call, 2, tenant="acme")
    theirs = dead_letters(call, 2, tenant="globex")
    listed = call("GET", "/v1/queues/jobs/dlq", claims=acme).body["tasks"]
    assert sorted(t["id"] for t in listed) == sorted(mine)
    replay = call("POST", "/v1/queues/jobs/dlq/replay", {"ids": [mine[0], theirs[0]]},
                  claims=acme).body
    assert replay == {"replayed": [mine[0]], "skipped": [theirs[0]], "more": False}
    purged = call("POST", "/v1/queues/jobs/dlq/purge", claims=acme).body["purged"]
    assert purged == [mine[1]]
    everything = call("POST", "/v1/queues/jobs/dlq/replay", {"all": True}, claims=acme).body
    assert everything["replayed"] == []
    assert len(call("GET", "/v1/queues/jobs/dlq").body["tasks"]) == 2


def test_replay_passes_over_a_dead_letter_whose_key_a_held_task_holds(call: Invoke) -> None:
    """Acme's dead letter of key K while its task of K is held in its group: a replay naming
    it answers it skipped, acme's replay of all leaves it dead, and an admin's replay of the
    queue replays globex's dead letters (all three were a 500: the live-key index refused
    the batch, which held the older dead letter)."""
    acme = {"tenant": "acme"}
    call("POST", "/v1/queues/jobs/tasks", {"payload": "dies", "key": "K", "max_attempts": 1},
         claims=acme)
    [dying] = claim(call, "jobs", tenant="acme")
    call("POST", "/v1/queues/jobs/nacks", {"nacks": [
        {"id": dying["id"], "lease_token": dying["lease_token"], "error": "e"}]})
    made = call("POST", "/v1/queues/jobs/tasks", {"tasks": [
        {"payload": "head", "group": "g"}, {"payload": "again", "group": "g", "key": "K"}]},
        claims=acme).body["tasks"]
    assert [t["state"] for t in made] == ["warm", "held"]
    theirs = dead_letters(call, 2, tenant="globex")
    named = call("POST", "/v1/queues/jobs/dlq/replay", {"ids": [dying["id"]]}, claims=acme)
    assert (named.status, named.body) == (
        200, {"replayed": [], "skipped": [dying["id"]], "more": False})
    mine = call("POST", "/v1/queues/jobs/dlq/replay", {"all": True}, claims=acme)
    assert (mine.status, mine.body) == (200, {"replayed": [], "skipped": [], "more": False})
    everyone = call("POST", "/v1/queues/jobs/dlq/replay", {"all": True})
    assert everyone.status == 200, everyone.body
    assert sorted(everyone.body["replayed"]) == sorted(theirs)
    assert [t["id"] for t in call("GET", "/v1/queues/jobs/dlq").body["tasks"]] == [dying["id"]]


# ----------------------------------------------------------------------- stores down


def test_valkey_down_is_503_with_retry_after(call: Invoke, monkeypatch: pytest.MonkeyPatch,
                                             ) -> None:
    from tierq.aws.runtime import reset_engine
    from tierq.local.services.process import free_port

    assert call("POST", "/v1/queues/jobs/tasks", {"payload": 1}).status == 200
    monkeypatch.setenv("VALKEY_URL", f"redis://127.0.0.1:{free_port()}/0")
    reset_engine()
    started = time.monotonic()
    reply = call("POST", "/v1/queues/jobs/claims", {})
    assert reply.status == 503, reply.body
    assert reply.body["error"]["code"] == "unavailable"
    assert int(reply.headers["retry-after"]) > 0
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("payload", [None, 0, "", [], {}, False])
def test_any_json_payload_round_trips(call: Invoke, payload: Any) -> None:
    made = call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": payload}]})
    assert made.status == 200, made.body
    task_id = made.body["tasks"][0]["id"]
    assert call("GET", f"/v1/queues/jobs/tasks/{task_id}").body["payload"] == payload
    [task] = claim(call, "jobs")
    assert task["payload"] == payload
