"""The Idempotency-Key on claims, through the Lambda handler over real PostgreSQL and Valkey:
a repeat answers the first claim's tasks still leased with its tokens, rebuilt from the task
rows, and leases nothing more."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import psycopg
import redis

from tests.handlers.support import ADMIN_CLAIMS, Invoke
from tierq.aws.http.access import subject_of
from tierq.core.sizing import LAMBDA_PAYLOAD_LIMIT, body_cost, runtime_encoded_size
from tierq.dal.warm_tier import PairKeys
from tierq.logic import idempotency

CLAIMS = "/v1/queues/jobs/claims"
TENANT_A = {"sub": "a", "tenant": "acme"}
TENANT_B = {"sub": "b", "tenant": "bolt"}


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


def enqueue(call: Invoke, tasks: list[dict[str, Any]], **kwargs: Any) -> list[str]:
    reply = call("POST", "/v1/queues/jobs/tasks", {"tasks": tasks}, **kwargs)
    assert reply.status == 200, reply.body
    return [o["id"] for o in reply.body["tasks"]]


def leased_members(valkey: redis.Redis, tenant: str = "_") -> set[str]:
    return {m.decode() for m in valkey.zrange(PairKeys.of("jobs", tenant).leased, 0, -1)}


def ready_count(valkey: redis.Redis, tenant: str = "_") -> int:
    return int(valkey.zcard(PairKeys.of("jobs", tenant).ready))


def members_of(tasks: list[dict[str, Any]]) -> set[str]:
    return {f"{t['id']}|{t['lease_token']}" for t in tasks}


def test_a_claim_retried_with_its_key_gets_the_same_tasks_and_leases_nothing_more(
        call: Invoke, valkey: redis.Redis) -> None:
    enqueue(call, [{"payload": {"n": i, "nested": {"b": 1, "a": [i, "x"]}}, "key": f"k{i}",
                    "priority": i % 3} for i in range(5)])
    headers = key()
    first = call("POST", CLAIMS, {"max": 3, "lease_seconds": 60}, headers=headers)
    assert first.status == 200 and len(first.body["tasks"]) == 3
    assert "idempotent-replayed" not in first.headers
    leased = leased_members(valkey)
    assert leased == members_of(first.body["tasks"]) and ready_count(valkey) == 2

    again = call("POST", CLAIMS, {"lease_seconds": 60, "max": 3}, headers=headers)
    assert again.status == 200
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.body == first.body  # same tasks, tokens, deadlines, payloads, in order
    assert leased_members(valkey) == leased and ready_count(valkey) == 2

    # the record is small and lives no longer than the lease
    [stored] = list(valkey.scan_iter("tq:idem:*"))
    assert 0 < valkey.ttl(stored) <= 60
    assert len(valkey.hget(stored, "b") or b"") < 1000

    # a claim without the key (or with another) takes the rest
    rest = call("POST", CLAIMS, {"max": 10}, headers=key())
    assert len(rest.body["tasks"]) == 2
    assert not members_of(rest.body["tasks"]) & leased


def test_a_retry_after_an_ack_answers_only_the_tasks_still_leased(
        call: Invoke, valkey: redis.Redis) -> None:
    enqueue(call, [{"payload": i} for i in range(3)])
    headers = key()
    first = call("POST", CLAIMS, {"max": 3}, headers=headers)
    done, extended, kept = first.body["tasks"]
    acked = call("POST", "/v1/queues/jobs/acks",
                 {"acks": [{"id": done["id"], "lease_token": done["lease_token"]}]})
    assert acked.body["acked"] == [done["id"]]
    beat = call("POST", "/v1/queues/jobs/heartbeats", {"leases": [{
        "id": extended["id"], "lease_token": extended["lease_token"], "extend_seconds": 600}]})
    [new_deadline] = beat.body["extended"]

    again = call("POST", CLAIMS, {"max": 3}, headers=headers)
    assert again.status == 200
    assert [t["id"] for t in again.body["tasks"]] == [extended["id"], kept["id"]]
    replayed_extended, replayed_kept = again.body["tasks"]
    assert replayed_kept == kept
    # the deadline that holds now: a heartbeat's extension shows, the rest is as first given
    assert replayed_extended == {**extended,
                                 "lease_expires_at": new_deadline["lease_expires_at"]}
    assert leased_members(valkey) == members_of([extended, kept])
    assert body_cost(orjson.dumps(again.body)) <= body_cost(orjson.dumps(first.body))

    # once the leases are gone (released), the repeat answers nothing and leases nothing
    call("POST", "/v1/queues/jobs/releases", {"releases": [
        {"id": t["id"], "lease_token": t["lease_token"]} for t in (extended, kept)]})
    empty = call("POST", CLAIMS, {"max": 3}, headers=headers)
    assert empty.status == 200 and empty.body == {"tasks": []}
    assert leased_members(valkey) == set() and ready_count(valkey) == 2


def test_an_expired_lease_is_left_out(call: Invoke, valkey: redis.Redis) -> None:
    enqueue(call, [{"payload": i} for i in range(2)])
    headers = key()
    first = call("POST", CLAIMS, {"max": 2}, headers=headers)
    lapsed, held = first.body["tasks"]
    # the first lease runs out (its deadline in the past, as the reaper would find it)
    valkey.zadd(PairKeys.of("jobs", "_").leased,
                {f"{lapsed['id']}|{lapsed['lease_token']}": 1})
    again = call("POST", CLAIMS, {"max": 2}, headers=headers)
    assert again.body["tasks"] == [held]


def test_the_same_key_with_another_body_is_409_and_leases_nothing(
        call: Invoke, valkey: redis.Redis) -> None:
    enqueue(call, [{"payload": i} for i in range(4)])
    headers = key()
    first = call("POST", CLAIMS, {"max": 2}, headers=headers)
    other = call("POST", CLAIMS, {"max": 3}, headers=headers)
    assert other.status == 409
    assert other.body["error"]["code"] == "idempotency_key_reused"
    assert leased_members(valkey) == members_of(first.body["tasks"])
    assert ready_count(valkey) == 2


def test_a_claim_still_running_is_409(call: Invoke, valkey: redis.Redis) -> None:
    enqueue(call, [{"payload": 1}])
    headers = key()
    assert call("POST", CLAIMS, {"max": 1}, headers=headers).status == 200
    scope = idempotency.scope_key("admin", "claim", "jobs", headers["Idempotency-Key"],
                                  subject=subject_of(ADMIN_CLAIMS))
    valkey.hdel(idempotency.valkey_key(scope), "s", "b")  # as while the first one ran
    busy = call("POST", CLAIMS, {"max": 1}, headers=headers)
    assert busy.status == 409 and busy.body["error"]["code"] == "idempotency_in_progress"


def test_an_empty_answer_is_replayed_as_empty(call: Invoke, valkey: redis.Redis) -> None:
    """Nothing was ready: the repeat answers nothing (as the first did) rather than leasing
    what arrived since, which its caller might never learn of."""
    headers = key()
    first = call("POST", CLAIMS, {"max": 5, "lease_seconds": 30}, headers=headers)
    assert first.status == 200 and first.body == {"tasks": []}
    [stored] = list(valkey.scan_iter("tq:idem:*"))
    assert 0 < valkey.ttl(stored) <= 30
    enqueue(call, [{"payload": 1}])
    again = call("POST", CLAIMS, {"max": 5, "lease_seconds": 30}, headers=headers)
    assert again.body == {"tasks": []} and again.headers.get("idempotent-replayed") == "true"
    assert leased_members(valkey) == set() and ready_count(valkey) == 1


def test_an_empty_answers_record_lives_no_longer_than_other_keyed_calls(
        call: Invoke, valkey: redis.Redis) -> None:
    """A record of no leases is charged to no tenant's warm share: the lease asked for (up
    to 12 hours) never keeps it past TIERQ_IDEMPOTENCY_VALKEY_TTL_SECONDS (300 s)."""
    first = call("POST", CLAIMS, {"max": 5, "lease_seconds": 43_200}, headers=key())
    assert first.status == 200 and first.body == {"tasks": []}
    [stored] = list(valkey.scan_iter("tq:idem:*"))
    assert 250 < valkey.ttl(stored) <= 300


def test_a_task_replaced_while_leased_is_given_back_not_replayed_changed(
        call: Invoke, valkey: redis.Redis, pg: psycopg.Connection[Any]) -> None:
    enqueue(call, [{"payload": "old", "key": "k1"}, {"payload": "same", "key": "k2"}])
    headers = key()
    first = call("POST", CLAIMS, {"max": 2}, headers=headers)
    replaced, same = first.body["tasks"]
    enqueue(call, [{"payload": "new", "key": "k1", "on_conflict": "replace"}])
    again = call("POST", CLAIMS, {"max": 2}, headers=headers)
    assert again.body["tasks"] == [same]
    # not stranded: back in line at once, no attempt counted, with its new content
    assert leased_members(valkey) == members_of([same])
    assert pg.execute("SELECT attempts FROM tierq_tasks WHERE id = %s",
                      (replaced["id"],)).fetchone() == (0,)
    [fresh] = call("POST", CLAIMS, {"max": 2}).body["tasks"]
    assert fresh["id"] == replaced["id"] and fresh["payload"] == "new"


def test_a_claim_across_tenants_replays_each_tenants_tasks(
        call: Invoke, valkey: redis.Redis) -> None:
    enqueue(call, [{"payload": i, "tenant": t} for i in range(2) for t in ("acme", "bolt")])
    headers = key()
    first = call("POST", CLAIMS, {"max": 4}, headers=headers)
    assert {t["tenant"] for t in first.body["tasks"]} == {"acme", "bolt"}
    again = call("POST", CLAIMS, {"max": 4}, headers=headers)
    assert again.body == first.body
    assert leased_members(valkey, "acme") | leased_members(valkey, "bolt") == \
        members_of(first.body["tasks"])


def test_the_key_is_scoped_by_caller(call: Invoke, valkey: redis.Redis) -> None:
    enqueue(call, [{"payload": i, "tenant": t} for i in range(2) for t in ("acme", "bolt")])
    headers = key()
    mine = call("POST", CLAIMS, {"max": 1}, headers=headers, claims=TENANT_A)
    theirs = call("POST", CLAIMS, {"max": 1}, headers=headers, claims=TENANT_B)
    assert mine.status == theirs.status == 200
    assert "idempotent-replayed" not in theirs.headers
    assert [t["tenant"] for t in mine.body["tasks"]] == ["acme"]
    assert [t["tenant"] for t in theirs.body["tasks"]] == ["bolt"]
    # the same key on another queue is another claim too
    enqueue_other = call("POST", "/v1/queues/other/tasks", {"payload": 1}, claims=TENANT_A)
    assert enqueue_other.status == 200
    elsewhere = call("POST", "/v1/queues/other/claims", {"max": 1}, headers=headers,
                     claims=TENANT_A)
    assert len(elsewhere.body["tasks"]) == 1 and "idempotent-replayed" not in elsewhere.headers


def test_a_replayed_full_claim_of_large_payloads_fits_as_the_first_did(
        call: Invoke, valkey: redis.Redis) -> None:
    """240 KB payloads of 4-byte characters, quotes, backslashes and control characters: the
    rebuilt answer is the first one, and fits a Lambda response as the runtime encodes it."""
    payload = {"text": "😀" * 55_000 + '"\\\n\t\x01' * 2_000, "z": 1.5, "a": [1e-05, -3]}
    for _ in range(4):  # a request stays under Lambda's request limit
        enqueue(call, [{"payload": payload} for _ in range(6)])
    headers = key()
    first = call("POST", CLAIMS, {"max": 24}, headers=headers)
    assert first.status == 200 and 1 < len(first.body["tasks"]) < 24
    again = call("POST", CLAIMS, {"max": 24}, headers=headers)
    assert again.body == first.body
    # the same weight (an object's keys may come in PostgreSQL's order), within the limit;
    # only the envelope gains the Idempotent-Replayed header
    assert body_cost(again.raw["body"].encode()) == body_cost(first.raw["body"].encode())
    assert runtime_encoded_size(first.raw) <= LAMBDA_PAYLOAD_LIMIT
    assert runtime_encoded_size(again.raw) <= LAMBDA_PAYLOAD_LIMIT
    stored = next(iter(valkey.scan_iter("tq:idem:*")))
    # leases only, not the payloads: ~120 bytes a task
    assert len(valkey.hget(stored, "b") or b"") < 150 * len(first.body["tasks"])


def test_the_claims_route_documents_the_header_and_409() -> None:
    from tierq.aws.http.resolver import openapi_document
    operation = openapi_document()["paths"]["/v1/queues/{queue}/claims"]["post"]
    assert any(p["name"].lower() == "idempotency-key" and p["in"] == "header"
               for p in operation["parameters"])
    assert "409" in operation["responses"]


def test_two_subjects_of_one_tenant_with_one_key_get_their_own_leases(
        call: Invoke, valkey: redis.Redis) -> None:
    """Two services of one tenant sending the same key on a claim: each gets its own task and
    lease token; each one's retry replays its own claim; an admin's key is its own too."""
    enqueue(call, [{"payload": i, "tenant": "acme"} for i in range(4)])
    service_1 = {"sub": "svc-1", "tenant": "acme"}
    service_2 = {"sub": "svc-2", "tenant": "acme"}
    headers = key()
    first = call("POST", CLAIMS, {"max": 1}, headers=headers, claims=service_1)
    second = call("POST", CLAIMS, {"max": 1}, headers=headers, claims=service_2)
    assert first.status == second.status == 200
    assert "idempotent-replayed" not in second.headers
    [mine], [theirs] = first.body["tasks"], second.body["tasks"]
    assert mine["id"] != theirs["id"] and mine["lease_token"] != theirs["lease_token"]
    for claims, answer in ((service_1, first), (service_2, second)):
        again = call("POST", CLAIMS, {"max": 1}, headers=headers, claims=claims)
        assert again.body == answer.body and again.headers.get("idempotent-replayed") == "true"
    admin_1 = call("POST", CLAIMS, {"max": 1}, headers=headers,
                   claims={"sub": "ops-1", "scope": "tierq/admin"})
    admin_2 = call("POST", CLAIMS, {"max": 1}, headers=headers,
                   claims={"sub": "ops-2", "scope": "tierq/admin"})
    assert "idempotent-replayed" not in admin_1.headers
    assert "idempotent-replayed" not in admin_2.headers
    assert len({t["id"] for r in (first, second, admin_1, admin_2) for t in r.body["tasks"]}) == 4
    assert leased_members(valkey, "acme") == members_of(
        [t for r in (first, second, admin_1, admin_2) for t in r.body["tasks"]])


def test_tokens_without_a_subject_share_their_tenants_claim_key(
        call: Invoke, valkey: redis.Redis) -> None:
    enqueue(call, [{"payload": i, "tenant": "acme"} for i in range(2)])
    headers = key()
    first = call("POST", CLAIMS, {"max": 1}, headers=headers, claims={"tenant": "acme"})
    shared = call("POST", CLAIMS, {"max": 1}, headers=headers, claims={"tenant": "acme"})
    assert shared.body == first.body and shared.headers.get("idempotent-replayed") == "true"
    assert leased_members(valkey, "acme") == members_of(first.body["tasks"])
