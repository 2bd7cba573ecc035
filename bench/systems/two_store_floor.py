"""``two-store-floor`` and ``two-store-floor+batch-rows``: the least any queue with
PostgreSQL as its system of record and Valkey as its dispatcher can do per task, measured
beside tierq and the bare table.

A benchmark system, not a product path: it answers "could a second store beat the bare
``FOR UPDATE SKIP LOCKED`` table at all on this machine, and by how much?" (issue 29). It
keeps the contract tierq's design must keep and nothing else:

* every unfinished task is a row in PostgreSQL, committed before Valkey hears of it;
* a claim leases from Valkey alone, under a token, with an expiry in a sorted set;
* an ack is committed in PostgreSQL before its lease is dropped.

Each store does the least it can, with a row per task (``two-store-floor``) or a row per
enqueued batch (``two-store-floor+batch-rows``, ``batch_rows=True``):

==================  ======================================================================
step                the floor's statements
==================  ======================================================================
produce             ``INSERT`` of the batch into ``fq`` (its primary key its only index;
                    ids made by the client, so nothing is returned), then one ``RPUSH``
                    per priority of ``<id><payload>`` elements
claim               one script: the lease of the claim acked last dropped (its list and
                    its expiry deleted: the ack's commit came first), then ``LPOP …
                    count`` from the highest priority down, the elements kept in one list
                    per lease and the lease's expiry in a sorted set
ack                 ``DELETE … WHERE id = ANY(…)`` (autocommit); its lease dropped by the
                    next claim (a worker's loop is two round trips, as the bare table's)
produce, batch      one row into ``fq_batches`` holding the batch's payloads (and tenants
rows                and priorities) as arrays; a task's id is its batch's id shifted left
                    by ``PLACE_BITS`` plus its place in it; then the elements as above
ack, batch rows     one row into ``fq_acks`` holding the ids (a heap without an index, no
                    arbitration: the lease's token is the only check, in Valkey), the
                    lease dropped as above
==================  ======================================================================

With batch rows a sweep after the phases (``sweep``) deletes every batch whose tasks were
all acked, then empties the acks with ``TRUNCATE`` (a maintenance job would delete the acks
of finished batches and vacuum both tables); its backend's CPU per task is the run's
PostgreSQL work apart (``pg_us_per_task_apart``), which ``bench.vs_bare`` adds to the
system's figure.

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
    sweep_then_empty,
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

BATCH_DDL: LiteralString = """
CREATE TABLE fq_batches (id bigint PRIMARY KEY, tenants text[], priorities smallint[],
  payloads jsonb[] NOT NULL);
CREATE TABLE fq_acks (ids int8[] NOT NULL);
"""
PRODUCE_BATCH: LiteralString = "INSERT INTO fq_batches (id, payloads) VALUES (%s, %s::jsonb[])"
PRODUCE_BATCH_MIXED: LiteralString = (
    "INSERT INTO fq_batches (id, tenants, priorities, payloads) "
    "VALUES (%s, %s::text[], %s::smallint[], %s::jsonb[])")
ACK_BATCH: LiteralString = "INSERT INTO fq_acks (ids) VALUES (%s)"
PLACE_BITS = 10  # a batch of at most 1,024 tasks
# tasks of the batch rows not yet acked (an id acked twice counts once; 10: PLACE_BITS)
UNFINISHED_BATCHES: LiteralString = """
SELECT coalesce((SELECT sum(cardinality(payloads)) FROM fq_batches), 0)
     - (SELECT count(DISTINCT id) FROM fq_acks, unnest(ids) AS id
        WHERE id >> 10 IN (SELECT id FROM fq_batches))
"""
# the batches whose every task was acked (10: PLACE_BITS), deleted; then the acks (maintenance
# would delete only the acks of finished batches; after the phases every batch is finished)
SWEEP: LiteralString = """
WITH acked AS (
    SELECT id >> 10 AS batch, count(DISTINCT id) AS n FROM fq_acks, unnest(ids) AS id
    GROUP BY 1
),
gone AS (
    DELETE FROM fq_batches b USING acked a
    WHERE b.id = a.batch AND cardinality(b.payloads) = a.n RETURNING cardinality(b.payloads)
)
SELECT coalesce(sum(cardinality), 0) FROM gone
"""
PRELOAD = ("bench.systems.two_store_floor", "psycopg", "orjson", "redis")

PRIORITIES = 10
ID_BYTES = 8

# KEYS: the leases' sorted set, this lease's list, the list of a lease to drop first (this
# lease's when none), the ready lists from the highest priority down. ARGV: how many, the
# lease's expiry, its token, the token of the lease to drop ('' for none).
CLAIM_LUA = """
if ARGV[4] ~= '' then
  redis.call('DEL', KEYS[3])
  redis.call('ZREM', KEYS[1], ARGV[4])
end
local want = tonumber(ARGV[1])
local got = {}
for i = 4, #KEYS do
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

    def __init__(self, database_url: str, valkey_url: str, prefix: str = "fq",
                 batch_rows: bool = False) -> None:
        import psycopg
        import redis

        self.conn = psycopg.connect(database_url, autocommit=True)
        self.valkey = redis.Redis.from_url(valkey_url)
        self.ready = [f"{prefix}:{{q}}:ready:{p}" for p in range(PRIORITIES)]
        self.ready_down = self.ready[::-1]
        self.leases = f"{prefix}:{{q}}:leases"
        self.prefix = prefix
        self.batch_rows = batch_rows
        self._claim = self.valkey.register_script(CLAIM_LUA)
        self._drop = self.valkey.register_script(DROP_LUA)
        self.drop_next = ""  # the token of an acked claim whose lease the next call drops

    def lease_key(self, token: str) -> str:
        return f"{self.prefix}:{{q}}:lease:{token}"

    def warm(self) -> None:
        """Connect both stores before the clock starts, as the other systems do."""
        self.conn.execute("SELECT 1")
        self.valkey.ping()

    def produce(self, ids: list[int], payloads: list[bytes],
                tenants: list[str] | None = None, priorities: list[int] | None = None
                ) -> None:
        """Commit the tasks' rows (or their batch's row: ids ``batch << PLACE_BITS | place``
        in order), then push their elements (one ``RPUSH`` per priority)."""
        texts = [raw.decode() for raw in payloads]
        elements = [n.to_bytes(ID_BYTES, "big") + raw
                    for n, raw in zip(ids, payloads, strict=True)]
        if self.batch_rows:
            batch = ids[0] >> PLACE_BITS
            if priorities is None:
                self.conn.execute(PRODUCE_BATCH, (batch, texts))
            else:
                self.conn.execute(PRODUCE_BATCH_MIXED, (batch, tenants, priorities, texts))
        elif priorities is None:
            self.conn.execute(PRODUCE, (ids, texts))
        else:
            self.conn.execute(PRODUCE_MIXED, (ids, tenants, priorities, texts))
        if priorities is None:
            self.valkey.rpush(self.ready[0], *elements)
            return
        by_priority: dict[int, list[bytes]] = {}
        for p, element in zip(priorities, elements, strict=True):
            by_priority.setdefault(p, []).append(element)
        pipe = self.valkey.pipeline(transaction=False)
        for p, group in by_priority.items():
            pipe.rpush(self.ready[p], *group)
        pipe.execute()

    def claim(self, limit: int, lease_seconds: float) -> list[tuple[str, int, Any]]:
        """Lease up to ``limit`` tasks, the highest priority first: (token, id, payload).
        The lease of the last claim acked is dropped first, in the same script (the ack's
        commit came before this call)."""
        import orjson

        token = os.urandom(8).hex()
        lease = self.lease_key(token)
        dropped, self.drop_next = self.drop_next, ""
        got: list[bytes] = self._claim(
            keys=[self.leases, lease, self.lease_key(dropped) if dropped else lease,
                  *self.ready_down],
            args=[limit, time.time() + lease_seconds, token, dropped])
        return [(token, int.from_bytes(e[:ID_BYTES], "big"), orjson.loads(e[ID_BYTES:]))
                for e in got]

    def ack(self, claimed: Sequence[tuple[str, int, Any]]) -> int:
        """Delete one claim's rows (or append its ids to the acks), committed: how many
        tasks it finished. Its lease is dropped by the next claim, or ``drop_held``."""
        ids = [task[1] for task in claimed]
        if self.batch_rows:
            self.conn.execute(ACK_BATCH, (ids,))
            deleted = len(ids)
        else:
            deleted = self.conn.execute(ACK, (ids,)).rowcount
        self.drop_held()
        self.drop_next = claimed[0][0]
        return deleted

    def drop_held(self) -> None:
        """Drop the lease an ack left for the next claim, alone."""
        if self.drop_next:
            token, self.drop_next = self.drop_next, ""
            self._drop(keys=[self.leases, self.lease_key(token)], args=[token])

    def close(self) -> None:
        self.drop_held()
        self.conn.close()
        self.valkey.close()


def floor_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    """A producer: each batch committed in ``fq``, then its elements pushed by priority."""
    import orjson

    client = FloorClient(spec["database_url"], spec["valkey_url"], spec.get("prefix", "fq"),
                         spec.get("batch_rows", False))
    size = spec.get("batch", TIERQ_ENQUEUE_BATCH)
    if not 0 < size <= 1 << PLACE_BITS:
        raise ValueError(f"a batch of the floor holds 1 to {1 << PLACE_BITS} tasks, got {size}")
    latencies: list[float] = []
    lo = spec["range"][0]
    rows = mixed_rows(spec, "")
    # ids unique across processes and phases without a sequence: a random prefix per process
    salt = random.Random(os.urandom(8)).getrandbits(30)
    client.warm()
    sync.ready_and_wait(spec["index"])
    for batch in batches(spec, sync, size):
        if client.batch_rows:  # (batch.start // size grows by one a batch)
            if batch.start // size >= 1 << 20:
                raise ValueError("the floor numbers at most 2**20 batches a producer")
            first = ((salt << 20) + batch.start // size) << PLACE_BITS
            ids = [first + place for place in range(len(batch))]
        else:
            ids = [(salt << 32) + i for i in batch]
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
    client = FloorClient(spec["database_url"], spec["valkey_url"], spec.get("prefix", "fq"),
                         spec.get("batch_rows", False))
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


def sweep(database_url: str) -> tuple[int, float | None]:
    """Delete the batches whose tasks were all acked, and the acks: (tasks of the batches
    deleted, the backend's CPU seconds for it, None where its process cannot be read)."""
    return sweep_then_empty(database_url, SWEEP, "SELECT count(*) FROM fq_batches",
                            "TRUNCATE fq_acks")


class TwoStoreFloor(System):
    name = "two-store-floor"
    uses_valkey = True
    preload = PRELOAD

    def __init__(self, workload: Workload | None = None, batch_rows: bool = False) -> None:
        self.workload = workload
        self.batch_rows = batch_rows
        if batch_rows:
            self.name = "two-store-floor+batch-rows"

    def prepare(self, stores: Stores) -> Prepared:
        import psycopg

        url = stores.fresh_database("bench_floor")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(BATCH_DDL if self.batch_rows else DDL)
        stores.clear_valkey()
        spec: dict[str, Any] = {"database_url": url, "valkey_url": stores.valkey_url,
                                "batch_rows": self.batch_rows}
        if self.workload is not None:
            spec.update(self.workload.spec())
        return Prepared(self.name, spec, url)

    def producer(self) -> Target:
        return floor_produce

    def consumer(self) -> Target:
        return floor_consume

    def pg_us_per_task_apart(self, prepared: Prepared) -> float | None:
        """With batch rows, the sweep in backend CPU microseconds per task of the batches
        deleted; None without them, when nothing was deleted, or when its backend's CPU
        cannot be read."""
        if not self.batch_rows:
            return None
        tasks, seconds = sweep(prepared.database_url)
        return None if not tasks or seconds is None else seconds * 1e6 / tasks

    def remaining(self, prepared: Prepared) -> int:
        return count_rows(prepared.database_url,
                          UNFINISHED_BATCHES if self.batch_rows else UNFINISHED)
