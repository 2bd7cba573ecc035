"""Claims through the claim function's handler stay inside Lambda's 6 MB response limit as
the runtime encodes the handler's return value (api.sizing.runtime_encoded_size, the
python3.12+ runtimes' UTF-8 JSON), whatever the payloads: 4-byte UTF-8 characters, quotes,
backslashes, control characters. Every task is delivered over successive claims, and a
claim leases only what it returns (none stranded)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from tests.handlers.support import Invoke
from tierq.aws.http.claim_bounds import CLAIM_RESPONSE_BUDGET
from tierq.aws.runtime import engine
from tierq.core.sizing import LAMBDA_PAYLOAD_LIMIT, body_cost, runtime_encoded_size
from tierq.dal.warm_tier import PairKeys

QUEUE = "sizes"
EMOJI = "\U0001F600"  # 4 bytes in UTF-8


def emoji_payload(i: int) -> str:
    # 240,000 bytes of 4-byte characters (+2 for the quotes once serialized)
    return f"{i:04d}" + EMOJI * 59_999


def escapes_payload(i: int) -> Any:
    # every character escaped in JSON, and each escape escaped again by the runtime:
    # quotes, backslashes, control characters (short and \u00XX escapes)
    unit = '"\\"\\\x01\n\x1f\t\x7f'
    if i % 2:
        return f"{i:04d}" + unit * 10_000  # 250,006 bytes once serialized
    return {"n": i, "quotes": '"' * 40_000, "backslashes": "\\" * 40_000,
            "controls": "\x02\x1e\r\b\f" * 3_000, 'k"\\': ['"', "\\", "\n"] * 500}


def escapes_key(i: int) -> str:
    return f'key "{i}" \\ \u00e9 {EMOJI}'


def enqueue(tasks: list[dict[str, Any]]) -> list[str]:
    out = engine().enqueue(QUEUE, tasks)
    return [str(o.id) for o in out]


def claim_all(call: Invoke, *, tenant: str | None = None, record: Callable[[str, Any], None],
              cut_by_budget: bool = True) -> tuple[list[dict[str, Any]], list[int]]:
    """Claim until nothing is left; every handler return within the limit. Returns the
    tasks in delivery order and the size of each claim's return value. ``cut_by_budget``:
    each claim but the last stopped only because the next task would not have fitted."""
    delivered: list[dict[str, Any]] = []
    sizes: list[int] = []
    claims: list[list[dict[str, Any]]] = []
    ascii_sizes: list[int] = []
    body: dict[str, Any] = {"max": 500}
    if tenant is not None:
        body["tenant"] = tenant
    for _ in range(100):
        reply = call("POST", f"/v1/queues/{QUEUE}/claims", body)
        assert reply.status == 200, reply.body
        size = runtime_encoded_size(reply.raw)
        assert size <= LAMBDA_PAYLOAD_LIMIT, (size, len(reply.body["tasks"]))
        # what python3.11's runtime would send (ASCII escapes): reported, not required
        ascii_sizes.append(runtime_encoded_size(reply.raw, ascii_escapes=True))
        tasks = reply.body["tasks"]
        if not tasks:
            break
        sizes.append(size)
        claims.append(tasks)
        delivered.extend(tasks)
    else:
        pytest.fail("claims never ran dry")
    record("runtime_encoded_sizes", sizes)
    record("python311_ascii_escaped_sizes", ascii_sizes)
    print(f"claims: {[len(c) for c in claims]}; runtime sizes {sizes}; "
          f"python3.11 (ASCII escapes) sizes {ascii_sizes}")
    # A claim is cut only where the next task would not have fitted: its size plus the next
    # task's cost exceeds the budget, give or take the bound kept for each task's fields.
    for tasks, size, following in zip(claims, sizes, claims[1:] if cut_by_budget else [],
                                      strict=False):
        next_cost = body_cost(json.dumps(following[0], ensure_ascii=False,
                                         separators=(",", ":")).encode()) + 1
        assert size + next_cost > CLAIM_RESPONSE_BUDGET - 1_000 * (len(tasks) + 1), (
            size, next_cost, len(tasks))
    return delivered, sizes


def assert_none_stranded(valkey: redis.Redis, delivered: list[dict[str, Any]],
                         tenants: set[str]) -> None:
    """Every lease in Valkey is one of a task handed out, and every task handed out holds
    its lease: nothing was leased that a claim did not return."""
    leased: set[str] = set()
    for tenant in tenants:
        keys = PairKeys.of(QUEUE, tenant)
        leased.update(m.decode() for m in valkey.zrange(keys.leased, 0, -1))
        assert valkey.zcard(keys.ready) == 0
    assert leased == {f"{t['id']}|{t['lease_token']}" for t in delivered}


def test_emoji_payloads_are_delivered_in_claims_that_fit_lambda(
        call: Invoke, valkey: redis.Redis, record_property: Callable[[str, Any], None]):
    ids = enqueue([{"payload": emoji_payload(i)} for i in range(30)])
    delivered, sizes = claim_all(call, record=record_property)
    assert [t["id"] for t in delivered] == ids  # all of them, once each, in order
    assert [t["payload"] for t in delivered] == [emoji_payload(i) for i in range(30)]
    assert len(sizes) == 2  # 24 + 6: ~5.8 MB in the first
    assert all(t["attempt"] == 1 for t in delivered)
    assert_none_stranded(valkey, delivered, {"_"})


def test_payloads_full_of_escapes_are_delivered_in_claims_that_fit_lambda(
        call: Invoke, valkey: redis.Redis, record_property: Callable[[str, Any], None]):
    ids = enqueue([{"payload": escapes_payload(i), "key": escapes_key(i)} for i in range(30)])
    delivered, sizes = claim_all(call, record=record_property)
    assert [t["id"] for t in delivered] == ids
    assert [t["payload"] for t in delivered] == [escapes_payload(i) for i in range(30)]
    assert [t["key"] for t in delivered] == [escapes_key(i) for i in range(30)]
    assert len(sizes) >= 2  # ~390 kB each as the runtime sends them: 15 per claim
    assert_none_stranded(valkey, delivered, {"_"})


def test_a_claim_across_tenants_shares_one_budget(
        call: Invoke, valkey: redis.Redis, record_property: Callable[[str, Any], None]):
    ids = enqueue([{"payload": emoji_payload(i) if i % 3 else escapes_payload(i),
                    "tenant": f"t{i % 3}"} for i in range(30)])
    delivered, _ = claim_all(call, record=record_property)
    assert sorted(t["id"] for t in delivered) == sorted(ids)
    assert_none_stranded(valkey, delivered, {"t0", "t1", "t2"})


def test_tasks_promoted_from_the_cold_tier_are_sized_alike(
        call: Invoke, valkey: redis.Redis, monkeypatch: pytest.MonkeyPatch,
        record_property: Callable[[str, Any], None]):
    """Blobs built by PostgreSQL (promote_cold) carry the same count of quotes and
    backslashes as those built at enqueue: 20 tasks warm, 10 cold, promoted inline by the
    claims that find the warm set dry."""
    from tierq.aws.runtime import reset_engine

    monkeypatch.setenv("TIERQ_WARM_MAX", "20")
    reset_engine()
    ids = enqueue([{"payload": escapes_payload(i), "key": escapes_key(i)} for i in range(30)])
    delivered, _ = claim_all(call, record=record_property, cut_by_budget=False)
    assert [t["id"] for t in delivered] == ids
    assert_none_stranded(valkey, delivered, {"_"})
