"""Valkey out of memory never becomes a 500: through the functions, against the session's
real Redis with ``maxmemory`` reached (policy ``noeviction``). An enqueue is answered after
its commit with its tasks accepted in state ``cold``; a claim that has nothing to hand out
because cold work cannot be moved into the full cache is a 503 with ``Retry-After`` and the
error shape, naming no internals; once memory is free, everything is delivered in order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis

from tests.handlers.support import Invoke
from tests.support.valkey_memory import memory_bound

TENANT = {"tenant": "acme"}


@pytest.fixture
def full_valkey(valkey: redis.Redis) -> Iterator[redis.Redis]:
    """A switch for the session's private Redis: ``config_set("maxmemory", 1)`` makes every
    write that needs memory fail with a real OOM reply. Restored afterwards."""
    with memory_bound(valkey):
        yield valkey


def cold_rows(pg: psycopg.Connection[Any], queue: str) -> int:
    row = pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = %s AND state = 'cold'",
                     (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def test_enqueue_is_accepted_cold_and_a_claim_is_503_while_valkey_is_full(
        call: Invoke, full_valkey: redis.Redis, pg: psycopg.Connection[Any]) -> None:
    warmup = call("POST", "/v1/queues/full/tasks", {"payload": 0}, claims=TENANT)
    assert warmup.status == 200 and warmup.body["state"] == "warm"
    first = call("POST", "/v1/queues/full/claims", {"max": 1}, claims=TENANT)
    assert [t["payload"] for t in first.body["tasks"]] == [0]
    full_valkey.config_set("maxmemory", 1)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        full_valkey.set("probe", "x")

    reply = call("POST", "/v1/queues/full/tasks",
                 {"tasks": [{"payload": n} for n in range(1, 6)]}, claims=TENANT)
    assert reply.status == 200, reply.body
    assert [t["state"] for t in reply.body["tasks"]] == ["cold"] * 5
    assert cold_rows(pg, "full") == 5  # accepted, committed, waiting cold

    ack = call("POST", "/v1/queues/full/acks",
               {"acks": [{"id": first.body["tasks"][0]["id"],
                          "lease_token": first.body["tasks"][0]["lease_token"]}]},
               claims=TENANT)
    assert ack.status == 200 and len(ack.body["acked"]) == 1  # acks need no memory

    refused = call("POST", "/v1/queues/full/claims", {"max": 10}, claims=TENANT)
    assert refused.status == 503, refused.body
    assert int(refused.headers["retry-after"]) > 0
    assert refused.body["error"]["code"] == "unavailable"
    assert "OOM" not in str(refused.body) and "maxmemory" not in str(refused.body)
    assert cold_rows(pg, "full") == 5  # nothing lost, nothing leased

    full_valkey.config_set("maxmemory", 0)
    claimed = call("POST", "/v1/queues/full/claims", {"max": 10}, claims=TENANT)
    assert claimed.status == 200, claimed.body
    assert [t["payload"] for t in claimed.body["tasks"]] == [1, 2, 3, 4, 5]


def test_warm_max_bytes_is_set_and_shown_over_http(call: Invoke) -> None:
    put = call("PUT", "/v1/queues/sized", {"warm_max_bytes": 8192})  # an admin's token
    assert put.status == 200, put.body
    assert put.body["settings"]["warm_max_bytes"] == 8192
    got = call("GET", "/v1/queues/sized")
    assert got.status == 200 and got.body["settings"]["warm_max_bytes"] == 8192
    bad = call("PUT", "/v1/queues/sized", {"warm_max_bytes": 10})
    assert bad.status == 422, bad.body
    assert [d["field"] for d in bad.body["error"]["details"]] == ["warm_max_bytes"]
    assert call("GET", "/v1/queues/sized").body["settings"]["warm_max_bytes"] == 8192
