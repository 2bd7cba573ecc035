"""The Idempotency-Key header on the POST routes, through the Lambda handlers over real
PostgreSQL and Valkey."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
import redis

from tests.handlers.support import ADMIN_CLAIMS, Invoke, task_count
from tierq.aws.http.access import subject_of
from tierq.aws.runtime import engine
from tierq.local.services.process import free_port
from tierq.logic import idempotency

TENANT_A = {"sub": "a", "tenant": "acme"}
TENANT_B = {"sub": "b", "tenant": "bolt"}


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


def records(pg: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return pg.execute("SELECT done, status, response FROM tierq_idempotency").fetchall()


# ----------------------------------------------------------------------- enqueue


def test_retried_keyless_enqueue_with_the_same_key_leaves_one_task(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    headers = key()
    first = call("POST", "/v1/queues/jobs/tasks", {"payload": {"n": 1}}, headers=headers)
    again = call("POST", "/v1/queues/jobs/tasks", {"payload": {"n": 1}}, headers=headers)
    assert first.status == again.status == 200
    assert again.body == first.body
    assert again.headers.get("idempotent-replayed") == "true"
    assert "idempotent-replayed" not in first.headers
    assert task_count(pg, "jobs") == 1
    # without a key the same request is a new task, as before
    call("POST", "/v1/queues/jobs/tasks", {"payload": {"n": 1}})
    assert task_count(pg, "jobs") == 2


def test_a_batch_replays_its_outcomes_in_order(call: Invoke, pg: psycopg.Connection[Any]) -> None:
    headers = key()
    body = {"tasks": [{"payload": i, "priority": i % 3} for i in range(20)]}
    first = call("POST", "/v1/queues/jobs/tasks", body, headers=headers)
    # key order and layout of the body do not make it another request
    reordered = {"tasks": [{"priority": i % 3, "payload": i} for i in range(20)]}
    again = call("POST", "/v1/queues/jobs/tasks", reordered, headers=headers)
    assert first.status == again.status == 200
    assert again.body == first.body
    assert task_count(pg, "jobs") == 20
    [(done, status, _)] = records(pg)
    assert done and status == 200


def test_a_keyed_batch_meeting_live_keys_replays_its_mixed_outcomes(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": "live", "key": "k1"},
                                                      {"payload": "live", "key": "k3"}]})
    headers = key()
    body = {"tasks": [{"payload": "a", "key": "k1"}, {"payload": "b", "key": "k2"},
                      {"payload": "c", "key": "k3", "on_conflict": "replace"},
                      {"payload": "d"}]}
    first = call("POST", "/v1/queues/jobs/tasks", body, headers=headers)
    assert [o["outcome"] for o in first.body["tasks"]] == \
        ["ignored", "created", "updated", "created"]
    again = call("POST", "/v1/queues/jobs/tasks", body, headers=headers)
    assert again.body == first.body
    assert task_count(pg, "jobs") == 4


def test_same_key_with_another_body_is_409_and_writes_nothing(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    headers = key()
    assert call("POST", "/v1/queues/jobs/tasks", {"payload": 1}, headers=headers).status == 200
    other = call("POST", "/v1/queues/jobs/tasks", {"payload": 2}, headers=headers)
    assert other.status == 409
    assert other.body["error"]["code"] == "idempotency_key_reused"
    assert other.body["error"]["details"][0]["field"] == "Idempotency-Key"
    assert task_count(pg, "jobs") == 1


def test_the_key_is_scoped_by_caller_route_and_queue(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    headers = key()
    body = {"payload": "same"}
    a = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=TENANT_A)
    b = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=TENANT_B)
    admin = call("POST", "/v1/queues/jobs/tasks", body, headers=headers)
    other_queue = call("POST", "/v1/queues/mails/tasks", body, headers=headers,
                       claims=TENANT_A)
    assert {a.status, b.status, admin.status, other_queue.status} == {200}
    # tenant B does not get tenant A's answer (nor its task id): each made its own task
    assert a.body["tenant"] == "acme" and b.body["tenant"] == "bolt"
    assert len({a.body["id"], b.body["id"], admin.body["id"], other_queue.body["id"]}) == 4
    assert "idempotent-replayed" not in b.headers
    assert task_count(pg, "jobs") == 3 and task_count(pg, "mails") == 1
    # and each caller's own retry replays its own answer
    again = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=TENANT_B)
    assert again.body == b.body and again.headers.get("idempotent-replayed") == "true"


def test_invalid_keys_are_refused_naming_the_header(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    for bad in ("x" * 256, "has space", "naïve"):
        reply = call("POST", "/v1/queues/jobs/tasks", {"payload": 1},
                     headers={"Idempotency-Key": bad})
        assert reply.status == 422, bad
        assert reply.body["error"]["details"][0]["field"].lower() == "idempotency-key"
    assert task_count(pg, "jobs") == 0


def test_concurrent_requests_with_one_key_one_runs_the_other_is_409(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    """Two requests with the same key at the same time: while the first is inside its insert
    (held there by a lock on the table that the test releases), the second is 409."""
    headers = key()
    body = {"tasks": [{"payload": i} for i in range(10)]}
    replies: list[Any] = []
    with psycopg.connect(pg.info.dsn, password=pg.info.password, autocommit=True) as blocker:
        with blocker.transaction():
            blocker.execute("LOCK TABLE tierq_tasks IN EXCLUSIVE MODE")
            first = threading.Thread(target=lambda: replies.append(
                call("POST", "/v1/queues/jobs/tasks", body, headers=headers)))
            first.start()
            deadline = time.monotonic() + 30
            while not records(pg) and time.monotonic() < deadline:
                time.sleep(0.02)  # the first request has claimed the key
            second = call("POST", "/v1/queues/jobs/tasks", body, headers=headers)
        first.join(30)
    assert second.status == 409
    assert second.body["error"]["code"] == "idempotency_in_progress"
    [done] = replies
    assert done.status == 200
    third = call("POST", "/v1/queues/jobs/tasks", body, headers=headers)
    assert third.status == 200 and third.body == done.body
    assert task_count(pg, "jobs") == 10


def test_a_503_is_not_kept_and_the_retry_runs(
        call: Invoke, pg: psycopg.Connection[Any], valkey: redis.Redis) -> None:
    """Valkey stops answering (its client points at a closed port) while an enqueue admits
    its tasks: 503, nothing kept; the retry with the same key then runs and creates the task."""
    headers = key()
    call("PUT", "/v1/queues/jobs", {})  # the queue exists: its first task goes warm
    warm = engine().warm
    working = warm.client.connection_pool.connection_kwargs["port"]
    warm.client.connection_pool.disconnect()
    warm.client.connection_pool.connection_kwargs["port"] = free_port()
    if warm.calls is not None:
        warm.calls.close()
        warm.calls.client.connection_pool.connection_kwargs["port"] = \
            warm.client.connection_pool.connection_kwargs["port"]
    try:
        engine().ctx.modes.clear()
        failed = call("POST", "/v1/queues/jobs/tasks", {"payload": 1}, headers=headers)
    finally:
        warm.client.connection_pool.connection_kwargs["port"] = working
        warm.client.connection_pool.disconnect()
        if warm.calls is not None:
            warm.calls.client.connection_pool.connection_kwargs["port"] = working
            warm.calls.close()
    assert failed.status == 503, failed.body
    assert records(pg) == []
    retried = call("POST", "/v1/queues/jobs/tasks", {"payload": 1}, headers=headers)
    assert retried.status == 200, retried.body
    assert "idempotent-replayed" not in retried.headers
    assert task_count(pg, "jobs") == 1


# ----------------------------------------------------------------------- leases


def _claimed(call: Invoke, n: int = 2) -> list[dict[str, Any]]:
    call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": i} for i in range(n)]})
    reply = call("POST", "/v1/queues/jobs/claims", {"max": n})
    assert reply.status == 200
    return reply.body["tasks"]


def test_ack_retry_with_the_key_gets_the_first_answer(
        call: Invoke, pg: psycopg.Connection[Any], valkey: redis.Redis) -> None:
    tasks = _claimed(call)
    body = {"acks": [{"id": t["id"], "lease_token": t["lease_token"]} for t in tasks]}
    headers = key()
    first = call("POST", "/v1/queues/jobs/acks", body, headers=headers)
    again = call("POST", "/v1/queues/jobs/acks", body, headers=headers)
    assert first.status == again.status == 200
    assert sorted(first.body["acked"]) == sorted(t["id"] for t in tasks)
    assert again.body == first.body  # not "rejected": the first answer
    assert again.headers.get("idempotent-replayed") == "true"
    # without the key, a repeat finds the leases settled
    plain = call("POST", "/v1/queues/jobs/acks", body)
    assert plain.body["acked"] == [] and len(plain.body["rejected"]) == 2
    # the record lives in Valkey, with a time to live
    [stored] = list(valkey.scan_iter("tq:idem:*"))
    assert 0 < valkey.ttl(stored) <= 300
    other = call("POST", "/v1/queues/jobs/acks", {"acks": body["acks"][:1]}, headers=headers)
    assert other.status == 409


def test_nack_release_heartbeat_replay_with_their_keys(call: Invoke,
                                                       pg: psycopg.Connection[Any]) -> None:
    first_task, second_task = _claimed(call)
    lease = {"id": first_task["id"], "lease_token": first_task["lease_token"]}
    heartbeat_key = key()
    beat = call("POST", "/v1/queues/jobs/heartbeats", {"leases": [lease]}, headers=heartbeat_key)
    beat_again = call("POST", "/v1/queues/jobs/heartbeats", {"leases": [lease]},
                      headers=heartbeat_key)
    assert beat.status == 200 and beat_again.body == beat.body
    assert beat_again.headers.get("idempotent-replayed") == "true"

    nack_key = key()
    nack = {"nacks": [{**lease, "error": "boom"}]}
    failed = call("POST", "/v1/queues/jobs/nacks", nack, headers=nack_key)
    failed_again = call("POST", "/v1/queues/jobs/nacks", nack, headers=nack_key)
    assert len(failed.body["retried"]) == 1 and failed_again.body == failed.body
    attempts = pg.execute("SELECT attempts FROM tierq_tasks WHERE id = %s",
                          (first_task["id"],)).fetchone()
    assert attempts == (1,)  # counted once

    release_key = key()
    release = {"releases": [{"id": second_task["id"],
                             "lease_token": second_task["lease_token"]}]}
    given = call("POST", "/v1/queues/jobs/releases", release, headers=release_key)
    given_again = call("POST", "/v1/queues/jobs/releases", release, headers=release_key)
    assert len(given.body["released"]) == 1 and given_again.body == given.body
    # the same key on another route is another record
    other_route = call("POST", "/v1/queues/jobs/nacks", {"nacks": [{
        "id": second_task["id"], "lease_token": second_task["lease_token"], "error": "x"}]},
        headers=release_key)
    assert other_route.status == 200 and "idempotent-replayed" not in other_route.headers


def test_lease_route_in_progress_is_409(call: Invoke, valkey: redis.Redis) -> None:
    """A record left in progress (its request still running) answers a repeat with 409."""
    [task] = _claimed(call, 1)
    body = {"acks": [{"id": task["id"], "lease_token": task["lease_token"]}]}
    headers = key()
    scope = idempotency.scope_key("admin", "ack", "jobs", headers["Idempotency-Key"],
                                  subject=subject_of(ADMIN_CLAIMS))
    reply = call("POST", "/v1/queues/jobs/acks", body, headers=headers)
    assert reply.status == 200
    stored = idempotency.valkey_key(scope)
    valkey.hdel(stored, "s", "b")  # as it was while the first request ran
    busy = call("POST", "/v1/queues/jobs/acks", body, headers=headers)
    assert busy.status == 409 and busy.body["error"]["code"] == "idempotency_in_progress"


@pytest.mark.parametrize("route", ["tasks", "dlq/replay", "acks", "nacks", "releases",
                                   "heartbeats"])
def test_post_routes_document_the_header_and_409(route: str) -> None:
    from tierq.aws.http.resolver import openapi_document
    operation = openapi_document()["paths"]["/v1/queues/{queue}/" + route]["post"]
    assert any(p["name"].lower() == "idempotency-key" and p["in"] == "header"
               for p in operation["parameters"])
    assert "409" in operation["responses"]


def test_a_full_all_slice_fits_a_lambda_response() -> None:
    """The most one "all" request answers: SLICE_MAX_ITEMS ids, as the python3.11 runtime
    would even escape them."""
    import orjson

    from tierq.aws.http.models import MAX_IDS
    from tierq.core.sizing import LAMBDA_PAYLOAD_LIMIT, runtime_encoded_size
    from tierq.logic import dlq
    from tierq.models.envelopes import ReplayResult
    ids = [uuid.uuid4() for _ in range(dlq.SLICE_MAX_ITEMS)]
    body = ReplayResult(replayed=ids, skipped=ids[:MAX_IDS], more=True)
    response = {"statusCode": 200, "headers": {"Content-Type": "application/json"},
                "body": orjson.dumps(body.model_dump(mode="json")).decode(),
                "isBase64Encoded": False, "cookies": []}
    assert runtime_encoded_size(response, ascii_escapes=True) < LAMBDA_PAYLOAD_LIMIT // 10


# ----------------------------------------------------------------------- dead letters


def _dead(call: Invoke, n: int, claims: dict[str, str] | None = None) -> list[str]:
    call("POST", "/v1/queues/jobs/tasks",
         {"tasks": [{"payload": i, "max_attempts": 1} for i in range(n)]}, claims=claims)
    ids: list[str] = []
    while True:
        got = call("POST", "/v1/queues/jobs/claims", {"max": 100}, claims=claims).body["tasks"]
        if not got:
            return ids
        call("POST", "/v1/queues/jobs/nacks", {"nacks": [
            {"id": t["id"], "lease_token": t["lease_token"], "error": "x"} for t in got]},
            claims=claims)
        ids.extend(t["id"] for t in got)


def _state_count(pg: psycopg.Connection[Any], state: str) -> int:
    return task_count(pg, state=state)


def test_dlq_replay_with_a_key_replays_once(call: Invoke, pg: psycopg.Connection[Any]) -> None:
    dead = _dead(call, 3)
    headers = key()
    first = call("POST", "/v1/queues/jobs/dlq/replay", {"ids": dead}, headers=headers)
    assert first.status == 200 and sorted(first.body["replayed"]) == sorted(dead)
    assert first.body["more"] is False
    # the tasks die again; a retry of the first replay must not bring them back
    assert len(_dead(call, 0)) == 3
    again = call("POST", "/v1/queues/jobs/dlq/replay", {"ids": dead}, headers=headers)
    assert again.body == first.body and again.headers.get("idempotent-replayed") == "true"
    assert _state_count(pg, "dead") == 3
    [(done, status, _)] = records(pg)
    assert done and status == 200


def test_dlq_replay_and_purge_all_answer_in_slices_with_more(
        call: Invoke, pg: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from tierq.logic import dlq
    monkeypatch.setattr(dlq, "SLICE_MAX_ITEMS", 4)
    monkeypatch.setattr(dlq, "REPLAY_BATCH", 4)
    monkeypatch.setattr(dlq, "PURGE_BATCH", 4)
    dead = _dead(call, 10)
    replayed: list[str] = []
    answers = []
    while True:
        reply = call("POST", "/v1/queues/jobs/dlq/replay", {"all": True}, headers=key())
        assert reply.status == 200
        answers.append(reply.body["more"])
        replayed.extend(reply.body["replayed"])
        if not reply.body["more"]:
            break
    assert answers == [True, True, False]
    assert sorted(replayed) == sorted(dead)
    _dead(call, 0)
    purged: list[str] = []
    rounds = 0
    while True:
        reply = call("POST", "/v1/queues/jobs/dlq/purge")  # no body: all
        assert reply.status == 200
        purged.extend(reply.body["purged"])
        rounds += 1
        if not reply.body["more"]:
            break
    assert rounds == 3 and sorted(purged) == sorted(dead)
    assert _state_count(pg, "dead") == 0


def test_dlq_all_of_a_pinned_caller_touches_only_its_tenant(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    mine = _dead(call, 2, claims=TENANT_A)
    theirs = _dead(call, 2, claims=TENANT_B)
    replay = call("POST", "/v1/queues/jobs/dlq/replay", {"all": True}, claims=TENANT_A)
    assert sorted(replay.body["replayed"]) == sorted(mine)
    refused = call("POST", "/v1/queues/jobs/dlq/replay", {"ids": theirs}, claims=TENANT_A)
    assert refused.body["replayed"] == [] and sorted(refused.body["skipped"]) == sorted(theirs)
    purge = call("POST", "/v1/queues/jobs/dlq/purge", {"ids": theirs}, claims=TENANT_A)
    assert purge.body["purged"] == []
    assert _state_count(pg, "dead") == 2


# ----------------------------------------------------------------------- callers of one tenant

# Two services of one tenant, two admins: keys are theirs alone. A token without sub falls
# back on client_id; with neither, a token shares the keys of its tenant (or of the admins).
SERVICE_1 = {"sub": "svc-1", "tenant": "acme"}
SERVICE_2 = {"sub": "svc-2", "tenant": "acme"}
ADMIN_1 = {"sub": "ops-1", "scope": "tierq/admin"}
ADMIN_2 = {"sub": "ops-2", "scope": "tierq/admin"}
NO_SUBJECT = {"tenant": "acme"}


def test_two_subjects_of_one_tenant_with_one_key_each_get_their_own_enqueue(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    headers = key()
    body = {"payload": "same"}
    first = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=SERVICE_1)
    second = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=SERVICE_2)
    assert first.status == second.status == 200
    assert "idempotent-replayed" not in second.headers
    assert first.body["id"] != second.body["id"]
    assert task_count(pg, "jobs") == 2
    # each one's retry is its own replay
    for claims, answer in ((SERVICE_1, first), (SERVICE_2, second)):
        again = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=claims)
        assert again.body == answer.body and again.headers.get("idempotent-replayed") == "true"
    # and another body under the key is refused for that subject alone
    other = call("POST", "/v1/queues/jobs/tasks", {"payload": "other"}, headers=headers,
                 claims=SERVICE_2)
    assert other.status == 409 and other.body["error"]["code"] == "idempotency_key_reused"
    assert task_count(pg, "jobs") == 2


def test_admins_keys_are_each_admins_own(call: Invoke, pg: psycopg.Connection[Any]) -> None:
    headers = key()
    body = {"payload": "same", "tenant": "acme"}
    first = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=ADMIN_1)
    second = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=ADMIN_2)
    assert first.status == second.status == 200
    assert first.body["id"] != second.body["id"]
    again = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=ADMIN_1)
    assert again.body == first.body and again.headers.get("idempotent-replayed") == "true"
    assert task_count(pg, "jobs") == 2


def test_client_id_is_the_subject_of_a_token_without_sub_and_never_an_equal_sub(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    """A token's subject is its sub, else its client_id, tagged with the claim's name: a
    Cognito client-credentials token (sub equal to client_id) is always its sub, and a token
    of another issuer with the same value as its client_id alone is another caller; two such
    tokens are one caller, another client id another."""
    body = {"payload": "same"}
    cognito = {"sub": "app-1", "client_id": "app-1", "tenant": "acme"}
    same_sub = {"sub": "app-1", "tenant": "acme"}
    bare = {"client_id": "app-1", "tenant": "acme"}
    other_app = {"client_id": "app-2", "tenant": "acme"}
    headers = key()
    replies = {name: call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=claims)
               for name, claims in (("cognito", cognito), ("same_sub", same_sub),
                                    ("bare", bare), ("bare_again", bare),
                                    ("other_app", other_app))}
    assert {r.status for r in replies.values()} == {200}
    assert replies["same_sub"].headers.get("idempotent-replayed") == "true"
    assert replies["same_sub"].body == replies["cognito"].body
    assert "idempotent-replayed" not in replies["bare"].headers
    assert replies["bare"].body["id"] != replies["cognito"].body["id"]
    assert replies["bare_again"].body == replies["bare"].body
    assert replies["other_app"].body["id"] not in {replies["cognito"].body["id"],
                                                   replies["bare"].body["id"]}
    assert task_count(pg, "jobs") == 3


def test_two_issuers_tokens_with_one_sub_are_two_callers(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    """The subject includes the token's issuer: tokens of two identity providers that name
    the same ``sub`` (or ``client_id``) each get their own enqueue under one key, a token of
    the same issuer replays, and a token without ``iss`` is a caller of its own. An issuer
    and a value that hold ``|`` do not read as another pair."""
    body = {"payload": "same"}
    headers = key()
    one = {"iss": "https://idp-one.example", "sub": "svc", "tenant": "acme"}
    two = {"iss": "https://idp-two.example", "sub": "svc", "tenant": "acme"}
    bare = {"sub": "svc", "tenant": "acme"}
    # ("a|sub:b", "c") against ("a", "b|sub:c"): one string joined naively, two callers here
    piped = {"iss": "a|sub:b", "sub": "c", "tenant": "acme"}
    split = {"iss": "a", "sub": "b|sub:c", "tenant": "acme"}
    replies = {name: call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=claims)
               for name, claims in (("one", one), ("two", two), ("bare", bare),
                                    ("piped", piped), ("split", split))}
    assert {r.status for r in replies.values()} == {200}
    assert not any("idempotent-replayed" in r.headers for r in replies.values())
    assert len({r.body["id"] for r in replies.values()}) == 5
    again = call("POST", "/v1/queues/jobs/tasks", body, headers=headers,
                 claims={**one, "email": "other@example.com"})
    assert again.body == replies["one"].body
    assert again.headers.get("idempotent-replayed") == "true"
    # another body under the key is refused for that issuer's subject alone
    other = call("POST", "/v1/queues/jobs/tasks", {"payload": "other"}, headers=headers,
                 claims=two)
    assert other.status == 409 and other.body["error"]["code"] == "idempotency_key_reused"
    assert task_count(pg, "jobs") == 5


def test_a_sub_that_is_a_lone_surrogate_has_a_scope_of_its_own(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    """JSON can carry a lone surrogate (``"\\ud800"``), which UTF-8 cannot encode: such a
    subject is a scope like any other, not a 500."""
    body = {"payload": "same"}
    headers = key()
    odd = {"sub": "\ud800", "tenant": "acme"}
    first = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=odd)
    assert first.status == 200, first.body
    again = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=odd)
    assert again.body == first.body and again.headers.get("idempotent-replayed") == "true"
    other = call("POST", "/v1/queues/jobs/tasks", body, headers=headers,
                 claims={"sub": "\udc00", "tenant": "acme"})
    assert other.status == 200 and other.body["id"] != first.body["id"]
    assert task_count(pg, "jobs") == 2


def test_tokens_with_neither_sub_nor_client_id_share_their_tenants_keys(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    headers = key()
    body = {"payload": "same"}
    first = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=NO_SUBJECT)
    shared = call("POST", "/v1/queues/jobs/tasks", body, headers=headers,
                  claims={"tenant": "acme", "email": "someone@example.com"})
    assert shared.body == first.body and shared.headers.get("idempotent-replayed") == "true"
    # ...and not with a token of the tenant that names its subject, nor another tenant's
    mine = call("POST", "/v1/queues/jobs/tasks", body, headers=headers, claims=SERVICE_1)
    theirs = call("POST", "/v1/queues/jobs/tasks", body, headers=headers,
                  claims={"tenant": "bolt"})
    assert "idempotent-replayed" not in mine.headers
    assert "idempotent-replayed" not in theirs.headers
    assert task_count(pg, "jobs") == 3


def _own_lease(call: Invoke, claims: dict[str, str]) -> dict[str, str]:
    assert call("POST", "/v1/queues/jobs/tasks", {"payload": claims["sub"]},
                claims=claims).status == 200
    [task] = call("POST", "/v1/queues/jobs/claims", {"max": 1}, claims=claims).body["tasks"]
    return {"id": task["id"], "lease_token": task["lease_token"]}


@pytest.mark.parametrize(("route", "field", "extra", "answer"), [
    ("acks", "acks", {}, "acked"),
    ("nacks", "nacks", {"error": "boom"}, "retried"),
    ("releases", "releases", {}, "released"),
    ("heartbeats", "leases", {}, "extended"),
])
def test_two_subjects_settling_their_own_leases_under_one_key_each_run(
        call: Invoke, route: str, field: str, extra: dict[str, str], answer: str) -> None:
    """Each service settles its own lease under the same key: neither gets the other's
    answer, nor a 409 for a body it never sent."""
    headers = key()
    outcomes = []
    for claims in (SERVICE_1, SERVICE_2):
        lease = _own_lease(call, claims)
        reply = call("POST", f"/v1/queues/jobs/{route}", {field: [{**lease, **extra}]},
                     headers=headers, claims=claims)
        assert reply.status == 200, reply.body
        assert "idempotent-replayed" not in reply.headers
        done = reply.body[answer]
        assert [d if isinstance(d, str) else d["id"] for d in done] == [lease["id"]]
        outcomes.append((claims, lease, reply))
    for claims, lease, reply in outcomes:  # each retry replays its own answer
        again = call("POST", f"/v1/queues/jobs/{route}", {field: [{**lease, **extra}]},
                     headers=headers, claims=claims)
        assert again.body == reply.body and again.headers.get("idempotent-replayed") == "true"


def test_two_subjects_replaying_their_dead_letters_under_one_key_each_run(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    mine = _dead(call, 1, claims=SERVICE_1)
    # a second batch of the same tenant, dead too, for the other service to replay
    more = [i for i in _dead(call, 2, claims=SERVICE_2) if i not in mine]
    assert len(more) == 2
    headers = key()
    first = call("POST", "/v1/queues/jobs/dlq/replay", {"ids": mine}, headers=headers,
                 claims=SERVICE_1)
    second = call("POST", "/v1/queues/jobs/dlq/replay", {"ids": more}, headers=headers,
                  claims=SERVICE_2)
    assert first.status == second.status == 200, second.body
    assert first.body["replayed"] == mine
    assert sorted(second.body["replayed"]) == sorted(more)
    again = call("POST", "/v1/queues/jobs/dlq/replay", {"ids": mine}, headers=headers,
                 claims=SERVICE_1)
    assert again.body == first.body and again.headers.get("idempotent-replayed") == "true"
