"""``tierq-append-sketch``: tierq's engine with the writes of design D sketched in: one row
per enqueued batch, as design C's, and an ack that appends one row holding its ids instead
of deleting a row per task or setting bits in a shared row (docs/design-rotating-tables.md,
section 8).

A benchmark system, not a product path: it answers "with tierq's engine and its other
statements, does a row per batch whose acks only append bring PostgreSQL's CPU per task to
half the bare table's at every shape?" before the design is built. The two-store floor
(bench/systems/two_store_floor.py, ``--floor batches``) measured these writes without any of
tierq; design C's sketch (bench/systems/batch_sketch.py) measured the same batch rows with
acks that set bits, whose row locks made acks of one batch wait on each other. Each worker
process runs the engine of ``tierq-engine`` with four of its store's statements swapped:

=================================  ==========================================================
the engine's step                  the sketch's (when)
=================================  ==========================================================
``enqueue.prepare``                ids that name batch and place, as design C's
``insert_tasks_uniform``           ``sketch_d_insert``: one row into ``sketch_batches`` and
                                   each (pair, minute) once into ``sketch_batch_pairs``, as
                                   design C's without its slice rows (a batch admitted
                                   warm without a time limit: the shapes' batches)
``insert_tasks_uniform_keyed``     the batch split by the client (``split_keyed``): its
                                   keyless tasks as above, its keyed ones into
                                   ``tierq_tasks`` by the engine's statement, two
                                   statements
``ack_delete``,                    ``sketch_d_ack``: one row into ``sketch_batch_acks``
``ack_delete_by_attempt``          holding the batch rows' ids the ack names (attempt 1),
                                   and the other ids deleted from ``tierq_tasks`` as today,
                                   in the same statement; every id appended is answered
                                   acked
=================================  ==========================================================

PostgreSQL does not arbitrate the appended acks: the lease check in Valkey (an ack of a
lease held, marked as ending, atomically) is the only one, as it is the first today. What
today's delete also checks — the row is still warm, its attempt not expired by the reaper
after the check, no task waits on it — the design would have to keep another way (section
8 says which). A task acked twice is appended twice and counted once.

Two orders differ from the engine's. A keyed batch's keyed tasks take a block of seqs after
its keyless ones', so in Valkey they come after them. And a keyless task's place in its
batch row counts only keyless tasks, so ``first_seq`` plus its place is not its seq when
a keyed task came before it (as in design C). No reader of batch rows runs here.

A sweep after the run's phases (``sweep``) deletes each batch whose ids were all acked,
then empties the acks with ``TRUNCATE`` (once every batch is finished, as after the phases;
a maintenance job would delete the acks of finished batches, and vacuum both tables); its
backend's CPU per task is the run's PostgreSQL work apart (``pg_us_per_task_apart``), which
``bench.vs_bare`` adds to the sketch's figure. Each run's notes say how many tasks went
into batch rows ("NOT THE SKETCH" when none). An ack of a batch-numbered id whose batch
took the engine's insert (not admitted warm) is answered acked and deletes nothing: only
the run's ``left`` shows it (the shapes' batches are all admitted warm).

It leaves out, as design C's sketch does, every reader of batch rows (the reaper, the
reconciler, a release, a nack, an expiry, a cancel, a task's GET, flows), moving a task out
of its batch row, and deleting ``sketch_batch_pairs`` rows; behind a pooler
(``TIERQ_DB_POOLER=transaction``) its statements are not functions: compare on direct
connections.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from bench.systems import count_rows, sweep_then_empty
from bench.systems.batch_sketch import (
    BATCHES_TABLE,
    BatchRowsSketch,
    batch_member,
    insert_statement,
    install_inserts,
    number_ids,
)
from bench.systems.sketches import (
    SketchedEngine,
    mark_prepared_ids,
    pairs_table,
    swap_acks,
    warm_batch,
)

SCHEMA = BATCHES_TABLE + """
CREATE TABLE sketch_batch_acks (
    queue text NOT NULL,
    ids uuid[] NOT NULL
);
""" + pairs_table("sketch_batch_pairs")

# a batch member's id with its place (digits 16-18) and slice (21-22) zeroed: its batch's
BATCH_OF_ID = ("(left(i::text, 15) || '000' || substr(i::text, 19, 2) || '00' "
               "|| substr(i::text, 23))::uuid")

QUERIES = {
    "sketch_d_insert": insert_statement(slices=False),
    # an ack: the batch members' ids appended in one row; the others' rows deleted as
    # ack_delete_by_attempt deletes them (id, grp)
    "sketch_d_ack": """
WITH appended AS (
    INSERT INTO sketch_batch_acks (queue, ids)
    SELECT %(queue)s, %(appended)s::uuid[] WHERE cardinality(%(appended)s::uuid[]) > 0
),
own AS (
    SELECT * FROM unnest(%(own_ids)s::uuid[], %(own_tenants)s::text[],
                         %(own_attempts)s::int[]) AS o(id, tenant, attempt)
)
DELETE FROM tierq_tasks t USING own
WHERE t.id = ANY(ARRAY(SELECT unnest(%(own_ids)s::uuid[]))) AND t.id = own.id
  AND t.queue = %(queue)s
  AND t.tenant = own.tenant AND (t.state = 'warm') IS TRUE AND t.attempts < own.attempt
  AND t.waiters = 0
RETURNING t.id::text, t.grp""",
}

# tasks of batch rows whose ids no ack names (an id acked twice counts once)
UNFINISHED_IN_BATCHES = f"""
SELECT coalesce((SELECT sum(tasks) FROM sketch_batches), 0)
     - (SELECT count(DISTINCT i) FROM sketch_batch_acks, unnest(ids) AS i
        WHERE {BATCH_OF_ID} IN (SELECT id FROM sketch_batches))
"""
SWEEP = f"""
WITH acked AS (
    SELECT {BATCH_OF_ID} AS batch, count(DISTINCT i) AS n
    FROM sketch_batch_acks, unnest(ids) AS i GROUP BY 1
),
gone AS (
    DELETE FROM sketch_batches b USING acked a WHERE b.id = a.batch AND b.tasks = a.n
    RETURNING b.tasks
)
SELECT coalesce(sum(tasks), 0) FROM gone
"""


def sweep(database_url: str) -> tuple[int, float | None]:
    """Delete the batch rows whose ids were all acked, then the acks once no batch row is
    left (after the phases every batch is finished): (tasks of the batch rows deleted, the
    backend's CPU seconds for it, None where its process cannot be read)."""
    return sweep_then_empty(database_url, SWEEP, "SELECT count(*) FROM sketch_batches",
                            "TRUNCATE sketch_batch_acks")


def split_keyed(columns: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A keyed uniform batch's columns as two uniform batches: (its keyless tasks', for the
    batch row, its keyed tasks', with their keys), each in the batch's order."""
    import orjson

    ids = columns["ids"][1:-1].split(",")
    priorities = columns["priorities"][1:-1].split(",")
    tenants, keys, payloads = (orjson.loads(columns[name])
                               for name in ("tenants", "keys", "payloads"))
    shared = {name: value for name, value in columns.items()
              if name not in ("ids", "tenants", "priorities", "payloads", "keys")}
    parts = []
    for keep in (lambda key: key is None, lambda key: key is not None):
        at = [n for n, key in enumerate(keys) if keep(key)]
        parts.append({**shared, "ids": "{" + ",".join(ids[n] for n in at) + "}",
                      "tenants": orjson.dumps([tenants[n] for n in at]).decode(),
                      "priorities": "{" + ",".join(priorities[n] for n in at) + "}",
                      "payloads": orjson.dumps([payloads[n] for n in at]).decode(),
                      "keys": orjson.dumps([keys[n] for n in at]).decode()})
    keyless, keyed = parts
    del keyless["keys"]
    return keyless, keyed


def sketch_store(store: Any) -> None:
    """Swap the four statements of this process's engine store for the sketch's and number
    the ids its enqueues make; every other statement stays the engine's."""
    from psycopg.rows import tuple_row

    from tierq.dal.postgres import int_array, text_array, uuid_array
    from tierq.dal.store.rows import AckedRow

    mark_prepared_ids(store, "append", number_ids)
    store._sql = {**store._sql, **QUERIES}
    keyed_insert = store.insert_tasks_uniform_keyed
    install_inserts(store, "sketch_d_insert", None, with_slices=False)
    batch_insert = store.insert_tasks_uniform

    def insert_uniform_keyed(queue: str, now: Any, columns: Any, *, conn: Any = None
                             ) -> tuple[int, dict[str, int]]:
        """The keyless tasks into their batch row, then the keyed ones as the engine
        inserts them (each statement's own block of seqs: the engine reads the keyless
        rows' from the first, the keyed rows' from the answer)."""
        if not warm_batch(columns):
            return keyed_insert(queue, now, columns, conn=conn)
        keyless, keyed = split_keyed(columns)
        if keyless["ids"] == "{}":
            return keyed_insert(queue, now, columns, conn=conn)
        first, _ = batch_insert(queue, now, keyless, conn=conn)
        inserted: dict[str, int] = {}
        if keyed["ids"] != "{}":
            _, inserted = keyed_insert(queue, now, keyed, conn=conn)
        return first, inserted

    store.insert_tasks_uniform_keyed = insert_uniform_keyed

    def ack(queue: str, ids: Iterable[str], tenants: Sequence[str],
            attempts: Sequence[int], relaxed: bool) -> list[Any]:
        appended: list[str] = []
        own: list[tuple[str, str, int]] = []
        for task_id, tenant, attempt in zip(ids, tenants, attempts, strict=True):
            if batch_member(task_id) and attempt == 1:
                appended.append(str(task_id))
            else:  # (a keyed task, or one moved out of its batch row by an earlier attempt)
                own.append((str(task_id), tenant, attempt))
        rows = store._fetch("sketch_d_ack", {
            "queue": queue, "appended": uuid_array(appended),
            "own_ids": uuid_array(o[0] for o in own),
            "own_tenants": text_array([o[1] for o in own]),
            "own_attempts": int_array(o[2] for o in own)}, tuple_row, relaxed=relaxed)
        return ([AckedRow(task_id, None) for task_id in dict.fromkeys(appended)]
                + [AckedRow(task_id, grp) for task_id, grp in rows])

    swap_acks(store, ack)


class AppendedAcksSketch(BatchRowsSketch):
    """tierq's engine with design D's writes sketched in (the module's docstring); its run
    notes are design C's."""

    name = "tierq-append-sketch"
    preload = (*SketchedEngine.preload, "bench.systems.append_sketch")
    schema = SCHEMA
    word = "append"

    def sweep(self, database_url: str) -> tuple[int, float | None]:
        return sweep(database_url)

    def unfinished_in_batches(self, database_url: str) -> int:
        return count_rows(database_url, UNFINISHED_IN_BATCHES)
