"""``bare-table``: one durable PostgreSQL table read with ``FOR UPDATE SKIP LOCKED``, the
floor PGQueuer and procrastinate sit on and the one tierq's warm tier has to beat (issue 29).

The table, its index and the three statements are the issue's, word for word (``DDL``,
``PRODUCE``, ``CLAIM``, ``ACK``): psycopg 3, autocommit (every statement its own durable
transaction: the server runs with ``fsync`` and ``synchronous_commit`` on), one connection
per process. Producers insert 500 rows a statement; a consumer leases up to its claim size
for 300 s (``attempts`` counted), then deletes what it claimed. It is at-least-once with
leases and attempts, and has none of tierq's tenants, keys, fair rotation, limits or dead
letters.

With a mixed ``Workload`` (bench.vs_bare) the rows carry the same tenants and priorities as
tierq's: the table gets a ``tenant`` column (``TENANT_DDL``; ``_``, tierq's default
tenant, for a task without one) and claims still order by priority only, without rotating
across tenants. Keys are not stored: the table has no idempotency to spend them on.

Payloads are serialised with orjson, as tierq does, and sent as one text array cast to
``jsonb[]``; claimed payloads are parsed with orjson too (psycopg's ``set_json_loads``), so
the floor's client is no slower than it needs to be.

``BareTable(client_us=N)`` (``bench.vs_bare --bare-client-us N``, named
``bare-table+<N>us``) makes its clients spend N µs more CPU per task, spinning (half after
each produce, half after each ack): whether a heavier client on the same 2 cores changes
what PostgreSQL spends per task, which tierq's clients (several times the bare loop's CPU)
could otherwise be blamed for.

``BareTable(custom_plans=True)`` (``bench.vs_bare --bare-custom-plans``, named
``bare-table+custom-plans``) sets ``plan_cache_mode = force_custom_plan`` on its
connections: every statement planned for its own parameters and the table as it is then.
psycopg prepares a statement on its sixth run; PostgreSQL plans a prepared statement's
first five runs for their parameters, then may keep one generic plan if its estimated cost
is not above theirs (until the table's statistics or schema change). A generic plan of
``CLAIM`` can be a hash semi join over a sequential scan of the whole table a claim, where
a custom plan probes the rows the subquery locks. The default keeps psycopg's and
PostgreSQL's defaults, as the issue's statements are run; this variant measures what
planning every statement instead costs or saves the bare table.
"""

from __future__ import annotations

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
CREATE TABLE q (id bigserial PRIMARY KEY, priority smallint NOT NULL DEFAULT 0,
  payload jsonb NOT NULL, attempts int NOT NULL DEFAULT 0, leased_until timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()) WITH (fillfactor = 70);
CREATE INDEX q_ready ON q (priority DESC, id);
"""
TENANT_DDL: LiteralString = "ALTER TABLE q ADD COLUMN tenant text NOT NULL"
PRODUCE: LiteralString = "INSERT INTO q (payload) SELECT unnest(%s::jsonb[])"
PRODUCE_MIXED: LiteralString = (
    "INSERT INTO q (tenant, priority, payload) "
    "SELECT * FROM unnest(%s::text[], %s::smallint[], %s::jsonb[])")
CLAIM: LiteralString = (
    "UPDATE q SET leased_until = now() + interval '300 s', attempts = attempts + 1 "
    "WHERE id IN (SELECT id FROM q WHERE leased_until IS NULL OR leased_until < now() "
    "ORDER BY priority DESC, id LIMIT %s FOR UPDATE SKIP LOCKED) "
    "RETURNING id, payload")
ACK: LiteralString = "DELETE FROM q WHERE id = ANY(%s)"
UNFINISHED: LiteralString = "SELECT count(*) FROM q"
PRELOAD = ("bench.systems.bare_table", "psycopg", "orjson")


def connect(spec: dict[str, Any]) -> Any:
    """The process's one connection: autocommit, claimed payloads parsed by orjson; with
    ``custom_plans`` in the spec, every statement planned for its parameters."""
    import orjson
    import psycopg
    from psycopg.types.json import set_json_loads

    conn = psycopg.connect(spec["database_url"], autocommit=True)
    set_json_loads(orjson.loads, conn)
    if spec.get("custom_plans"):
        conn.execute("SET plan_cache_mode = force_custom_plan")
    return conn


def spin(us_per_task: float, tasks: int) -> None:
    """Spend ``us_per_task`` µs of this thread's CPU per task (nothing for 0)."""
    if us_per_task <= 0:
        return
    until = time.thread_time() + us_per_task * tasks / 1e6
    while time.thread_time() < until:
        pass


def bare_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    import orjson

    conn = connect(spec)
    latencies: list[float] = []
    lo = spec["range"][0]
    rows = mixed_rows(spec, "")
    conn.execute("SELECT 1")
    sync.ready_and_wait(spec["index"])
    for batch in batches(spec, sync, spec.get("batch", TIERQ_ENQUEUE_BATCH)):
        payloads = [orjson.dumps({"i": i}).decode() for i in batch]
        began = time.perf_counter()
        if rows is None:
            conn.execute(PRODUCE, (payloads,))
        else:
            conn.execute(PRODUCE_MIXED, (
                [rows.tenants[i - lo] or "_" for i in batch],
                [rows.priorities[i - lo] for i in batch], payloads))
        latencies.append(time.perf_counter() - began)
        spin(spec.get("client_us", 0.0) / 2, len(payloads))
        sync.add_enqueued(len(payloads))
    t_end = time.time()
    conn.close()
    return produced(spec, t_end, latencies)


def bare_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    """A worker: lease a batch (``CLAIM``), delete it (``ACK``), until the phase's tasks are
    finished."""
    conn = connect(spec)
    limit = spec.get("claim_batch", TIERQ_CLAIM_BATCH)
    conn.execute("SELECT 1")

    def claim() -> Sequence[Any]:
        rows: list[tuple[int, Any]] = conn.execute(CLAIM, (limit,)).fetchall()
        return rows

    def ack(got: Sequence[Any]) -> tuple[int, int]:
        deleted = conn.execute(ACK, ([row[0] for row in got],)).rowcount
        spin(spec.get("client_us", 0.0) / 2, len(got))
        return deleted, len(got) - deleted

    sync.ready_and_wait(spec["index"])
    out = claim_and_ack_loop(sync, claim, ack)
    conn.close()
    return out


class BareTable(System):
    name = "bare-table"
    preload = PRELOAD

    def __init__(self, workload: Workload | None = None, client_us: float = 0.0,
                 custom_plans: bool = False) -> None:
        if client_us < 0:
            raise ValueError(f"client_us must be 0 or more, got {client_us:g}")
        self.workload = workload
        self.client_us = client_us
        self.custom_plans = custom_plans
        self.name = "".join(["bare-table", f"+{client_us:g}us" if client_us else "",
                             "+custom-plans" if custom_plans else ""])

    def prepare(self, stores: Stores) -> Prepared:
        import psycopg

        url = stores.fresh_database("bench_bare")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(DDL)
            if self.workload is not None and self.workload.mixed:
                conn.execute(TENANT_DDL)
        spec: dict[str, Any] = {"database_url": url}
        if self.workload is not None:
            spec.update(self.workload.spec())
        spec["client_us"] = self.client_us
        spec["custom_plans"] = self.custom_plans
        return Prepared(self.name, spec, url)

    def producer(self) -> Target:
        return bare_produce

    def consumer(self) -> Target:
        return bare_consume

    def remaining(self, prepared: Prepared) -> int:
        return count_rows(prepared.database_url, UNFINISHED)
