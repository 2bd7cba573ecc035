"""Idempotency records on the deployed shape: the lease routes' records in a three-master
Redis Cluster (each record one key, so one slot), and the enqueue records, which live in
PostgreSQL, surviving the loss of every master."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from redis.cluster import RedisCluster

from tests.integration.helpers import count_rows
from tierq.engine import Tierq
from tierq.local.services import flush_all_nodes
from tierq.logic import idempotency
from tierq.logic.idempotency import (
    IdempotencyInProgress,
    IdempotencyKeyReused,
    Kept,
    PgClaim,
    ValkeyClaim,
)
from tierq.logic.shard_ops import enqueue_once
from tierq.models import TaskIn


def scope(key: str) -> bytes:
    return idempotency.scope_key("tenant:a", "ack", "q", key)


def test_lease_records_on_every_master(tq: Tierq) -> None:
    client = tq.warm.client
    assert isinstance(client, RedisCluster)
    body = idempotency.fingerprint({"acks": [1]})
    masters: set[str] = set()
    for i in range(30):
        key = f"k{i}"
        node = client.get_node_from_key(idempotency.valkey_key(scope(key)))
        masters.add(f"{node.host}:{node.port}")
        first = idempotency.claim_in_valkey(tq.ctx, scope(key), body)
        assert isinstance(first, ValkeyClaim)
        with pytest.raises(IdempotencyInProgress):
            idempotency.claim_in_valkey(tq.ctx, scope(key), body)
        first.finish({"acked": [i], "rejected": []})
        kept = idempotency.claim_in_valkey(tq.ctx, scope(key), body)
        assert kept == Kept(200, {"acked": [i], "rejected": []})
        with pytest.raises(IdempotencyKeyReused):
            idempotency.claim_in_valkey(tq.ctx, scope(key), idempotency.fingerprint({}))
    assert len(masters) == 3
    abandoned = idempotency.claim_in_valkey(tq.ctx, scope("gone"), body)
    assert isinstance(abandoned, ValkeyClaim)
    abandoned.abandon()
    assert isinstance(idempotency.claim_in_valkey(tq.ctx, scope("gone"), body), ValkeyClaim)


def test_enqueue_records_survive_losing_every_master(
        tq: Tierq, valkey_url: str, pg: psycopg.Connection[Any]) -> None:
    tasks = [TaskIn(payload=i) for i in range(4)]
    body = idempotency.fingerprint({"tasks": [{"payload": i} for i in range(4)]})
    key = idempotency.scope_key("admin", "enqueue", "q", "once")
    first = idempotency.claim_in_postgres(tq.ctx, key, body)
    assert isinstance(first, PgClaim)
    outcomes = enqueue_once(tq.ctx, "q", tasks, None, first)
    first.finish({"tasks": [o.model_dump(mode="json") for o in outcomes]})
    flush_all_nodes(valkey_url)
    again = idempotency.claim_in_postgres(tq.ctx, key, body)
    assert isinstance(again, Kept)
    assert [t["id"] for t in again.body["tasks"]] == [str(o.id) for o in outcomes]
    assert count_rows(pg, "q") == 4
