"""The two-store floor of ``bench.vs_bare --floor`` (bench/systems/two_store_floor.py) on real
servers: it must keep the contract it claims (rows committed before their elements are
pushed, a lease per claim, rows deleted before the lease is dropped) and finish every task,
or its figures would be a floor of something else."""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
import redis

from bench.phases import Sync
from bench.systems import Workload
from bench.systems.two_store_floor import (
    BATCH_DDL,
    DDL,
    PLACE_BITS,
    UNFINISHED_BATCHES,
    FloorClient,
    floor_consume,
    floor_produce,
    sweep,
)
from tests.support.stores import scratch_database
from tierq.local.services import LocalServices


@pytest.fixture(params=[False, True], ids=["rows", "batch-rows"])
def floor(request: pytest.FixtureRequest, services: LocalServices, valkey_url: str
          ) -> Iterator[tuple[FloorClient, str]]:
    """A client over a fresh database holding the floor's tables (a row per task, or per
    batch), its keys under a prefix of its own."""
    batch_rows: bool = request.param
    prefix = f"fqtest{uuid.uuid4().hex[:8]}"
    with scratch_database(services.postgres.url, "tierq_floor") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(BATCH_DDL if batch_rows else DDL)
        client = FloorClient(url, valkey_url, prefix, batch_rows)
        try:
            yield client, url
        finally:
            keys = list(client.valkey.scan_iter(match=f"{prefix}:*"))
            if keys:
                client.valkey.delete(*keys)
            client.close()


def rows(client: FloorClient) -> int:
    """Tasks not finished in PostgreSQL."""
    row = client.conn.execute(UNFINISHED_BATCHES if client.batch_rows
                              else "SELECT count(*) FROM fq").fetchone()
    assert row is not None
    return int(row[0])


def test_a_claim_leases_the_highest_priority_first_and_an_ack_deletes_then_drops(
        floor: tuple[FloorClient, str]) -> None:
    client, url = floor
    first_id = 7 << PLACE_BITS if client.batch_rows else 0  # (batch 7, places 1..30)
    ids = [first_id + i for i in range(1, 31)]
    client.produce(ids, [orjson.dumps({"i": i - first_id}) for i in ids], ["t"] * 30,
                   [(i - first_id) % 3 for i in ids])
    assert rows(client) == 30
    if client.batch_rows:
        stored = client.conn.execute("SELECT id, cardinality(payloads), priorities[3] "
                                     "FROM fq_batches").fetchall()
        assert stored == [(7, 30, 0)]
    assert sum(client.valkey.llen(key) for key in client.ready) == 30

    first = client.claim(12, 300)
    # the ten of priority 2 in the order they were pushed, then two of priority 1
    assert [task[1] - first_id for task in first] == [2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 1, 4]
    assert [task[2] for task in first] == [{"i": task[1] - first_id} for task in first]
    token = first[0][0]
    assert {task[0] for task in first} == {token}
    assert client.valkey.llen(client.lease_key(token)) == 12
    assert client.valkey.zscore(client.leases, token) is not None

    assert client.ack(first) == 12
    assert rows(client) == 18
    # the lease stays until the next call drops it, after the commit
    assert client.valkey.exists(client.lease_key(token))
    second = client.claim(3, 300)
    assert not client.valkey.exists(client.lease_key(token))
    assert client.valkey.zrange(client.leases, 0, -1) == [second[0][0].encode()]
    assert client.ack(second) == 3
    client.drop_held()
    assert client.valkey.zcard(client.leases) == 0
    assert rows(client) == 15
    if client.batch_rows:  # an append: a second ack is recorded, and counts once
        assert client.ack(first) == 12
        assert rows(client) == 15
        rest = client.claim(100, 300)
        assert len(rest) == 15
        client.ack(rest)
        client.drop_held()
        assert rows(client) == 0
        assert sweep(url)[0] == 30
        assert client.conn.execute("SELECT (SELECT count(*) FROM fq_batches), "
                                   "(SELECT count(*) FROM fq_acks)").fetchone() == (0, 0)
    else:
        assert client.ack(first) == 0  # a second ack finds no row


def test_the_floors_producers_and_workers_finish_every_task(
        floor: tuple[FloorClient, str], valkey_url: str) -> None:
    """Two producers of a mixed workload, then one worker with claims of 100."""
    client, url = floor
    ctx = multiprocessing.get_context()
    spec: dict[str, Any] = {"database_url": url, "valkey_url": valkey_url,
                            "prefix": client.prefix, "batch_rows": client.batch_rows,
                            **Workload(claim_batch=100, tenants=3, priorities=True).spec()}
    sync = Sync(ctx, 1_200)
    sync.go.set()
    for index, span in enumerate(((0, 700), (700, 1_200))):
        out = floor_produce({**spec, "index": index, "range": span}, sync)
        assert out["enqueued"] == span[1] - span[0]
    assert rows(client) == 1_200
    tenants = client.conn.execute(
        "SELECT count(DISTINCT tenant), count(DISTINCT priority) FROM fq_batches, "
        "unnest(tenants, priorities) AS t(tenant, priority)" if client.batch_rows
        else "SELECT count(DISTINCT tenant), count(DISTINCT priority) FROM fq").fetchone()
    assert tenants == (3, 10)

    done = floor_consume({**spec, "index": 2}, sync)
    assert (done["acked"], done["rejected"]) == (1_200, 0)
    assert rows(client) == 0
    if client.batch_rows:  # 700 + 500 tasks in batches of 500: 2 + 1 rows, all swept
        assert sweep(url)[0] == 1_200
    check = redis.Redis.from_url(valkey_url)
    assert list(check.scan_iter(match=f"{client.prefix}:*")) == []
    check.close()
