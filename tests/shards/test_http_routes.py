"""The HTTP functions over three shards (TIERQ_SHARD_URLS): every route routes. Enqueues
(with an Idempotency-Key too) land on each pair's home; claims, acks, task status, queue
views and lists, metrics, dead letters and schedules answer over every shard, with cursors
that span shards; a shard that does not answer fails only the requests that need it (503)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest

from tests.handlers.support import (
    ADMIN_CLAIMS,
    REPO,
    Context,
    Reply,
    function_module,
    http_event,
    reply_of,
)
from tests.shards.conftest import ShardedFactory
from tierq.aws.http.access import subject_of
from tierq.aws.runtime import engine, reset_engine
from tierq.dal.shards import ShardSpec
from tierq.local.gateway.template import Template
from tierq.logic import idempotency
from tierq.sharded import ShardedTierq

TENANTS = [f"t{i}" for i in range(12)]
DOWN_URL = "postgresql://nobody@127.0.0.1:9/nothing?connect_timeout=1"


@pytest.fixture(scope="module")
def template() -> Template:
    return Template.load(REPO / "template.yaml")


class Api:
    """Requests to the HTTP functions as API Gateway routes them (an admin's token unless
    ``claims`` are given)."""

    def __init__(self, template: Template) -> None:
        self.template = template

    def __call__(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Reply:
        event = http_event(self.template, method, path, body, **kwargs)
        function = next(self.template.functions[route.function].name
                        for route in self.template.routes
                        if route.match(path) is not None and route.method == method)
        return reply_of(function_module(function).lambda_handler(
            event, Context(function_name=function)))


def use_shards(monkeypatch: pytest.MonkeyPatch, specs: list[ShardSpec]) -> None:
    monkeypatch.setenv("TIERQ_SHARD_URLS", ",".join(f"{s.name}={s.url}" for s in specs))
    reset_engine()


@pytest.fixture
def api(make_sharded: ShardedFactory, shard_specs: list[ShardSpec], valkey_url: str,
        monkeypatch: pytest.MonkeyPatch, template: Template) -> Iterator[Api]:
    make_sharded()  # the three shards' homes in service, the warm tier empty
    monkeypatch.setenv("VALKEY_URL", valkey_url)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("DB_SECRET_ARN", raising=False)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("TIERQ_SETTINGS_CACHE_SECONDS", "0")
    use_shards(monkeypatch, shard_specs[:3])
    yield Api(template)
    reset_engine()


def deployment() -> ShardedTierq:
    current = engine()
    assert isinstance(current, ShardedTierq)
    return current


def homes(queue: str) -> dict[str, str]:
    tq = deployment()
    return {t: tq.homes.home_of(queue, t, create=False) or "" for t in TENANTS}


def enqueue_all(api: Api, queue: str, **task: Any) -> list[dict[str, Any]]:
    tasks = [{"payload": {"n": n}, "tenant": tenant, **task}
             for n, tenant in enumerate(TENANTS)]
    reply = api("POST", f"/v1/queues/{queue}/tasks", {"tasks": tasks})
    assert reply.status == 200, reply.body
    return list(reply.body["tasks"])


def test_an_idempotent_batch_lands_on_each_pairs_home_once(api: Api) -> None:
    tasks = [{"payload": {"n": n}, "tenant": t} for n, t in enumerate(TENANTS)]
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = api("POST", "/v1/queues/spread/tasks", {"tasks": tasks}, headers=key)
    assert first.status == 200, first.body
    assert [o["outcome"] for o in first.body["tasks"]] == ["created"] * len(TENANTS)
    where = homes("spread")
    assert len(set(where.values())) == 3  # the batch spans every shard
    again = api("POST", "/v1/queues/spread/tasks", {"tasks": tasks}, headers=key)
    assert again.status == 200 and again.headers.get("idempotent-replayed") == "true"
    assert again.body == first.body
    view = api("GET", "/v1/queues/spread")
    assert view.body["counts"]["warm"] + view.body["counts"]["cold"] == len(TENANTS)
    # each task's status is read on its shard, by the tag in its id
    for outcome, tenant in zip(first.body["tasks"], TENANTS, strict=True):
        got = api("GET", f"/v1/queues/spread/tasks/{outcome['id']}")
        assert got.status == 200 and got.body["tenant"] == tenant


def test_a_key_reused_with_another_body_on_other_shards_is_409_and_writes_nothing(
        api: Api) -> None:
    """The key is bound to its body on the default shard, whichever shards its tasks land
    on: a second body whose tasks would all go to shards the first never touched is
    refused as on one database."""
    enqueue_all(api, "bound")  # every tenant's pair born, so their homes are known
    where = homes("bound")
    first_tenant = TENANTS[0]
    other = next(t for t in TENANTS if where[t] != where[first_tenant])
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = api("POST", "/v1/queues/bound/tasks",
                {"tasks": [{"payload": {"n": 1}, "tenant": first_tenant}]}, headers=key)
    assert first.status == 200, first.body
    reused = api("POST", "/v1/queues/bound/tasks",
                 {"tasks": [{"payload": {"n": 2}, "tenant": other}]}, headers=key)
    assert reused.status == 409, reused.body
    assert reused.body["error"]["code"] == "idempotency_key_reused"
    view = api("GET", "/v1/queues/bound")
    assert view.body["counts"]["warm"] + view.body["counts"]["cold"] == len(TENANTS) + 1
    # the first body again is still answered from its records, changing nothing
    again = api("POST", "/v1/queues/bound/tasks",
                {"tasks": [{"payload": {"n": 1}, "tenant": first_tenant}]}, headers=key)
    assert again.status == 200 and again.headers.get("idempotent-replayed") == "true"
    assert again.body == first.body


def test_a_keyed_request_that_ran_nowhere_keeps_its_key_bound_to_its_body(
        api: Api, shard_specs: list[ShardSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    """A request whose only shard did not answer ran no part, but its key stays bound to
    its body: the same body, retried once the shard is back, runs; another body is 409."""
    enqueue_all(api, "kept")
    where = homes("kept")
    lost = shard_specs[1].name  # not the default shard, which keeps the keys' bodies
    on_lost = next(t for t in TENANTS if where[t] == lost)
    elsewhere = next(t for t in TENANTS if where[t] != lost)
    key = {"Idempotency-Key": str(uuid.uuid4())}
    body = {"tasks": [{"payload": {"n": 1}, "tenant": on_lost}]}
    use_shards(monkeypatch, [shard_specs[0], ShardSpec(lost, DOWN_URL), shard_specs[2]])
    down = api("POST", "/v1/queues/kept/tasks", body, headers=key)
    assert down.status == 503, down.body
    use_shards(monkeypatch, shard_specs[:3])
    other = api("POST", "/v1/queues/kept/tasks",
                {"tasks": [{"payload": {"n": 2}, "tenant": elsewhere}]}, headers=key)
    assert other.status == 409, other.body
    assert other.body["error"]["code"] == "idempotency_key_reused"
    retried = api("POST", "/v1/queues/kept/tasks", body, headers=key)
    assert retried.status == 200, retried.body
    assert [o["outcome"] for o in retried.body["tasks"]] == ["created"]


def test_a_binding_held_by_a_request_still_running_does_not_stop_a_retry(api: Api) -> None:
    """The body's binding fails open: while another request with the same key and body
    holds it (a Lambda that died in it, for its lease), a retry runs on the parts' own
    records instead of answering 409 in progress."""
    enqueue_all(api, "held")
    key = str(uuid.uuid4())
    body = {"tasks": [{"payload": {"n": 1}, "tenant": TENANTS[0]}]}
    default = deployment().engines[deployment().default_shard]
    held = idempotency.claim_in_postgres(
        default.ctx, idempotency.scope_key("admin", "enqueue", "held", key,
                                           subject=subject_of(ADMIN_CLAIMS)) + b"|body",
        idempotency.fingerprint(body))
    assert isinstance(held, idempotency.PgClaim)  # in progress, as a dead request left it
    reply = api("POST", "/v1/queues/held/tasks", body, headers={"Idempotency-Key": key})
    assert reply.status == 200, reply.body
    assert [o["outcome"] for o in reply.body["tasks"]] == ["created"]
    other = api("POST", "/v1/queues/held/tasks",
                {"tasks": [{"payload": {"n": 2}, "tenant": TENANTS[0]}]},
                headers={"Idempotency-Key": key})
    assert other.status == 409 and other.body["error"]["code"] == "idempotency_key_reused"


def test_keys_over_shards_belong_to_their_caller(api: Api) -> None:
    """Two admins' batches over every shard under one key and body: each runs (its parts and
    its binding kept under its own subject) and each retry replays its own answer; two
    services of one tenant likewise on their pair's home."""
    tasks = [{"payload": {"n": n}, "tenant": t} for n, t in enumerate(TENANTS)]
    key = {"Idempotency-Key": str(uuid.uuid4())}
    ops = [{"sub": f"ops-{i}", "scope": "tierq/admin"} for i in (1, 2)]
    first, second = (api("POST", "/v1/queues/callers/tasks", {"tasks": tasks}, headers=key,
                         claims=claims) for claims in ops)
    assert first.status == second.status == 200, second.body
    assert [o["outcome"] for o in second.body["tasks"]] == ["created"] * len(TENANTS)
    assert {o["id"] for o in first.body["tasks"]}.isdisjoint(
        o["id"] for o in second.body["tasks"])
    assert len(set(homes("callers").values())) == 3
    for claims, answer in zip(ops, (first, second), strict=True):
        again = api("POST", "/v1/queues/callers/tasks", {"tasks": tasks}, headers=key,
                    claims=claims)
        assert again.body == answer.body and again.headers.get("idempotent-replayed") == "true"
    services = [{"sub": f"svc-{i}", "tenant": TENANTS[0]} for i in (1, 2)]
    own = [api("POST", "/v1/queues/callers/tasks", {"payload": "same"}, headers=key,
               claims=claims) for claims in services]
    assert [r.status for r in own] == [200, 200]
    assert own[0].body["id"] != own[1].body["id"]
    view = api("GET", "/v1/queues/callers")
    assert view.body["counts"]["warm"] + view.body["counts"]["cold"] == 2 * len(TENANTS) + 2


def claim_all(api: Api, queue: str) -> list[dict[str, Any]]:
    """Claim until nothing is left (an HTTP claim's answer holds one shard's tasks: the
    response's bytes are one shard's to fill)."""
    claimed: list[dict[str, Any]] = []
    while True:
        reply = api("POST", f"/v1/queues/{queue}/claims", {"max": 5})
        assert reply.status == 200, reply.body
        if not reply.body["tasks"]:
            return claimed
        claimed.extend(reply.body["tasks"])


def test_claims_acks_and_pinned_views_route_to_the_pairs(api: Api) -> None:
    enqueue_all(api, "work")
    claimed = claim_all(api, "work")
    assert sorted(t["tenant"] for t in claimed) == sorted(TENANTS)
    acked = api("POST", "/v1/queues/work/acks", {"acks": [
        {"id": t["id"], "lease_token": t["lease_token"]} for t in claimed]})
    assert acked.status == 200 and not acked.body["rejected"], acked.body
    assert len(acked.body["acked"]) == len(TENANTS)
    t3 = {"sub": "x", "tenant": "t3"}
    pinned = api("GET", "/v1/queues/work", claims=t3)
    assert pinned.status == 200 and pinned.body["counts"]["leased"] == 0
    assert (pinned.body["view"], pinned.body["tenant"]) == ("tenant", "t3")
    # a name without its tasks on any shard answers as any other (no 404: no oracle)
    nowhere = api("GET", "/v1/queues/nowhere", claims=t3)
    assert nowhere.status == 200 and nowhere.body["counts"] == pinned.body["counts"]
    listed = api("GET", "/v1/queues", claims=t3).body["queues"]
    assert [(q["queue"], q["view"]) for q in listed] == [("work", "tenant")]


def test_lists_and_metrics_page_across_shards(api: Api) -> None:
    for queue in ("qa", "qb", "qc"):
        enqueue_all(api, queue)
    names: list[str] = []
    cursor = None
    while True:
        query = {"limit": "1", **({"after": cursor} if cursor else {})}
        page = api("GET", "/v1/queues", query=query)
        assert page.status == 200, page.body
        names += [q["queue"] for q in page.body["queues"]]
        for view in page.body["queues"]:  # each queue summed over the shards
            assert view["counts"]["warm"] + view["counts"]["cold"] == len(TENANTS)
        cursor = page.body["next"]
        if cursor is None:
            break
    assert names == ["qa", "qb", "qc"]
    rows: list[tuple[str, str]] = []
    cursor = None
    while True:
        query = {"limit": "5", **({"after": cursor} if cursor else {})}
        page = api("GET", "/v1/metrics/queues/detailed", query=query)
        assert page.status == 200, page.body
        rows += [(r["queue"], r["tenant"]) for r in page.body["queues"]]
        cursor = page.body["next"]
        if cursor is None:
            break
    assert rows == sorted((q, t) for q in ("qa", "qb", "qc") for t in TENANTS)
    assert len(claim_all(api, "qa")) == len(TENANTS)
    running = api("GET", "/v1/metrics/queues/running", query={"limit": "100"})
    assert sorted(r["tenant"] for r in running.body["running"]) == sorted(TENANTS)


def test_dead_letters_merge_replay_and_purge_over_shards(api: Api) -> None:
    enqueue_all(api, "dlq", max_attempts=1)
    claimed = claim_all(api, "dlq")
    failed = api("POST", "/v1/queues/dlq/nacks", {"nacks": [
        {"id": t["id"], "lease_token": t["lease_token"], "error": "boom"} for t in claimed]})
    assert failed.status == 200 and not failed.body["rejected"], failed.body
    dead: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {"limit": "5", **({"after": cursor} if cursor else {})}
        page = api("GET", "/v1/queues/dlq/dlq", query=query)
        assert page.status == 200, page.body
        dead += page.body["tasks"]
        cursor = page.body["next"]
        if cursor is None:
            break
    assert sorted(t["tenant"] for t in dead) == sorted(TENANTS)
    order = [(datetime.fromisoformat(t["finished_at"]), uuid.UUID(t["id"])) for t in dead]
    assert order == sorted(order, reverse=True)  # newest first over every shard
    some = [t["id"] for t in dead[:4]]
    key = {"Idempotency-Key": str(uuid.uuid4())}
    replayed = api("POST", "/v1/queues/dlq/dlq/replay", {"ids": some}, headers=key)
    assert replayed.status == 200, replayed.body
    assert sorted(replayed.body["replayed"]) == sorted(some) and not replayed.body["skipped"]
    again = api("POST", "/v1/queues/dlq/dlq/replay", {"ids": some}, headers=key)
    assert again.headers.get("idempotent-replayed") == "true"
    assert sorted(again.body["replayed"]) == sorted(some)
    purged: list[str] = []
    more = True
    while more:  # a request purges what its time allows
        reply = api("POST", "/v1/queues/dlq/dlq/purge")
        assert reply.status == 200, reply.body
        purged += reply.body["purged"]
        more = reply.body["more"]
    assert len(purged) == len(TENANTS) - 4
    assert api("GET", "/v1/queues/dlq/dlq").body["tasks"] == []


def test_schedules_live_on_the_home_of_their_queue_and_tenant(api: Api) -> None:
    for tenant in TENANTS[:6]:
        reply = api("PUT", "/v1/schedules/nightly", {
            "queue": "cron", "tenant": tenant, "cron": "0 3 * * *", "payload": {}})
        assert reply.status == 200, reply.body
    tq = deployment()
    for tenant in TENANTS[:6]:
        home = tq.homes.home_of("cron", tenant, create=False)
        assert home is not None
        assert [s.name for s in tq.engines[home].list_schedules(tenant)] == ["nightly"]
    listed = api("GET", "/v1/schedules", query={"limit": "4"})
    rest = api("GET", "/v1/schedules", query={"limit": "4", "after": listed.body["next"]})
    seen = [(s["tenant"], s["name"]) for s in listed.body["schedules"] + rest.body["schedules"]]
    assert seen == [(t, "nightly") for t in sorted(TENANTS[:6])]
    got = api("GET", "/v1/schedules/nightly", query={"tenant": "t2"})
    assert got.status == 200 and got.body["tenant"] == "t2"
    gone = api("DELETE", "/v1/schedules/nightly", query={"tenant": "t2"})
    assert gone.status == 200
    assert api("GET", "/v1/schedules/nightly", query={"tenant": "t2"}).status == 404


def test_a_down_shard_fails_only_its_own_pairs(api: Api, shard_specs: list[ShardSpec],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    enqueue_all(api, "outage")
    where = homes("outage")
    lost = shard_specs[0].name
    use_shards(monkeypatch, [ShardSpec(lost, DOWN_URL), *shard_specs[1:3]])
    for tenant, home in where.items():
        reply = api("POST", "/v1/queues/outage/tasks", {"payload": {}, "tenant": tenant})
        if home == lost:
            assert reply.status == 503, reply.body
            assert reply.body["error"]["code"] == "unavailable"
        else:
            assert reply.status == 200, reply.body
        pinned = api("POST", "/v1/queues/outage/claims", {"max": 5},
                     claims={"sub": "w", "tenant": tenant})
        assert pinned.status == (503 if home == lost else 200), pinned.body


def test_a_pair_being_moved_answers_503_for_new_work_and_serves_its_leases(api: Api) -> None:
    enqueue_all(api, "relocating")
    tenant = TENANTS[0]
    home = homes("relocating")[tenant]
    to = next(name for name in deployment().engines if name != home)
    claimed = api("POST", "/v1/queues/relocating/claims", {"max": 5},
                  claims={"sub": "w", "tenant": tenant})
    assert claimed.status == 200 and len(claimed.body["tasks"]) == 1
    for engine_ in deployment().engines.values():  # closed, as a move's first step
        engine_.ctx.store.home_close("relocating", tenant, home, to)
    deployment().homes.invalidate("relocating", tenant)
    refused = api("POST", "/v1/queues/relocating/tasks", {"payload": {}, "tenant": tenant})
    assert refused.status == 503, refused.body
    assert refused.body["error"]["code"] == "pair_moving"
    assert refused.headers.get("retry-after") == "5"
    assert api("POST", "/v1/queues/relocating/tasks",
               {"payload": {}, "tenant": TENANTS[1]}).status == 200  # other pairs go on
    task = claimed.body["tasks"][0]
    acked = api("POST", "/v1/queues/relocating/acks", {"acks": [
        {"id": task["id"], "lease_token": task["lease_token"]}]})
    assert acked.status == 200 and acked.body["acked"] == [task["id"]], acked.body


def test_metrics_over_a_shard_behind_on_migrations_answer_503(
        api: Api, shard_specs: list[ShardSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    enqueue_all(api, "behind")
    assert api("GET", "/v1/metrics/queues/detailed").status == 200
    behind = shard_specs[1]
    with psycopg.connect(behind.url, autocommit=True) as conn:
        newest = conn.execute("SELECT max(version) FROM tierq_schema_migrations").fetchone()
        assert newest is not None
        record = conn.execute("DELETE FROM tierq_schema_migrations WHERE version = %s "
                              "RETURNING version, name, checksum", (newest[0],)).fetchone()
    try:
        use_shards(monkeypatch, shard_specs[:3])  # a process started now
        for path in ("/v1/metrics/queues/detailed", "/v1/metrics/queues/running"):
            reply = api("GET", path)
            assert reply.status == 503, (path, reply.body)  # as any call on it, not a 500
            assert "behind on migrations" in reply.body["error"]["message"]
    finally:
        with psycopg.connect(behind.url, autocommit=True) as conn:
            conn.execute("INSERT INTO tierq_schema_migrations (version, name, checksum) "
                         "VALUES (%s, %s, %s)", record)


def test_an_uploads_pointer_enqueues_on_its_pairs_home(api: Api, tmp_path: Any) -> None:
    """The upload route records its key on the shard of the (queue, tenant) pair's home,
    where the pair's enqueue goes: every tenant's pointer enqueues, whatever its shard."""
    from tierq.dal.payload_store import LocalPayloadStore, use_payload_store

    use_payload_store(LocalPayloadStore(tmp_path, lambda: "http://127.0.0.1:1"))
    try:
        for tenant in TENANTS:
            upload = api("POST", "/v1/queues/big/payloads", {"size": 3, "tenant": tenant})
            assert upload.status == 200, upload.body
            reply = api("POST", "/v1/queues/big/tasks",
                        {"tasks": [{"payload": upload.body["pointer"], "tenant": tenant}]})
            assert reply.status == 200, reply.body
        assert len(set(homes("big").values())) == 3  # (the pointers spanned every shard)
    finally:
        use_payload_store(None)


def test_another_tenants_task_reads_as_one_that_does_not_exist(api: Api) -> None:
    """A pinned caller's GET, wait and DELETE of another tenant's task answer exactly as for
    an id no shard holds (the id aside): the answer tells nothing of its existence."""
    theirs, gone = (api("POST", "/v1/queues/hid/tasks", {"payload": n, "tenant": "t1"}).body["id"]
                    for n in range(2))
    assert api("DELETE", f"/v1/queues/hid/tasks/{gone}").status == 200
    t3 = {"sub": "x", "tenant": "t3"}
    for method, query in (("GET", None), ("GET", {"wait_seconds": "0.1"}), ("DELETE", None)):
        other = api(method, f"/v1/queues/hid/tasks/{theirs}", query=query, claims=t3)
        missing = api(method, f"/v1/queues/hid/tasks/{gone}", query=query, claims=t3)
        assert (other.status, missing.status) == (404, 404), (method, query)
        assert (str(other.body).replace(theirs, "ID")
                == str(missing.body).replace(gone, "ID")), (method, query, other.body,
                                                            missing.body)
    kept = api("GET", f"/v1/queues/hid/tasks/{theirs}")  # (the other tenant's DELETE did nothing)
    assert kept.status == 200 and kept.body["state"] in ("warm", "cold"), kept.body
