"""``tierq-batch-sketch``: tierq's engine with the writes of design C sketched in: one row per
enqueued batch, its tasks finished by setting bits (docs/design-rotating-tables.md, section
5).

A benchmark system, not a product path: it answers "would a row per batch of 500, whose
tasks are finished by setting a bit each, bring PostgreSQL's CPU per task to half the bare
table's?" before the design is built. Designs A and B kept a row per task and found that
its insert and its finish are what is left (section 7); here neither is per task. Each
worker process runs the ``Tierq`` engine of ``tierq-engine`` (bench/systems/tierq_engine.py)
with four of its store's statements swapped for design C's, and one step of the enqueue
numbering each id:

=================================  ==========================================================
the engine's step                  the sketch's (when)
=================================  ==========================================================
``enqueue.prepare``                the batch's keyless tasks get ids that name their batch,
                                   their place in it and their slice (``batch_id``); a
                                   keyed task's id says it has a row of its own
``insert_tasks_uniform``           ``sketch_c_insert``: one row into ``sketch_batches`` (the
                                   batch's tenants, priorities and payloads as arrays), its
                                   slice rows into ``sketch_batch_done``, each (pair,
                                   minute) once into ``sketch_batch_pairs`` (a batch admitted
                                   warm without a time limit: the shapes' batches)
``insert_tasks_uniform_keyed``     ``sketch_c_insert_keyed``: the keyless tasks as above,
                                   the keyed ones into ``tierq_tasks`` as today
``ack_delete``                     ``sketch_c_ack``: each slice row the ids name, with the
                                   lease's tenant, locked, the ids' bits set and the bits
                                   that were clear returned (a task finished twice is
                                   refused the second time); the ids of tasks with a row
                                   of their own deleted from ``tierq_tasks`` as today, in
                                   the same statement
``ack_delete_by_attempt``          the same
=================================  ==========================================================

A task's id is a UUIDv7 whose 12-bit counter is its place in its batch, whose two hex
digits after the variant's digit are its slice, and whose other bits are the batch's
(``BATCH_MARK`` set in its variant's digit); the batch row's key is that id with the place
and the slice zeroed. So an ack needs no look-up to find a task's rows, and a batch's tasks
keep their order (seq = the row's first seq + the place). A slice row holds the done bits
of ``SLICE`` tasks of one tenant of the batch, in their order, keyed (batch, tenant,
slice): concurrent claims take a tenant's tasks in order, so two workers' acks meet on a
slice row only at their claims' edges (one row per batch had every ack of a batch wait on
its lock: bench/README.md, *Design C measured end to end*), and an ack naming another
tenant than the task's finds no row. A task on its first attempt is in its batch row; in
the design a nack, an expiry or a refusal by the warm tier moves it out to ``tierq_tasks``
(its bit set), so an ack of a later attempt goes there.

A batch whose slice rows' bits are all set is deleted with them by a sweep (``sweep``) that
runs after the run's phases; its backend's CPU per task is the run's PostgreSQL work apart
(``pg_us_per_task_apart``), which ``bench.vs_bare`` adds to the sketch's figure. Any other
batch and every other statement run as the engine's, but its ids are numbered all the
same: an ack of such a keyless task finds no slice row and finishes nothing, which the
run's ``left`` shows (the shapes' batches are all admitted warm). Each run's notes say how
many tasks went into batch rows ("NOT THE SKETCH" when none).

Its PostgreSQL figures are roughly a floor for design C, since it leaves out:

* the readers of batch rows: the reaper, the reconciler, a release, a nack, an expiry, a
  cancel, a task's GET, and a child waiting on a task see only ``tierq_tasks`` here (none
  happens in these shapes, whose warm tier never fills; a task lost by Valkey would never
  come back), and moving a task out of its batch row;
* deleting ``sketch_batch_pairs`` rows once their minute is past.
Behind a pooler (``TIERQ_DB_POOLER=transaction``) the engine's statements run as functions
and the sketch's do not: compare on direct connections.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from bench.systems import Prepared, count_rows
from bench.systems.sketches import (
    KEYED_INTO_TASKS,
    SketchedEngine,
    mark_prepared_ids,
    pairs_table,
    swap_acks,
    warm_batch,
)
from bench.systems.tierq_engine import UNFINISHED

BITS = 512  # a slice row's done bits: one per place of its batch (at most 500)
SLICE = 16  # a tenant's tasks of a batch per slice row, in their order
# the hex digit after the variant's: 8 or 9 for a task with a row of its own, a or b for a
# task in a batch row (its 0x2 bit)
BATCH_MARK = 0x2


def batch_member(task_id: object) -> bool:
    """Whether ``task_id`` (a ``UUID`` or its text) names a task in a batch row."""
    return int(str(task_id)[19], 16) & BATCH_MARK != 0


def batch_id(task_id: object) -> tuple[str, int, int]:
    """(The batch row's key, the task's place in it, its slice among its tenant's tasks of
    the batch) of a batch member's id: ``xxxxxxxx-xxxx-7PPP-vSSr-rrrrrrrrrrrr``, P the
    place, S the slice, the rest the batch's."""
    text = str(task_id)
    return (text[:15] + "000" + text[18:20] + "00" + text[22:], int(text[15:18], 16),
            int(text[20:22], 16))


def number_ids(prepared: Sequence[Any]) -> None:
    """Give a prepared batch's keyless tasks the ids of one batch, each with its place in
    it and its slice (its rank among the batch's tasks of its tenant // SLICE), and its
    keyed tasks ids that say they have a row of their own."""
    if not prepared:
        return
    # (the first id's milliseconds and version digit, then random bits shared by the
    # batch, marked)
    rand = os.urandom(8).hex()
    variant = f"{0x8 | BATCH_MARK | (int(rand[0], 16) & 0x1):x}"
    head, tail = prepared[0].id[:15], f"{rand[1]}-{rand[4:16]}"
    place = 0
    ranks: dict[str, int] = {}
    for p in prepared:
        if p.key is None:
            rank = ranks.get(p.tenant, 0)
            ranks[p.tenant] = rank + 1
            p.id = f"{head}{place:03x}-{variant}{rank // SLICE:02x}{tail}"
            place += 1
        else:
            digit = int(p.id[19], 16) & ~BATCH_MARK
            p.id = f"{p.id[:19]}{digit:x}{p.id[20:]}"


def _mask(places: Iterable[int], *, clear: bool = False) -> str:
    """A bit(BITS) literal with ``places`` set (or, ``clear``, with only those clear)."""
    bits = ["1" if clear else "0"] * BITS
    for place in places:
        bits[place] = "0" if clear else "1"
    return "".join(bits)


_PAIRS = """pairs AS (
    INSERT INTO sketch_batch_pairs (queue, tenant, minute)
    SELECT DISTINCT %(queue)s, t.tenant,
           floor(extract(epoch FROM %(now)s::timestamptz) / 60)::bigint
    FROM ins, jsonb_array_elements_text(ins.tenants) AS t(tenant)
    ON CONFLICT DO NOTHING
)"""

# A batch's slice rows: each a tenant's SLICE tasks of the batch in their order, its done
# bits clear at their places and set everywhere else
_SLICES = """slices AS (
    INSERT INTO sketch_batch_done (batch, tenant, slice, queue, done)
    SELECT %(batch)s::uuid, s.tenant, s.slice, %(queue)s, s.done
    FROM unnest(%(slice_tenants)s::text[], %(slice_numbers)s::smallint[],
                %(slice_masks)s::bit(512)[]) AS s(tenant, slice, done)
)"""


def insert_statement(*, slices: bool) -> str:
    """insert_tasks_uniform for a batch admitted warm, into one batch row (and its slice
    rows, ``slices``): (first seq, tasks inserted)."""
    return f"""
WITH b AS (SELECT nextval('tierq_task_seq') AS seq),
ins AS (
    INSERT INTO sketch_batches (id, queue, first_seq, tasks, max_attempts, tenants,
                               priorities, payloads, created_at)
    SELECT %(batch)s::uuid, %(queue)s, b.seq, %(tasks)s, %(max_attempts)s,
           %(tenants)s::jsonb, %(priorities)s::smallint[], %(payloads)s::jsonb, %(now)s
    FROM b
    RETURNING tenants
),
{_SLICES + "," if slices else ""}
{_PAIRS}
SELECT b.seq, %(tasks)s FROM b"""


def insert_keyed_statement() -> str:
    """insert_tasks_uniform_keyed for a batch admitted warm: its keyless tasks into one
    batch row and its slice rows, its keyed ones into ``tierq_tasks``; the keyed rows
    inserted (id, seq), then (NULL, the batch's first seq)."""
    return f"""
WITH b AS (SELECT nextval('tierq_task_seq') AS seq),
v AS MATERIALIZED (
    SELECT v.id, v.tenant, v.key, v.priority, v.payload, b.seq + v.n - 1 AS seq, v.n
    FROM b, ROWS FROM (unnest(%(ids)s::uuid[]),
                       jsonb_array_elements_text(%(tenants)s::jsonb),
                       jsonb_array_elements_text(%(keys)s::jsonb),
                       unnest(%(priorities)s::smallint[]),
                       jsonb_array_elements(%(payloads)s::jsonb))
            WITH ORDINALITY AS v(id, tenant, key, priority, payload, n)
),
ins AS (
    INSERT INTO sketch_batches (id, queue, first_seq, tasks, max_attempts, tenants,
                               priorities, payloads, created_at)
    SELECT %(batch)s::uuid, %(queue)s, b.seq, %(tasks)s, %(max_attempts)s,
           (SELECT jsonb_agg(to_jsonb(v.tenant) ORDER BY v.n) FROM v WHERE v.key IS NULL),
           (SELECT array_agg(v.priority ORDER BY v.n) FROM v WHERE v.key IS NULL),
           (SELECT jsonb_agg(v.payload ORDER BY v.n) FROM v WHERE v.key IS NULL), %(now)s
    FROM b
    RETURNING tenants
),
{_SLICES},
{_PAIRS},
{KEYED_INTO_TASKS}
SELECT id, seq FROM keyed
UNION ALL SELECT NULL, seq FROM b"""


# The batch row of a sketch's tables (designs C and D)
BATCHES_TABLE = """
CREATE TABLE sketch_batches (
    id uuid PRIMARY KEY,
    queue text NOT NULL,
    first_seq bigint NOT NULL,
    tasks int NOT NULL,
    max_attempts int NOT NULL,
    tenants jsonb NOT NULL,
    priorities smallint[] NOT NULL,
    payloads jsonb NOT NULL,
    created_at timestamptz NOT NULL
);
"""

# The sketch's tables, created in the system's fresh database after tierq's migrations.
SCHEMA = BATCHES_TABLE + f"""
CREATE TABLE sketch_batch_done (
    batch uuid NOT NULL,
    tenant text NOT NULL,
    slice smallint NOT NULL,
    queue text NOT NULL,
    done bit({BITS}) NOT NULL,
    PRIMARY KEY (batch, tenant, slice)
) WITH (fillfactor = 50);
{pairs_table("sketch_batch_pairs")}"""

QUERIES = {
    "sketch_c_insert": insert_statement(slices=True),
    "sketch_c_insert_keyed": insert_keyed_statement(),
    # an ack: each slice row named (batch, the lease's tenant, slice) locked and its tasks'
    # bits set; ('s', batch, tenant, slice, the bits that were clear of those asked) per
    # slice row, then ('o', id, grp) per row of its own deleted
    "sketch_c_ack": """
WITH v AS (
    SELECT * FROM unnest(%(batches)s::uuid[], %(tenants)s::text[], %(slices)s::smallint[],
                         %(masks)s::bit(512)[]) AS v(batch, tenant, slice, mask)
),
old AS MATERIALIZED (
    SELECT d.batch, d.tenant, d.slice, d.done, v.mask FROM sketch_batch_done d
    JOIN v ON d.batch = v.batch AND d.tenant = v.tenant AND d.slice = v.slice
    WHERE d.batch = ANY(ARRAY(SELECT unnest(%(batches)s::uuid[]))) AND d.queue = %(queue)s
    ORDER BY d.batch, d.tenant, d.slice  -- (locked in one order: acks cannot deadlock)
    FOR UPDATE OF d
),
upd AS (
    UPDATE sketch_batch_done d SET done = old.done | old.mask
    FROM old
    WHERE d.batch = old.batch AND d.tenant = old.tenant AND d.slice = old.slice
),
own AS (
    SELECT * FROM unnest(%(own_ids)s::uuid[], %(own_tenants)s::text[],
                         %(own_attempts)s::int[]) AS o(id, tenant, attempt)
),
deleted AS (
    DELETE FROM tierq_tasks t USING own
    WHERE t.id = ANY(ARRAY(SELECT unnest(%(own_ids)s::uuid[]))) AND t.id = own.id
      AND t.queue = %(queue)s
      AND t.tenant = own.tenant AND (t.state = 'warm') IS TRUE AND t.attempts < own.attempt
      AND t.waiters = 0
    RETURNING t.id::text, t.grp
)
SELECT 's', old.batch::text, old.tenant, old.slice, (old.mask & ~old.done)::text FROM old
UNION ALL SELECT 'o', id, grp, NULL, NULL FROM deleted""",
}


def tasks_written(database_url: str) -> tuple[int, int]:
    """(Tasks in batch rows, rows of ``tierq_tasks``) inserted so far (rows in
    ``tierq_tasks`` as the server's statistics count them)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        [(batched,)] = conn.execute(
            "SELECT coalesce(sum(tasks), 0) FROM sketch_batches").fetchall()
        [(rows,)] = conn.execute(
            "SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables "
            "WHERE relname = 'tierq_tasks'").fetchall()
    return int(batched), int(rows)


def unfinished_in_batches(database_url: str) -> int:
    """Tasks of batch rows whose bits are clear in their slice rows."""
    return count_rows(database_url, f"SELECT coalesce(sum({BITS} - bit_count(done)), 0) "
                                    "FROM sketch_batch_done")


SWEEP = """
WITH finished AS (
    SELECT batch FROM sketch_batch_done GROUP BY batch
    HAVING bool_and(done = ~(B'0'::bit(512)))
),
slices AS (DELETE FROM sketch_batch_done d USING finished f WHERE d.batch = f.batch),
batches AS (DELETE FROM sketch_batches b USING finished f WHERE b.id = f.batch
            RETURNING b.tasks)
SELECT coalesce(sum(tasks), 0) FROM batches"""


def sweep(database_url: str) -> tuple[int, float | None]:
    """Delete the batch rows whose slice rows' bits are all set, and those slice rows, as
    the maintenance job would: (tasks of the batch rows deleted, the backend's CPU seconds
    for it, None where its process cannot be read)."""
    from bench.measure import backend_work

    def delete(conn: Any) -> int:
        [(tasks,)] = conn.execute(SWEEP).fetchall()
        return int(tasks)

    return backend_work(database_url, delete)


def batch_of(columns: dict[str, Any], *, with_slices: bool = True) -> dict[str, Any] | None:
    """The parameters of a batch admitted warm whose keyless ids are one batch's, numbered
    0, 1, …: its key, its tasks and (``with_slices``) its slice rows; None for any other."""
    import orjson

    from tierq.dal.postgres import int_array, text_array

    if not warm_batch(columns):
        return None
    ids = columns["ids"][1:-1].split(",")
    tenants = orjson.loads(columns["tenants"])
    slices: dict[tuple[str, int], list[int]] = {}
    key = None
    places = 0
    for task_id, tenant in zip(ids, tenants, strict=True):
        if not batch_member(task_id):
            continue
        batch, place, number = batch_id(task_id)
        if key is None:
            key = batch
        if batch != key or place != places:
            raise RuntimeError("a batch's keyless ids are not one batch's, in order: "
                               "the sketch takes whole batches")
        slices.setdefault((tenant, number), []).append(place)
        places += 1
    if key is None:
        return None
    if not with_slices:
        return {"batch": key, "tasks": places}
    return {"batch": key, "tasks": places,
            "slice_tenants": text_array([t for t, _ in slices]),
            "slice_numbers": int_array(n for _, n in slices),
            "slice_masks": "{" + ",".join(_mask(p, clear=True)
                                          for p in slices.values()) + "}"}


def install_inserts(store: Any, plain_query: str, keyed_query: str | None, *,
                    with_slices: bool = True) -> None:
    """Make the store's uniform inserts write a warm batch with ``plain_query`` and
    ``keyed_query`` (names of ``store._sql``; None: the keyed insert left as it is;
    ``with_slices``: with design C's slice rows), and any other batch as the engine does."""
    from psycopg.rows import tuple_row

    plain, keyed = store.insert_tasks_uniform, store.insert_tasks_uniform_keyed

    def insert_uniform(queue: str, now: Any, columns: Any, *, conn: Any = None
                       ) -> tuple[int, int]:
        batch = batch_of(columns, with_slices=with_slices)
        if batch is None:
            return plain(queue, now, columns, conn=conn)
        [(first, count)] = store._fetch(plain_query, {
            "queue": queue, "now": now, **batch, **columns}, tuple_row, conn)
        return first, count

    def insert_uniform_keyed(queue: str, now: Any, columns: Any, *, conn: Any = None
                             ) -> tuple[int, dict[str, int]]:
        batch = batch_of(columns, with_slices=with_slices)
        if batch is None:
            return keyed(queue, now, columns, conn=conn)
        first, inserted = 0, {}
        for task_id, seq in store._fetch(keyed_query, {
                "queue": queue, "now": now, **batch, **columns}, tuple_row, conn):
            if task_id is None:
                first = seq
            else:
                inserted[task_id] = seq
        return first, inserted

    store.insert_tasks_uniform = insert_uniform
    if keyed_query is not None:
        store.insert_tasks_uniform_keyed = insert_uniform_keyed


def sketch_store(store: Any) -> None:
    """Swap the four statements of this process's engine store for the sketch's (the
    module's table) and number the ids its enqueues make; every other statement stays the
    engine's."""
    from psycopg.rows import tuple_row

    from tierq.dal.postgres import int_array, text_array, uuid_array
    from tierq.dal.store.rows import AckedRow

    mark_prepared_ids(store, "batch", number_ids)
    store._sql = {**store._sql, **QUERIES}
    install_inserts(store, "sketch_c_insert", "sketch_c_insert_keyed")

    def ack(queue: str, ids: Iterable[str], tenants: Sequence[str],
            attempts: Sequence[int], relaxed: bool) -> list[Any]:
        slices: dict[tuple[str, str, int], list[tuple[int, str]]] = {}
        own: list[tuple[str, str, int]] = []
        for task_id, tenant, attempt in zip(ids, tenants, attempts, strict=True):
            if batch_member(task_id) and attempt == 1:
                batch, place, number = batch_id(task_id)
                slices.setdefault((batch, tenant, number), []).append((place, str(task_id)))
            else:  # (a keyed task, or one moved out of its batch row by an earlier attempt)
                own.append((str(task_id), tenant, attempt))
        names = list(slices)
        rows = store._fetch("sketch_c_ack", {
            "queue": queue, "batches": uuid_array(n[0] for n in names),
            "tenants": text_array([n[1] for n in names]),
            "slices": int_array(n[2] for n in names),
            "masks": "{" + ",".join(_mask(p for p, _ in slices[n]) for n in names) + "}",
            "own_ids": uuid_array(o[0] for o in own),
            "own_tenants": text_array([o[1] for o in own]),
            "own_attempts": int_array(o[2] for o in own)}, tuple_row, relaxed=relaxed)
        out: list[Any] = []
        for kind, first, second, number, cleared in rows:
            if kind == "o":  # (a row of its own, deleted: its id and group)
                out.append(AckedRow(first, second))
            else:  # (a slice row: its tasks whose bits were clear)
                out += [AckedRow(task_id, None)
                        for place, task_id in slices[(first, second, number)]
                        if cleared[place] == "1"]
        return out

    swap_acks(store, ack)


class BatchRowsSketch(SketchedEngine):
    """tierq's engine with design C's writes sketched in (the module's docstring)."""

    name = "tierq-batch-sketch"
    preload = (*SketchedEngine.preload, "bench.systems.batch_sketch")
    schema = SCHEMA
    word = "batch"

    def run_notes(self, prepared: Prepared) -> list[str]:
        """How many of the run's tasks went into batch rows: a run whose batches all took
        the engine's statements measured today's code, not the sketch, and says so."""
        batched, rows = tasks_written(prepared.database_url)
        if batched == 0:
            return [f"NOT THE SKETCH: no task of {rows:,} went into a batch row"]
        return [f"{batched:,} of {batched + rows:,} tasks in batch rows"]

    def sweep(self, database_url: str) -> tuple[int, float | None]:
        """The design's sweep of finished batch rows (``sweep``)."""
        return sweep(database_url)

    def unfinished_in_batches(self, database_url: str) -> int:
        """The design's tasks of batch rows not finished (``unfinished_in_batches``)."""
        return unfinished_in_batches(database_url)

    def pg_us_per_task_apart(self, prepared: Prepared) -> float | None:
        """The sweep of the finished batch rows, in backend CPU microseconds per task of
        the rows deleted; None when there was nothing to delete or its backend's CPU
        cannot be read."""
        tasks, seconds = self.sweep(prepared.database_url)
        return None if not tasks or seconds is None else seconds * 1e6 / tasks

    def remaining(self, prepared: Prepared) -> int:
        """Unfinished tasks of ``tierq_tasks`` and of the batch rows."""
        return (count_rows(prepared.database_url, UNFINISHED)
                + self.unfinished_in_batches(prepared.database_url))
