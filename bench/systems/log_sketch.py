"""``tierq-log-sketch``: tierq's engine with the writes of design B sketched in, to measure
end to end what the design's estimates say (docs/design-rotating-tables.md, section 4).

A benchmark system, not a product path: it answers "would rotating slot tables, whose acks
append and whose rows are never deleted one by one, bring PostgreSQL's CPU per task to half
the bare table's?" before the three to four weeks the design needs are spent. Each worker
process runs the ``Tierq`` engine of ``tierq-engine`` (bench/systems/tierq_engine.py) with
four of its store's statements swapped for design B's, and one step of the enqueue marking
each id:

=================================  ==========================================================
the engine's step                  the sketch's (when)
=================================  ==========================================================
``enqueue.prepare``                each id's last hex digit made even, or odd for a task with
                                   a key: an ack tells from the id alone which table holds
                                   the row (the sketch overwrites a shard's id tag)
``insert_tasks_uniform``           ``sketch_b_insert_<slot>``: the rows into the table of
                                   their ids' slot (its primary key only), each (pair,
                                   minute) once into ``tierq_log_pairs`` (a batch admitted
                                   warm without a time limit: the shapes' batches);
                                   ``sketch_b_insert_split`` when the ids straddle a slot's
                                   boundary, each row into its id's slot
``insert_tasks_uniform_keyed``     ``sketch_b_insert_keyed_<slot>`` (or ``_split``): the
                                   keyless rows as above, the keyed ones into
                                   ``tierq_tasks`` as today
``ack_delete``                     ``sketch_b_ack_<slot>``: the even ids appended to their
                                   slot's ``done`` table, whose primary key arbitrates a
                                   task finished twice; with odd ids,
                                   ``sketch_b_ack_keyed_<slot>`` also deletes those from
                                   ``tierq_tasks`` as today, in the same statement
``ack_delete_by_attempt``          the same (the appended rows name no tenant or attempt)
=================================  ==========================================================

A slot is an id's milliseconds // ``SLOT_MS`` mod ``SLOTS``; an ack whose ids fall in two
slots (at a slot's boundary) is one statement per slot, and an ack of an id older than the
slots' turn ((SLOTS - 1) * SLOT_MS) is refused: its slot may have been emptied and taken
again, and a ``done`` row appended there would count as another task's. The rotation
(``rotate``: the owner function ``tierq_rotate_slot``) compares the two tables' counts and
looks for the unfinished rows by anti-join only when they differ (0.1 against 1.1 µs a
row, one connection), refuses when any is left, then truncates the slot and its ``done``
table. The count is a sound check only while every ``done`` row is an id of the slot's own
rows: the design must keep it so (each id's slot from its milliseconds, old ids refused,
the lease check in Valkey before any append); the function does not verify it. It runs
after the run's phases over every slot that has rows; its backend's CPU per row is the
run's PostgreSQL work apart (``pg_us_per_task_apart``), which ``bench.vs_bare`` adds to
the sketch's end-to-end figure. Any other batch and every other statement run as the engine's, but
its ids are marked all the same: an ack of such a keyless task appends to a slot's ``done``
table and leaves its row in ``tierq_tasks``, which the run's ``left`` shows (the shapes'
batches are all admitted warm). Each run's notes say how many rows went into the slots
("NOT THE SKETCH" when none).

Its PostgreSQL figures are roughly a floor for design B, since it leaves out:

* the readers of slot rows: the reaper, the reconciler, a release, a nack, an expiry, a
  cancel, a task's GET, and a child waiting on a task see only ``tierq_tasks`` here (none
  happens in these shapes, whose warm tier never fills; a slot row lost by Valkey would
  never come back);
* the rotation's copy of survivors (tasks ready or leased for longer than the slots turn)
  and the moved-ids table an ack would probe for them: ``tierq_rotate_slot`` refuses a slot
  with survivors, and these shapes leave none;
* the tenant and attempt checks today's ack makes in PostgreSQL: an appended row names
  only the id (the lease check in Valkey stays);
* deleting ``tierq_log_pairs`` rows once their minute is past.
Behind a pooler (``TIERQ_DB_POOLER=transaction``) the engine's statements run as functions
and the sketch's do not: compare on direct connections.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from bench.systems import Prepared, count_rows
from bench.systems.sketches import (
    KEYED_INTO_TASKS,
    NARROW_TASK_COLUMNS,
    SketchedEngine,
    mark_prepared_ids,
    pairs_table,
    swap_acks,
    warm_batch,
)
from bench.systems.tierq_engine import UNFINISHED

SLOTS = 4  # slot tables that take turns
SLOT_MS = 60_000  # how long a slot takes new rows; it is emptied (SLOTS - 1) turns later
# the last hex digit of a keyed task's id is odd, of any other task's even
EVEN, ODD = "02468ace", "13579bdf"


def ms_of(task_id: object) -> int:
    """The milliseconds of a UUIDv7 (a ``UUID`` or its text): its first 48 bits."""
    text = str(task_id)
    return int(text[:8] + text[9:13], 16)


def slot_of(task_id: object) -> int:
    """The slot of a UUIDv7: its milliseconds // SLOT_MS, mod SLOTS (the insert's
    ``_SLOT_OF_ID`` in SQL)."""
    return (ms_of(task_id) // SLOT_MS) % SLOTS


def keyed_id(task_id: object) -> bool:
    """Whether the sketch marked ``task_id`` as a keyed task's (its last digit odd)."""
    return int(str(task_id)[-1], 16) & 1 == 1


def _slot_schema(slot: int) -> str:
    return f"""
CREATE TABLE tierq_log_{slot} ({NARROW_TASK_COLUMNS})
WITH (fillfactor = 100, autovacuum_enabled = false);
CREATE TABLE tierq_log_done_{slot} (id uuid PRIMARY KEY) WITH (autovacuum_enabled = false);
"""


# The sketch's tables, created in the system's fresh database after tierq's migrations: the
# slots (the columns of design A's hot table: no key, group, flow, time limit or trace; such
# a task stays in tierq_tasks), their done tables, the pairs with slot rows, and the owner
# function that empties a slot (the application's login has no TRUNCATE).
SCHEMA = "".join(_slot_schema(s) for s in range(SLOTS)) + """
""" + pairs_table("tierq_log_pairs") + """
CREATE FUNCTION tierq_rotate_slot(slot int) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    total bigint;
    finished bigint;
    left_over bigint := 0;
BEGIN
    IF slot < 0 OR slot >= """ + str(SLOTS) + """ THEN
        RAISE EXCEPTION 'no slot %', slot;
    END IF;
    EXECUTE format('LOCK TABLE tierq_log_%s, tierq_log_done_%s IN ACCESS EXCLUSIVE MODE',
                   slot, slot);
    EXECUTE format('SELECT (SELECT count(*) FROM tierq_log_%s), '
                   '(SELECT count(*) FROM tierq_log_done_%s)', slot, slot)
        INTO total, finished;
    IF finished < total THEN
        EXECUTE format('SELECT count(*) FROM tierq_log_%s l WHERE NOT EXISTS ('
                       'SELECT 1 FROM tierq_log_done_%s d WHERE d.id = l.id)', slot, slot)
            INTO left_over;
    END IF;
    IF left_over > 0 OR finished > total THEN
        RAISE EXCEPTION 'slot % has % unfinished tasks (% rows, % finished)', slot,
            left_over, total, finished;
    END IF;
    EXECUTE format('TRUNCATE tierq_log_%s, tierq_log_done_%s', slot, slot);
    RETURN total;
END $$;
"""

# A row's slot in SQL, from its id's first 48 bits (as slot_of)
_SLOT_OF_ID = (f"((('x' || translate(left(v.id::text, 13), '-', ''))::bit(48)::bigint"
               f" / {SLOT_MS}) %% {SLOTS})")  # (%%: the statements take parameters)


def _insert(slot: int | None, keyed: bool) -> str:
    """The insert of a batch admitted warm into slot ``slot``, or (None) into each row's own
    slot (a batch whose ids straddle a slot's boundary); ``keyed``: the batch has keys,
    its keyed rows go into ``tierq_tasks`` as today. Its rows: the keyed rows inserted (id,
    seq), then (NULL, the batch's first seq, the rows inserted)."""
    keys = "jsonb_array_elements_text(%(keys)s::jsonb)," if keyed else ""
    key = "v.key" if keyed else "NULL::text"
    slots = range(SLOTS) if slot is None else [slot]
    inserts = [f"""ins_{s} AS (
    INSERT INTO tierq_log_{s} (id, queue, tenant, priority, seq, max_attempts, payload,
                               created_at)
    SELECT v.id, %(queue)s, v.tenant, v.priority, v.seq, %(max_attempts)s, v.payload, %(now)s
    FROM v WHERE v.key IS NULL{f" AND {_SLOT_OF_ID} = {s}" if slot is None else ""}
    RETURNING tenant
)""" for s in slots]
    inserted = " UNION ALL ".join(f"SELECT tenant FROM ins_{s}" for s in slots)
    keyed_insert = f",\n{KEYED_INTO_TASKS}" if keyed else ""
    return f"""
WITH b AS (SELECT nextval('tierq_task_seq') AS seq),
v AS (
    SELECT v.id, v.tenant, {key} AS key, v.priority, v.payload, b.seq + v.n - 1 AS seq
    FROM b, ROWS FROM (unnest(%(ids)s::uuid[]),
                       jsonb_array_elements_text(%(tenants)s::jsonb), {keys}
                       unnest(%(priorities)s::smallint[]),
                       jsonb_array_elements(%(payloads)s::jsonb))
            WITH ORDINALITY AS v(id, tenant, {"key, " if keyed else ""}priority, payload, n)
),
{",".join(inserts)},
inserted AS ({inserted}),
pairs AS (
    INSERT INTO tierq_log_pairs (queue, tenant, minute)
    SELECT DISTINCT %(queue)s, i.tenant,
           floor(extract(epoch FROM %(now)s::timestamptz) / 60)::bigint
    FROM inserted AS i
    ON CONFLICT DO NOTHING
){keyed_insert}
{"SELECT id, seq, NULL::bigint FROM keyed UNION ALL " if keyed else ""}\
SELECT NULL::text, seq, (SELECT count(*) FROM inserted) FROM b"""


def _queries(slot: int) -> dict[str, str]:
    """The sketch's statements that name slot ``slot``'s tables."""
    done = f"tierq_log_done_{slot}"
    return {
        # insert_tasks_uniform and insert_tasks_uniform_keyed for a batch admitted warm
        f"sketch_b_insert_{slot}": _insert(slot, keyed=False),
        f"sketch_b_insert_keyed_{slot}": _insert(slot, keyed=True),
        # an ack of slot rows only: the ids appended; those already there (finished
        # before) are not returned, as today's refused ack
        f"sketch_b_ack_{slot}": f"""
INSERT INTO {done} (id) SELECT unnest(%(ids)s::uuid[])
ON CONFLICT DO NOTHING
RETURNING id::text AS id, NULL::text AS grp""",
        # the same with keyed tasks' rows: those deleted from tierq_tasks as today, each
        # paired with its lease's tenant and attempt
        f"sketch_b_ack_keyed_{slot}": f"""
WITH appended AS (
    INSERT INTO {done} (id) SELECT unnest(%(ids)s::uuid[])
    ON CONFLICT DO NOTHING
    RETURNING id
),
v AS (
    SELECT * FROM unnest(%(keyed_ids)s::uuid[], %(tenants)s::text[], %(attempts)s::int[])
        AS v(id, tenant, attempt)
),
deleted AS (
    DELETE FROM tierq_tasks t USING v
    WHERE t.id = ANY(ARRAY(SELECT unnest(%(keyed_ids)s::uuid[])))
      AND t.id = v.id AND t.queue = %(queue)s
      AND t.tenant = v.tenant AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt
      AND t.waiters = 0
    RETURNING t.id::text, t.grp
)
SELECT id::text AS id, NULL::text AS grp FROM appended
UNION ALL SELECT id, grp FROM deleted""",
    }


QUERIES = {name: sql for s in range(SLOTS) for name, sql in _queries(s).items()}
QUERIES["sketch_b_insert_split"] = _insert(None, keyed=False)
QUERIES["sketch_b_insert_keyed_split"] = _insert(None, keyed=True)


def rows_written(database_url: str) -> tuple[int, int]:
    """Rows inserted so far into (the slot tables, ``tierq_tasks``), as the server's
    statistics count them."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        found: dict[str, int] = dict(conn.execute(
            "SELECT relname, n_tup_ins FROM pg_stat_user_tables "
            "WHERE relname = 'tierq_tasks' OR relname ~ '^tierq_log_[0-9]+$'").fetchall())
    tasks = int(found.pop("tierq_tasks", 0))
    return sum(int(n) for n in found.values()), tasks


def unfinished_in_slots(database_url: str) -> int:
    """Slot rows without a ``done`` row, over every slot."""
    return sum(count_rows(database_url, f"SELECT count(*) FROM tierq_log_{s} l WHERE NOT "
                                        f"EXISTS (SELECT 1 FROM tierq_log_done_{s} d "
                                        "WHERE d.id = l.id)")
               for s in range(SLOTS))


def rotate(database_url: str) -> tuple[int, float | None]:
    """Empty every slot that has rows, as the rotation job would once the slots' turn came:
    (rows emptied, the backend's CPU seconds for it, None where its process cannot be
    read). Raises when a slot still holds an unfinished task (the sketch copies none
    forward)."""
    from bench.measure import backend_work

    def empty_slots(conn: Any) -> int:
        emptied = 0
        for s in range(SLOTS):
            if conn.execute(f"SELECT EXISTS (SELECT 1 FROM tierq_log_{s})").fetchone() \
                    == (True,):
                [(rows,)] = conn.execute("SELECT tierq_rotate_slot(%s)", [s]).fetchall()
                emptied += int(rows)
        return emptied

    return backend_work(database_url, empty_slots)


def mark_ids(prepared: Sequence[Any]) -> None:
    """Make each prepared task's id end in an even hex digit, or an odd one when it has a
    key (``keyed_id``)."""
    for p in prepared:
        digits = ODD if p.key is not None else EVEN
        p.id = p.id[:-1] + digits[int(p.id[-1], 16) >> 1]


def sketch_store(store: Any) -> None:
    """Swap the four statements of this process's engine store for the sketch's (the
    module's table) and mark the ids its enqueues make; every other statement stays the
    engine's."""
    from psycopg.rows import tuple_row

    from tierq.dal.postgres import int_array, text_array, uuid_array
    from tierq.dal.store.base import positional
    from tierq.dal.store.rows import AckedRow

    mark_prepared_ids(store, "log", mark_ids)
    store._sql = {**store._sql, **QUERIES}
    plain, keyed = store.insert_tasks_uniform, store.insert_tasks_uniform_keyed
    acked = positional(AckedRow)

    def statement(columns: dict[str, Any], name: str) -> str:
        # (a uuid[] literal "{id,...,id}": its first and last ids name the batch's slots)
        ids = columns["ids"]
        first, last = slot_of(ids[1:37]), slot_of(ids[-37:-1])
        return f"{name}_{first}" if first == last else f"{name}_split"

    def insert_uniform(queue: str, now: Any, columns: Any, *, conn: Any = None
                       ) -> tuple[int, int]:
        if not warm_batch(columns):
            return plain(queue, now, columns, conn=conn)
        [(_, first, count)] = store._fetch(statement(columns, "sketch_b_insert"),
                                           {"queue": queue, "now": now, **columns},
                                           tuple_row, conn)
        return first, count

    def insert_uniform_keyed(queue: str, now: Any, columns: Any, *, conn: Any = None
                             ) -> tuple[int, dict[str, int]]:
        if not warm_batch(columns):
            return keyed(queue, now, columns, conn=conn)
        first, inserted = 0, {}
        for task_id, seq, _ in store._fetch(statement(columns, "sketch_b_insert_keyed"),
                                            {"queue": queue, "now": now, **columns},
                                            tuple_row, conn):
            if task_id is None:
                first = seq
            else:
                inserted[task_id] = seq
        return first, inserted

    def ack(queue: str, ids: Iterable[str], tenants: Sequence[str],
            attempts: Sequence[int], relaxed: bool) -> list[Any]:
        by_slot: dict[int, list[str]] = {}
        keyed_rows: list[tuple[str, str, int]] = []
        oldest = time.time() * 1000 - (SLOTS - 1) * SLOT_MS
        for task_id, tenant, attempt in zip(ids, tenants, attempts, strict=True):
            if keyed_id(task_id):
                keyed_rows.append((task_id, tenant, attempt))
            elif ms_of(task_id) < oldest:  # (its slot may have turned: see the docstring)
                raise RuntimeError(f"task {task_id} is older than the slots' turn; the "
                                   "sketch copies no survivor forward")
            else:
                by_slot.setdefault(slot_of(task_id), []).append(task_id)
        out: list[Any] = []
        slots = sorted(by_slot) or [0]
        for n, slot in enumerate(slots):
            appended = uuid_array(by_slot.get(slot, ()))
            if n or not keyed_rows:
                out += store._fetch(f"sketch_b_ack_{slot}", {"ids": appended}, acked,
                                    relaxed=relaxed)
            else:
                out += store._fetch(f"sketch_b_ack_keyed_{slot}", {
                    "queue": queue, "ids": appended,
                    "keyed_ids": uuid_array(r[0] for r in keyed_rows),
                    "tenants": text_array([r[1] for r in keyed_rows]),
                    "attempts": int_array(r[2] for r in keyed_rows)}, acked, relaxed=relaxed)
        return out

    store.insert_tasks_uniform = insert_uniform
    store.insert_tasks_uniform_keyed = insert_uniform_keyed
    swap_acks(store, ack)


class LogSlotsSketch(SketchedEngine):
    """tierq's engine with design B's writes sketched in (the module's docstring)."""

    name = "tierq-log-sketch"
    preload = (*SketchedEngine.preload, "bench.systems.log_sketch")
    schema = SCHEMA
    word = "log"

    def run_notes(self, prepared: Prepared) -> list[str]:
        """How many of the run's rows went into the slots: a run whose batches all took the
        engine's statements measured today's code, not the sketch, and says so."""
        slotted, tasks = rows_written(prepared.database_url)
        if slotted == 0:
            return [f"NOT THE SKETCH: no row of {tasks:,} went into a slot"]
        return [f"{slotted:,} of {slotted + tasks:,} rows into the slots"]

    def pg_us_per_task_apart(self, prepared: Prepared) -> float | None:
        """The rotation of every slot the run filled, in backend CPU microseconds per row
        emptied (``rotate``); None when there was nothing to empty, a slot still held work
        (the run's ``left`` says so) or its backend's CPU cannot be read."""
        import psycopg

        try:
            emptied, seconds = rotate(prepared.database_url)
        except psycopg.errors.RaiseException:  # (a slot with work left: the run says so)
            return None
        return None if not emptied or seconds is None else seconds * 1e6 / emptied

    def remaining(self, prepared: Prepared) -> int:
        """Unfinished tasks of ``tierq_tasks`` and of the slots."""
        return (count_rows(prepared.database_url, UNFINISHED)
                + unfinished_in_slots(prepared.database_url))
