"""``two-store-floor``: the least any queue with PostgreSQL as its system of record and
Valkey as its dispatcher can do per task, measured beside tierq and the bare table.

A benchmark system, not a product path: it answers "could a second store beat the bare
``FOR UPDATE SKIP LOCKED`` table at all on this machine, and by how much?" (issue 29). It
keeps the contract tierq's design must keep and nothing else:

* every unfinished task is a row in PostgreSQL, committed before Valkey hears of it;
* a claim leases from Valkey alone, under a token, with an expiry in a sorted set;
* an ack's delete is committed in PostgreSQL before its lease is dropped.

Each store does the least it can:

==================  ======================================================================
step                the floor's statements
==================  ======================================================================
produce             ``INSERT`` of the batch into ``fq`` (its primary key its only index;
                    ids made by the client, so nothing is returned), then one ``RPUSH``
                    per priority of ``<id><payload>`` elements
claim               one script: ``LPOP … count`` from the highest priority down, the
                    elements kept in one list per lease and the lease's expiry in a
                    sorted set
ack                 ``DELETE … WHERE id = ANY(…)`` (autocommit), then one script deleting
                    the lease's list and its expiry
==================  ======================================================================

It has none of tierq's tenants in the warm tier (no fair rotation: claims order by priority
only, as the bare table's), keys, limits, attempts, dead letters, lease checks before an
ack, lease expiry or cold tier: it is a floor under every two-store design, tierq's
included, not a design. Its tasks' tenants and priorities are stored as the bare table's
are (a mixed ``Workload``); keys are not stored (the bare table has no idempotency to spend
them on either).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, LiteralString

from bench.phases import Sync, Target
from bench.systems import (
    TIERQ_CLAIM_BATCH,
    TIERQ_ENQUEUE_BATCH,
    Prepared,
    System,
    Workload,
    batches,
    claim_and_ack_loop,
    count_rows,
    mixed_rows,
    produced,
)

if TYPE_CHECKING:
    from bench.stores import Stores

DDL: LiteralString = """
CREATE TABLE fq (id bigint PRIMARY KEY, tenant text NOT NULL DEFAULT '_',
  priority smallint NOT NULL DEFAULT 0, payload jsonb NOT NULL);
"""
PRODUCE: LiteralString = (
    "INSERT INTO fq (id, payload) SELECT * FROM unnest(%s::int8[], %s::jsonb[])")
PRODUCE_MIXED: LiteralString = (
    "INSERT INTO fq (id, tenant, priority, payload) "
    "SELECT * FROM unnest(%s::int8[], %s::text[], %s::smallint[], %s::jsonb[])")
ACK: LiteralString = "DELETE FROM fq WHERE id = ANY(%s)"
UNFINISHED: LiteralString = "SELECT count(*) FROM fq"
PRELOAD = ("bench.systems.two_store_floor", "psycopg", "orjson", "redis")

PRIORITIES = 10
ID_BYTES = 8

# KEYS: the leases' sorted set, this lease's list, the ready lists from the highest
# priority down. ARGV: how many, the lease's expiry, its token.
CLAIM_LUA = """
local want = tonumber(ARGV[1])
local got = {}
for i = 3, #KEYS do
  local need = want - #got
  if need <= 0 then break end
  local items = redis.call('LPOP', KEYS[i], need)
  if items then
    for _, e in ipairs(items) do got[#got + 1] = e end
  end
end
if #got > 0 then
  redis.call('RPUSH', KEYS[2], unpack(got))
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
end
return got
"""
# KEYS: the leases' sorted set, the lease's list. ARGV: its token.
DROP_LUA = """
redis.call('DEL', KEYS[2])
return redis.call('ZREM', KEYS[1], ARGV[1])
"""


class FloorClient:
    """One process's connections and the floor's three steps over them.

    Every key starts with ``prefix`` and one hash tag, so a script's keys share a slot as
    they must on a cluster.
    """

    def __init__(self, database_url: str, valkey_url: str, prefix: str = "fq") -> None:
        import psycopg
        import redis

        self.conn = psycopg.connect(database_url, autocommit=True)
        self.valkey = redis.Redis.from_url(valkey_url)
        self.ready = [f"{prefix}:{{q}}:ready:{p}" for p in range(PRIORITIES)]
        self.ready_down = self.ready[::-1]
        self.leases = f"{prefix}:{{q}}:leases"
        self.prefix = prefix
        self._claim = self.valkey.register_script(CLAIM_LUA)
        self._drop = self.valkey.register_script(DROP_LUA)

    def lease_key(self, token: str) -> str:
        return f"{self.prefix}:{{q}}:lease:{token}"

    def warm(self) -> None:
        """Connect both stores before the clock starts, as the other systems do."""
        self.conn.execute("SELECT 1")
        self.valkey.ping()

    def produce(self, ids: list[int], payloads: list[bytes],
                tenants: list[str] | None = None, priorities: list[int] | None = None
                ) -> None:
        """Commit the tasks' rows, then push their elements (one ``RPUSH`` per priority)."""
        texts = [raw.decode() for raw in payloads]
        elements = [n.to_bytes(ID_BYTES, "big") + raw
                    for n, raw in zip(ids, payloads, strict=True)]
        if priorities is None:
            self.conn.execute(PRODUCE, (ids, texts))
            self.valkey.rpush(self.ready[0], *elements)
            return
        self.conn.execute(PRODUCE_MIXED, (ids, tenants, priorities, texts))
        by_priority: dict[int, list[bytes]] = {}
        for p, element in zip(priorities, elements, strict=True):
            by_priority.setdefault(p, []).append(element)
        pipe = self.valkey.pipeline(transaction=False)
        for p, group in by_priority.items():
            pipe.rpush(self.ready[p], *group)
        pipe.execute()

    def claim(self, limit: int, lease_seconds: float) -> list[tuple[str, int, Any]]:
        """Lease up to ``limit`` tasks, the highest priority first: (token, id, payload)."""
        import orjson

        token = os.urandom(8).hex()
        got: list[bytes] = self._claim(
            keys=[self.leases, self.lease_key(token), *self.ready_down],
            args=[limit, time.time() + lease_seconds, token])
        return [(token, int.from_bytes(e[:ID_BYTES], "big"), orjson.loads(e[ID_BYTES:]))
                for e in got]

    def ack(self, claimed: Sequence[tuple[str, int, Any]]) -> int:
        """Delete one claim's rows (committed), then drop its lease: how many rows went."""
        deleted: int = self.conn.execute(ACK, ([task[1] for task in claimed],)).rowcount
        token = claimed[0][0]
        self._drop(keys=[self.leases, self.lease_key(token)], args=[token])
        return deleted

    def close(self) -> None:
        self.conn.close()
        self.valkey.close()


def floor_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    """A producer: each batch committed in ``fq``, then its elements pushed by priority."""
    import orjson

    client = FloorClient(spec["database_url"], spec["valkey_url"], spec.get("prefix", "fq"))
    latencies: list[float] = []
    lo = spec["range"][0]
    rows = mixed_rows(spec, "")
    # ids unique across processes and phases without a sequence: a random prefix per process
    base = random.Random(os.urandom(8)).getrandbits(30) << 32
    client.warm()
    sync.ready_and_wait(spec["index"])
    for batch in batches(spec, sync, spec.get("batch", TIERQ_ENQUEUE_BATCH)):
        ids = [base + i for i in batch]
        raws = [orjson.dumps({"i": i}) for i in batch]
        began = time.perf_counter()
        if rows is None:
            client.produce(ids, raws)
        else:
            client.produce(ids, raws, [rows.tenants[i - lo] or "_" for i in batch],
                           [rows.priorities[i - lo] for i in batch])
        latencies.append(time.perf_counter() - began)
        sync.add_enqueued(len(batch))
    t_end = time.time()
    client.close()
    return produced(spec, t_end, latencies)


def floor_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    """A worker: lease a batch from Valkey, delete its rows, drop its lease, until the
    phase's tasks are finished."""
    client = FloorClient(spec["database_url"], spec["valkey_url"], spec.get("prefix", "fq"))
    limit = spec.get("claim_batch", TIERQ_CLAIM_BATCH)
    lease_seconds = spec.get("lease_seconds", 300)
    client.warm()

    def ack(got: Sequence[Any]) -> tuple[int, int]:
        deleted = client.ack(got)
        return deleted, len(got) - deleted

    sync.ready_and_wait(spec["index"])
    out = claim_and_ack_loop(sync, lambda: client.claim(limit, lease_seconds), ack)
    client.close()
    return out


class TwoStoreFloor(System):
    name = "two-store-floor"
    uses_valkey = True
    preload = PRELOAD

    def __init__(self, workload: Workload | None = None) -> None:
        self.workload = workload

    def prepare(self, stores: Stores) -> Prepared:
        import psycopg

        url = stores.fresh_database("bench_floor")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(DDL)
        stores.clear_valkey()
        spec: dict[str, Any] = {"database_url": url, "valkey_url": stores.valkey_url}
        if self.workload is not None:
            spec.update(self.workload.spec())
        return Prepared(self.name, spec, url)

    def producer(self) -> Target:
        return floor_produce

    def consumer(self) -> Target:
        return floor_consume

    def remaining(self, prepared: Prepared) -> int:
        return count_rows(prepared.database_url, UNFINISHED)
