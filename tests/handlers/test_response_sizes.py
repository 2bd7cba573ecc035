"""Every list route answers within Lambda's 6 MB response limit, counted on the handler's
return value as the python3.13 runtime encodes it, and pages with an opaque ``next``
cursor that returns every item exactly once; pinned callers' lists are selected by tenant in
SQL; request bodies over Lambda's request limit are 413 and write nothing."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import orjson
import psycopg
import pytest
import redis

from tests.handlers.support import Invoke, Reply, task_count
from tierq.aws.http.routes import metrics as metrics_routes
from tierq.aws.runtime import engine
from tierq.core import sizing
from tierq.dal.store.base import StoreBase
from tierq.engine import Tierq
from tierq.models import ClaimRequest, NackItem

LIMIT = sizing.LAMBDA_PAYLOAD_LIMIT  # 6,000,000
ACME = {"tenant": "acme"}

# Payloads of about 240 KB as stored (UTF-8 JSON), each a worst case for a JSON response.
EMOJI = "\U0001F600\U0001F680\U0001F4A9\U0001F9D9"  # 4 bytes each in UTF-8
QUOTES_AND_BACKSLASHES = '"\\'  # 2 bytes each in JSON, 4 once the runtime escapes the body
CONTROLS = "".join(chr(c) for c in range(1, 32))  # \u0001 … \u001f: up to 7 bytes each


def emoji_payload(i: int) -> dict[str, Any]:
    return {"n": i, "text": EMOJI * 15_000}  # 240,000 bytes of 4-byte characters


def escapes_payload(i: int) -> dict[str, Any]:
    return {"n": i, "text": QUOTES_AND_BACKSLASHES * 60_000}  # 240,000 bytes of JSON


def controls_payload(i: int) -> dict[str, Any]:
    return {"n": i, "text": CONTROLS * 1_400, "mixed": ['"\\\n\t\x7f\u2028' * 2_000]}


def tq() -> Tierq:
    """The engine the handlers use (built from the test's environment)."""
    return engine()


def make_dead(queue: str, payloads: list[Any], *, tenant: str = "_") -> list[str]:
    """Dead letters with these payloads, through the engine: enqueued, claimed, nacked dead."""
    api = tq()
    for start in range(0, len(payloads), 10):
        api.enqueue(queue, [{"payload": p, "tenant": tenant, "max_attempts": 1}
                            for p in payloads[start:start + 10]])
    dead: list[str] = []
    while len(dead) < len(payloads):
        tasks = api.claim(queue, ClaimRequest(max=10, tenant=tenant, lease_seconds=300))
        assert tasks, f"only {len(dead)} of {len(payloads)} tasks could be claimed"
        api.nack(queue, [NackItem(id=t.id, lease_token=t.lease_token, error="boom", dead=True)
                         for t in tasks])
        dead.extend(str(t.id) for t in tasks)
    return dead


def pages(call: Invoke, path: str, key: str, *, query: dict[str, str] | None = None,
          claims: dict[str, str] | None = None) -> Iterator[Reply]:
    """Every page of a list route, following ``next``; each reply checked against Lambda's
    response limit as the python3.13 runtime encodes it."""
    after: str | None = None
    for _ in range(10_000):
        params = dict(query or {})
        if after is not None:
            params["after"] = after
        reply = call("GET", path, query=params, claims=claims)
        assert reply.status == 200, reply.body
        assert sizing.runtime_encoded_size(reply.raw) <= LIMIT
        assert key in reply.body and "next" in reply.body
        yield reply
        after = reply.body["next"]
        if after is None:
            return
    raise AssertionError("the cursor never reached the last page")


def items_cost(items: list[Any]) -> int:
    """What a list's items cost in the runtime's encoding of the response body."""
    return sum(sizing.body_cost(orjson.dumps(item)) for item in items) + max(0, len(items) - 1)


# --------------------------------------------------------------------------- DLQ


def test_dlq_of_240_kb_worst_case_payloads_pages_under_the_6_mb_limit(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    payloads = ([emoji_payload(i) for i in range(20)]
                + [escapes_payload(i) for i in range(20, 30)]
                + [controls_payload(i) for i in range(30, 40)])
    for payload in payloads:  # what the issue describes: ~240 KB stored, under 256 KiB
        assert 200_000 <= len(orjson.dumps(payload)) <= 256 * 1024
    ids = make_dead("big", payloads)
    assert len(ids) == 40

    replies = list(pages(call, "/v1/queues/big/dlq", "tasks", query={"limit": "1000"}))
    seen = [t["id"] for r in replies for t in r.body["tasks"]]
    assert sorted(seen) == sorted(ids) and len(set(seen)) == 40  # each exactly once
    by_n = {t["payload"]["n"]: t["payload"] for r in replies for t in r.body["tasks"]}
    assert [by_n[i] for i in range(40)] == payloads  # every character comes back intact
    # One page could not hold them (their bodies cost ~14 MB on the wire); every page but
    # the last is full: the next dead letter would not have fitted.
    assert len(replies) >= 3
    largest = max(items_cost([t]) for r in replies for t in r.body["tasks"])
    for reply in replies[:-1]:
        assert sizing.runtime_encoded_size(reply.raw) > LIMIT - sizing.ENVELOPE_RESERVE - largest
        assert reply.body["next_cursor"] == reply.body["next"]  # the earlier name, kept
    assert replies[-1].body["next_cursor"] is None
    # python3.11's runtime would have written the same pages with ASCII escapes, far over
    assert max(sizing.runtime_encoded_size(r.raw, ascii_escapes=True) for r in replies) > LIMIT


def test_dlq_limit_and_budget_both_end_pages_and_order_is_kept(
        call: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = make_dead("jobs", [{"n": i, "s": "é" * 50} for i in range(9)])
    # newest first; the limit ends pages
    by_limit = [t["id"] for r in pages(call, "/v1/queues/jobs/dlq", "tasks",
                                       query={"limit": "4"}) for t in r.body["tasks"]]
    assert sorted(by_limit) == sorted(ids) and len(by_limit) == 9
    one_task = items_cost([call("GET", "/v1/queues/jobs/dlq",
                                query={"limit": "1"}).body["tasks"][0]])
    monkeypatch.setattr(sizing, "RESPONSE_BODY_BUDGET", 2 * one_task + 50)
    replies = list(pages(call, "/v1/queues/jobs/dlq", "tasks", query={"limit": "1000"}))
    assert [len(r.body["tasks"]) for r in replies] == [2, 2, 2, 2, 1]
    assert [t["id"] for r in replies for t in r.body["tasks"]] == by_limit
    for reply in replies:
        assert items_cost(reply.body["tasks"]) <= 2 * one_task + 50


def test_an_item_larger_than_a_response_is_an_error_not_an_oversized_answer(
        call: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    make_dead("jobs", [{"n": 1}])
    monkeypatch.setattr(sizing, "RESPONSE_BODY_BUDGET", 10)
    reply = call("GET", "/v1/queues/jobs/dlq")
    assert reply.status == 500
    assert reply.body["error"]["code"] == "response_too_large"


# --------------------------------------------------------------------------- cursors


@pytest.mark.parametrize("path", ["/v1/queues/jobs/dlq", "/v1/queues",
                                  "/v1/metrics/queues/detailed", "/v1/metrics/queues/running"])
def test_a_cursor_that_is_not_of_this_lists_form_is_422_naming_after(call: Invoke,
                                                                     path: str) -> None:
    # the base64 cursors of earlier versions (to /v1/queues one reads as a queue name, a
    # valid starting point), another list's form, text around a cursor
    old_form = base64.urlsafe_b64encode(b'["pairs", "q", "t"]').decode().rstrip("=")
    olds = [] if path == "/v1/queues" else [old_form]
    for cursor in ("garbage!", *olds, "q~t~1~x~y", "q~t\n", "q~" + "t" * 65, "x" * 600):
        reply = call("GET", path, query={"after": cursor})
        assert reply.status == 422, (cursor, reply.body)
        assert reply.body["error"]["details"][0]["field"] == "after"


@pytest.mark.parametrize(("path", "cursor"), [
    ("/v1/queues/jobs/dlq", "0~00000000-0000-0000-0000-000000000000"),
    ("/v1/queues", "zzz"),
    ("/v1/metrics/queues/detailed", "zzz~zzz"),
    ("/v1/metrics/queues/running", "zzz~zzz~0~"),
    ("/v1/schedules", "zzz~zzz"),
])
def test_any_cursor_of_the_lists_form_is_a_starting_point(call: Invoke, path: str,
                                                          cursor: str) -> None:
    """A cursor is a position: one no page returned (past every item here) is a valid start."""
    reply = call("GET", path, query={"after": cursor})
    assert reply.status == 200, reply.body
    assert reply.body["next"] is None and not any(
        isinstance(v, list) and v for v in reply.body.values())


# --------------------------------------------------------------------------- queues, metrics


def fill_pairs(queues: int, tenants: list[str]) -> set[tuple[str, str]]:
    """One ready task in each (queue, tenant)."""
    api = tq()
    pairs = set()
    for q in range(queues):
        queue = f"q{q:03d}"
        api.enqueue(queue, [{"payload": {"q": q, "t": t}, "tenant": t} for t in tenants])
        pairs.update((queue, t) for t in tenants)
    return pairs


def test_queue_and_metrics_lists_page_by_budget_and_cursor(
        call: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = fill_pairs(30, ["acme", "globex", "initech"])
    monkeypatch.setattr(sizing, "RESPONSE_BODY_BUDGET", 4_000)

    replies = list(pages(call, "/v1/queues", "queues"))
    names = [q["queue"] for r in replies for q in r.body["queues"]]
    assert names == sorted({q for q, _ in pairs})  # every queue once, in name order
    assert len(replies) > 3
    for reply in replies:
        assert items_cost(reply.body["queues"]) <= 4_000

    replies = list(pages(call, "/v1/metrics/queues/detailed", "queues"))
    rows = [(r["queue"], r["tenant"]) for p in replies for r in p.body["queues"]]
    assert rows == sorted(pairs) and len(replies) > 3
    assert all(items_cost(p.body["queues"]) <= 4_000 for p in replies)
    assert all(r["warm"] == 1 for p in replies for r in p.body["queues"])

    # a count limit ends pages too, and a queue filter narrows the pairs
    limited = list(pages(call, "/v1/metrics/queues/detailed", "queues",
                         query={"limit": "2", "queue": "q007"}))
    assert [len(p.body["queues"]) for p in limited] == [2, 1]
    assert [r["tenant"] for p in limited for r in p.body["queues"]] == \
        ["acme", "globex", "initech"]


# the statements whose rows are (queue, tenant) pairs
PAIR_ROWS = {"all_pairs", "pairs_page", "pairs_of_queue_page", "pairs_of_tenant_page",
             "pair_of_queue_and_tenant_page", "pairs_with_warm_rows"}


def test_pinned_lists_hold_only_the_tenant_and_are_selected_in_sql(
        call: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    fill_pairs(12, ["acme", "globex"])
    fill_pairs(40, ["globex"])  # many pairs that are not acme's
    statements: list[tuple[str, dict[str, Any], list[Any]]] = []
    real_fetch = StoreBase._fetch

    def recording_fetch(self: StoreBase, name: str, params: Any, *args: Any,
                        **kwargs: Any) -> Any:
        rows = real_fetch(self, name, params, *args, **kwargs)
        statements.append((name, dict(params or {}), list(rows)))
        return rows

    monkeypatch.setattr(StoreBase, "_fetch", recording_fetch)
    monkeypatch.setattr(sizing, "RESPONSE_BODY_BUDGET", 3_000)

    listed = [q for r in pages(call, "/v1/queues", "queues", claims=ACME)
              for q in r.body["queues"]]
    assert [q["queue"] for q in listed] == [f"q{i:03d}" for i in range(12)]
    assert all(q["tenant"] == "acme" and q["counts"]["warm"] == 1 for q in listed)
    detailed = [r for p in pages(call, "/v1/metrics/queues/detailed", "queues", claims=ACME)
                for r in p.body["queues"]]
    assert [(r["queue"], r["tenant"]) for r in detailed] == \
        [(f"q{i:03d}", "acme") for i in range(12)]
    running = [r for p in pages(call, "/v1/metrics/queues/running", "running", claims=ACME)
               for r in p.body["running"]]
    assert running == []

    # What PostgreSQL was asked for and answered: only acme's rows ever left the database.
    names = {name for name, _, _ in statements}
    assert {"queue_names_of_tenant_page", "pairs_of_tenant_page", "pairs_with_warm_rows",
            "pair_of_queue_and_tenant_page", "pair_state_counts"} <= names
    unfiltered = {"all_pairs", "known_queues", "tenants_of_queue",
                  "queue_names_page", "pairs_page", "pairs_of_queue_page"}
    assert not names & unfiltered
    for name, params, rows in statements:
        if name.endswith("_page"):
            assert params["tenant"] == "acme", name
        if name in ("pair_state_counts", "pair_oldest_ready", "pairs_with_warm_rows"):
            assert set(params["tenants"]) <= {"acme"}, name
        # rows of (queue, tenant) pairs are plain tuples; other rows name their tenant
        tenants = {r[1] if name in PAIR_ROWS else getattr(r, "tenant", "acme") for r in rows}
        assert tenants <= {"acme"}, name


def lease_everything(pairs: set[tuple[str, str]]) -> set[str]:
    api = tq()
    leased: set[str] = set()
    for queue, tenant in sorted(pairs):
        for task in api.claim(queue, ClaimRequest(max=10, tenant=tenant, worker=f"w-{tenant}",
                                                  lease_seconds=300)):
            leased.add(str(task.id))
    return leased


@pytest.mark.parametrize("scan_pairs", [1000, 2])
def test_running_leases_page_once_each(call: Invoke, monkeypatch: pytest.MonkeyPatch,
                                       scan_pairs: int) -> None:
    api = tq()
    pairs = fill_pairs(8, ["acme", "globex"])
    for queue, tenant in sorted(pairs)[:4]:  # a few pairs with many leases each
        api.enqueue(queue, [{"payload": i, "tenant": tenant} for i in range(6)])
    leased = lease_everything(pairs)
    assert len(leased) == 16 + 4 * 6
    monkeypatch.setattr(metrics_routes, "RUNNING_SCAN_PAIRS", scan_pairs)
    monkeypatch.setattr(sizing, "RESPONSE_BODY_BUDGET", 1_500)

    replies = list(pages(call, "/v1/metrics/queues/running", "running"))
    got = [r["id"] for p in replies for r in p.body["running"]]
    assert sorted(got) == sorted(leased) and len(got) == len(set(got))
    assert all(items_cost(p.body["running"]) <= 1_500 for p in replies)
    order = [(r["queue"], r["tenant"], datetime.fromisoformat(r["started_at"]))
             for p in replies for r in p.body["running"]]
    assert order == sorted(order)  # by pair, oldest first within each

    mine = [r["id"] for p in pages(call, "/v1/metrics/queues/running", "running", claims=ACME,
                                   query={"limit": "3"}) for r in p.body["running"]]
    acme = [r["id"] for p in replies for r in p.body["running"] if r["tenant"] == "acme"]
    assert sorted(mine) == sorted(acme) and len(acme) == 8 + 2 * 6
    one_queue = [r for p in pages(call, "/v1/metrics/queues/running", "running",
                                  query={"queue": "q000"}) for r in p.body["running"]]
    assert {r["queue"] for r in one_queue} == {"q000"} and len(one_queue) == 2 + 2 * 6


# --------------------------------------------------------------------------- requests


def nothing_written(pg: psycopg.Connection[Any], valkey: redis.Redis, queue: str) -> bool:
    return task_count(pg, queue) == 0 and not list(valkey.scan_iter(f"*{queue}*"))


BodyMaker = Callable[[], str]


@pytest.mark.parametrize(("make_body", "encodings"), [
    # over the limit as bytes (and so as base64 text too)
    (lambda: json.dumps({"tasks": [{"payload": "x" * 250_000} for _ in range(25)]}),
     (False, True)),
    # under the limit as bytes, over it once the event escapes its quotes and backslashes
    # (base64 text has none: that event would fit)
    (lambda: json.dumps({"tasks": [{"payload": '"' * 60_000} for _ in range(25)]}),
     (False,)),
], ids=["bytes", "escapes"])
def test_a_request_body_over_lambdas_limit_is_413_and_writes_nothing(
        call: Invoke, pg: psycopg.Connection[Any], valkey: redis.Redis,
        make_body: BodyMaker, encodings: tuple[bool, ...]) -> None:
    text = make_body()
    assert sizing.body_cost(text.encode()) > sizing.REQUEST_BODY_LIMIT
    assert len(text.encode()) < sizing.REQUEST_BODY_LIMIT or encodings == (False, True)
    for base64_body in encodings:
        reply = call("POST", "/v1/queues/huge/tasks", raw_body=text, base64_body=base64_body)
        assert reply.status == 413, reply.body
        error = reply.body["error"]
        assert error["code"] == "payload_too_large" and "body" in error["message"]
        assert error["details"][0]["field"] == "body"
    assert nothing_written(pg, valkey, "huge")


def test_a_request_body_under_the_limit_is_served(call: Invoke) -> None:
    tasks = [{"payload": "é" * 100_000} for _ in range(25)]  # 5 MB of 2-byte characters
    text = json.dumps({"tasks": tasks}, ensure_ascii=False)
    assert 5_000_000 < sizing.body_cost(text.encode()) <= sizing.REQUEST_BODY_LIMIT
    reply = call("POST", "/v1/queues/fits/tasks", raw_body=text)
    assert reply.status == 200, reply.body
    assert len(reply.body["tasks"]) == 25
