"""``tierq-hot-sketch``: tierq's engine with the writes of design A sketched in, to measure
end to end what the design's estimates say (docs/design-rotating-tables.md, section 3).

A benchmark system, not a product path: it answers "would a narrow table for the tasks that
go warm bring PostgreSQL's CPU per task to half the bare table's?" before the two weeks the
design needs are spent. Each worker process runs the ``Tierq`` engine of ``tierq-engine``
(bench/systems/tierq_engine.py) with four of its store's statements swapped for design A's:

=================================  ==========================================================
the engine's statement             the sketch's (when)
=================================  ==========================================================
``insert_tasks_uniform``           ``sketch_insert_hot``: the rows into ``tierq_hot`` (its
                                   primary key only), each (pair, minute) once into
                                   ``tierq_hot_pairs`` (a batch admitted warm without a time
                                   limit: the shapes' batches)
``insert_tasks_uniform_keyed``     ``sketch_insert_hot_keyed``: the keyless rows as above, the
                                   keyed ones into ``tierq_tasks`` as today, ``ON CONFLICT``
                                   on the live key (the same, with keys: the mixed shape)
``ack_delete``                     ``sketch_ack_delete``: delete from ``tierq_hot`` by key,
                                   then from ``tierq_tasks`` the ids not found there (every
                                   ack of one attempt and tenant)
``ack_delete_by_attempt``          ``sketch_ack_delete_by_attempt``: the same, each row paired
                                   with its own tenant and attempt (acks over tenants)
=================================  ==========================================================

Any other batch and every other statement run as the engine's; each run's notes say how
many of its rows went into ``tierq_hot`` (none: the figures are the engine's). Its PostgreSQL
figures are roughly a floor for design A, not a measure of it, since it leaves out:

* the reaper's and reconciler's reads of the hot rows: they see only ``tierq_tasks`` here,
  so a hot row lost by Valkey would never come back, and the reaper does not expire the
  leases of a pair whose rows are all hot;
* the statements that move a hot row into ``tierq_tasks`` or read it by id (nack, expiry,
  release, an ack with a result, cancel, a task's GET, a child waiting on it): none happens
  in these shapes, whose warm tier never fills either;
* deleting ``tierq_hot_pairs`` rows once their minute is past (about one row per pair and
  minute);
* vacuum's share: autovacuum runs inside a phase by chance only.
The ack is the sketch's own form: it is not told which ids are keyed, so it looks in both
tables; an engine that told it could delete each row from its own table. Behind a pooler
(``TIERQ_DB_POOLER=transaction``) the engine's statements run as functions and the
sketch's do not: compare on direct connections.
"""

from __future__ import annotations

from typing import Any

from bench.systems import Prepared, count_rows
from bench.systems.sketches import (
    KEYED_INTO_TASKS,
    NARROW_TASK_COLUMNS,
    SketchedEngine,
    pairs_table,
    warm_batch,
)
from bench.systems.tierq_engine import UNFINISHED

# The sketch's tables, created in the system's fresh database after tierq's migrations.
# tierq_hot holds the columns a hot task needs to be claimed again from PostgreSQL (a
# retry, a restore) and nothing else: no key, group, flow, time limit or trace (such a
# task stays in tierq_tasks); its state is "warm", so it has no column.
SCHEMA = f"""
CREATE TABLE tierq_hot ({NARROW_TASK_COLUMNS})
WITH (fillfactor = 100, autovacuum_vacuum_scale_factor = 0.01,
      autovacuum_vacuum_insert_scale_factor = 0.01);
{pairs_table("tierq_hot_pairs")}"""

# The batch's rows as insert_tasks_uniform reads them, and their place in line (seq).
ROWS = """ROWS FROM (unnest(%(ids)s::uuid[]),
                   jsonb_array_elements_text(%(tenants)s::jsonb),
                   unnest(%(priorities)s::smallint[]),
                   jsonb_array_elements(%(payloads)s::jsonb))
        WITH ORDINALITY AS v(id, tenant, priority, payload, n)"""

# The pairs of the rows inserted, once per batch and minute.
_PAIRS = """pairs AS (
    INSERT INTO tierq_hot_pairs (queue, tenant, minute)
    SELECT DISTINCT %(queue)s, i.tenant,
           floor(extract(epoch FROM %(now)s::timestamptz) / 60)::bigint
    FROM ins AS i
    ON CONFLICT DO NOTHING
)"""

QUERIES = {
    # insert_tasks_uniform for a batch admitted warm: (first seq, rows inserted)
    "sketch_insert_hot": f"""
WITH b AS (SELECT nextval('tierq_task_seq') AS seq),
ins AS (
    INSERT INTO tierq_hot (id, queue, tenant, priority, seq, max_attempts, payload, created_at)
    SELECT v.id, %(queue)s, v.tenant, v.priority, b.seq + v.n - 1, %(max_attempts)s,
           v.payload, %(now)s
    FROM b, {ROWS}
    RETURNING tenant
),
{_PAIRS}
SELECT b.seq, (SELECT count(*) FROM ins) FROM b""",
    # insert_tasks_uniform_keyed for a batch admitted warm: the keyed rows inserted (id,
    # seq), then (NULL, the batch's first seq)
    "sketch_insert_hot_keyed": f"""
WITH b AS (SELECT nextval('tierq_task_seq') AS seq),
v AS (
    SELECT v.id, v.tenant, v.key, v.priority, v.payload, b.seq + v.n - 1 AS seq
    FROM b, ROWS FROM (unnest(%(ids)s::uuid[]),
                       jsonb_array_elements_text(%(tenants)s::jsonb),
                       jsonb_array_elements_text(%(keys)s::jsonb),
                       unnest(%(priorities)s::smallint[]),
                       jsonb_array_elements(%(payloads)s::jsonb))
            WITH ORDINALITY AS v(id, tenant, key, priority, payload, n)
),
ins AS (
    INSERT INTO tierq_hot (id, queue, tenant, priority, seq, max_attempts, payload, created_at)
    SELECT v.id, %(queue)s, v.tenant, v.priority, v.seq, %(max_attempts)s, v.payload, %(now)s
    FROM v WHERE v.key IS NULL
    RETURNING tenant
),
{_PAIRS},
{KEYED_INTO_TASKS}
SELECT id, seq FROM keyed
UNION ALL SELECT NULL, seq FROM b""",
    # ack_delete: the hot rows by key, then the ids not found there in tierq_tasks
    "sketch_ack_delete": """
WITH hot AS (
    DELETE FROM tierq_hot
    WHERE id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND queue = %(queue)s
      AND tenant = ANY(%(tenant_set)s::text[]) AND attempts < %(attempt)s
    RETURNING id
),
rest AS (
    DELETE FROM tierq_tasks
    WHERE id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]) EXCEPT SELECT id FROM hot))
      AND queue = %(queue)s AND tenant = ANY(%(tenant_set)s::text[])
      AND (state = 'warm') IS TRUE AND attempts < %(attempt)s AND waiters = 0
    RETURNING id::text, grp
)
SELECT id::text, NULL::text AS grp FROM hot
UNION ALL SELECT id, grp FROM rest""",
    # ack_delete_by_attempt: the same, each row paired with its lease's tenant and attempt
    "sketch_ack_delete_by_attempt": """
WITH v AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tenants)s::text[], %(attempts)s::int[])
        AS v(id, tenant, attempt)
),
hot AS (
    DELETE FROM tierq_hot h USING v
    WHERE h.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND h.id = v.id
      AND h.queue = %(queue)s AND h.tenant = v.tenant AND h.attempts < v.attempt
    RETURNING h.id
),
rest AS (
    DELETE FROM tierq_tasks t USING v
    WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]) EXCEPT SELECT id FROM hot))
      AND t.id = v.id AND t.queue = %(queue)s AND t.tenant = v.tenant
      AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt AND t.waiters = 0
    RETURNING t.id::text, t.grp
)
SELECT id::text, NULL::text AS grp FROM hot
UNION ALL SELECT id, grp FROM rest""",
}


def rows_written(database_url: str) -> tuple[int, int]:
    """Rows inserted so far into (``tierq_hot``, ``tierq_tasks``), as the server's
    statistics count them."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        found: dict[str, int] = dict(conn.execute(
            "SELECT relname, n_tup_ins FROM pg_stat_user_tables "
            "WHERE relname IN ('tierq_hot', 'tierq_tasks')").fetchall())
    return int(found.get("tierq_hot", 0)), int(found.get("tierq_tasks", 0))


def sketch_store(store: Any) -> None:
    """Swap the four statements of this process's engine store for the sketch's (the
    module's table); every other statement stays the engine's."""
    from psycopg.rows import tuple_row

    from tierq.dal.postgres import int_array, text_array, uuid_array
    from tierq.dal.store.base import positional
    from tierq.dal.store.rows import AckedRow

    store._sql = {**store._sql, **QUERIES}
    plain, keyed = store.insert_tasks_uniform, store.insert_tasks_uniform_keyed
    acked = positional(AckedRow)

    def insert_uniform(queue: str, now: Any, columns: Any, *, conn: Any = None
                       ) -> tuple[int, int]:
        if not warm_batch(columns):
            return plain(queue, now, columns, conn=conn)
        [(first, count)] = store._fetch("sketch_insert_hot",
                                        {"queue": queue, "now": now, **columns}, tuple_row,
                                        conn)
        return first, count

    def insert_uniform_keyed(queue: str, now: Any, columns: Any, *, conn: Any = None
                             ) -> tuple[int, dict[str, int]]:
        if not warm_batch(columns):
            return keyed(queue, now, columns, conn=conn)
        first, inserted = 0, {}
        for task_id, seq in store._fetch("sketch_insert_hot_keyed",
                                         {"queue": queue, "now": now, **columns}, tuple_row,
                                         conn):
            if task_id is None:
                first = seq
            else:
                inserted[task_id] = seq
        return first, inserted

    def ack_delete(queue: str, ids: Any, tenants: Any, attempt: int, *,
                   relaxed: bool = False) -> list[Any]:
        return store._fetch("sketch_ack_delete", {
            "queue": queue, "ids": uuid_array(ids),
            "tenant_set": text_array(sorted(set(tenants))), "attempt": attempt}, acked,
            relaxed=relaxed)

    def ack_delete_by_attempt(queue: str, ids: Any, tenants: Any, attempts: Any, *,
                              relaxed: bool = False) -> list[Any]:
        return store._fetch("sketch_ack_delete_by_attempt", {
            "queue": queue, "ids": uuid_array(ids), "tenants": text_array(tenants),
            "attempts": int_array(attempts)}, acked, relaxed=relaxed)

    store.insert_tasks_uniform = insert_uniform
    store.insert_tasks_uniform_keyed = insert_uniform_keyed
    store.ack_delete = ack_delete
    store.ack_delete_by_attempt = ack_delete_by_attempt


class HotTableSketch(SketchedEngine):
    """tierq's engine with design A's writes sketched in (the module's docstring)."""

    name = "tierq-hot-sketch"
    preload = (*SketchedEngine.preload, "bench.systems.hot_sketch")
    schema = SCHEMA
    word = "hot"

    def run_notes(self, prepared: Prepared) -> list[str]:
        """How many of the run's rows went into ``tierq_hot``: a run whose batches all took
        the engine's statements (admitted cold, a time limit, a changed engine) measured
        today's code, not the sketch, and says so."""
        hot, tasks = rows_written(prepared.database_url)
        if hot == 0:
            return [f"NOT THE SKETCH: no row of {tasks:,} went into tierq_hot"]
        return [f"{hot:,} of {hot + tasks:,} rows into tierq_hot"]

    def remaining(self, prepared: Prepared) -> int:
        """Unfinished tasks of both tables."""
        return (count_rows(prepared.database_url, UNFINISHED)
                + count_rows(prepared.database_url, "SELECT count(*) FROM tierq_hot"))
