"""What the sketches of ``bench.vs_bare --sketch`` share: tierq's engine with some of its
store's statements swapped for a design's (docs/design-rotating-tables.md), the system
that prepares their tables, and the pieces of their statements that stay today's.

=================================  ==========================================================
piece                              used by
=================================  ==========================================================
``SketchedEngine``                 each sketch's system: the engine's database, the
                                   sketch's tables, the spec's word for its processes
``NARROW_TASK_COLUMNS``,           a narrow table's columns (A, B) and the table of pairs
``pairs_table``                    with rows written (A, B, C, D)
``KEYED_INTO_TASKS``               the keyed rows of an insert, into ``tierq_tasks`` as
                                   today (every design keeps them there)
``warm_batch``                     which batches a sketch takes: admitted warm without a
                                   time limit (the shapes' batches)
``swap_acks``                      both ack statements as one function of ids, tenants and
                                   attempts
``mark_prepared_ids``              a step after the enqueue's ``prepare`` that rewrites a
                                   sketch's engine's ids (designs B, C and D read them)
=================================  ==========================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from bench.stores import Stores
from bench.systems import Prepared
from bench.systems.tierq_engine import TierqEngine

# The columns of a narrow table of tasks admitted warm without a key (design A's hot
# table, design B's slots): what such a task needs to be claimed again from PostgreSQL.
NARROW_TASK_COLUMNS = """
    id uuid PRIMARY KEY,
    queue text NOT NULL,
    tenant text NOT NULL,
    priority smallint NOT NULL,
    seq bigint NOT NULL,
    attempts int NOT NULL DEFAULT 0,
    max_attempts int NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL
"""


def pairs_table(name: str) -> str:
    """A table of the (queue, tenant, minute) a sketch's rows were written in, one row each:
    what maintenance would read for the pairs with work (designs A, B, C and D)."""
    return f"""
CREATE TABLE {name} (
    queue text NOT NULL,
    tenant text NOT NULL,
    minute bigint NOT NULL,
    PRIMARY KEY (queue, tenant, minute)
);
"""


# The CTE of a sketch's keyed insert that writes the batch's keyed rows (CTE v: id, tenant,
# key, priority, payload, seq) into tierq_tasks as insert_tasks_uniform_keyed does.
KEYED_INTO_TASKS = """keyed AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, %(queue)s, v.tenant, v.key, v.priority, v.payload, 'warm', %(now)s,
           %(now)s, %(max_attempts)s, v.seq, %(now)s, %(now)s, %(now)s, NULL, NULL, NULL
    FROM v WHERE v.key IS NOT NULL
    ON CONFLICT (queue, tenant, key)
        WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
    DO NOTHING
    RETURNING id::text, seq
)"""


def warm_batch(columns: dict[str, Any]) -> bool:
    """Whether a uniform batch is one a sketch writes: admitted warm, no time limit."""
    return columns.get("state") == "warm" and columns.get("timeout") is None


Ack = Callable[[str, Sequence[str], Sequence[str], Sequence[int], bool], list[Any]]


def swap_acks(store: Any, ack: Ack) -> None:
    """Make ``ack(queue, ids, tenants, attempts, relaxed)`` the store's ``ack_delete``,
    ``ack_delete_by_attempt`` and ``end_batch_members``: a sketch's ids carry the mark of
    the engine's batch members (tierq.core.batch_ids), whose plain acks the engine sends to
    ``end_batch_members``, so the sketch's ack takes those too."""

    def ack_delete(queue: str, ids: Any, tenants: Any, attempt: int, *,
                   relaxed: bool = False) -> list[Any]:
        ids = list(ids)
        return ack(queue, ids, tenants, [attempt] * len(ids), relaxed)

    def ack_delete_by_attempt(queue: str, ids: Any, tenants: Any, attempts: Any, *,
                              relaxed: bool = False) -> list[Any]:
        return ack(queue, list(ids), tenants, attempts, relaxed)

    def end_batch_members(queue: str, ids: Any, tenants: Any, attempts: Any, *,
                          relaxed: bool = False, conn: Any = None) -> list[Any]:
        return ack(queue, list(ids), tenants, attempts, relaxed)

    store.ack_delete = ack_delete
    store.ack_delete_by_attempt = ack_delete_by_attempt
    store.end_batch_members = end_batch_members


def mark_prepared_ids(store: Any, word: str, mark: Callable[[Sequence[Any]], None]) -> None:
    """Run ``mark`` over the prepared tasks of every enqueue of an engine whose store is
    ``store`` (and of no other engine). ``tierq.logic.enqueue.prepare`` is wrapped once
    per process and word; the wrapper keeps the original as ``unmarked`` (tests put it
    back)."""
    import tierq.logic.enqueue as enqueue

    store.sketch_word = word
    if getattr(enqueue.prepare, "sketch_word", None) == word:
        return
    prepare = enqueue.prepare

    def marked(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        out = prepare(ctx, *args, **kwargs)
        if getattr(ctx.store, "sketch_word", None) == word:
            mark(out)
        return out

    marked.sketch_word = word  # type: ignore[attr-defined]
    marked.unmarked = prepare  # type: ignore[attr-defined]
    enqueue.prepare = marked


class SketchedEngine(TierqEngine):
    """A sketch's system: tierq's engine (``TierqEngine``) whose processes take the
    sketch's statements (``bench.systems.tierq_engine.tierq_engine`` reads ``word``)."""

    schema: ClassVar[str]  # the sketch's tables, created after tierq's migrations
    word: ClassVar[str]  # the spec's "sketch"

    def prepare(self, stores: Stores) -> Prepared:
        """tierq's fresh database and Valkey, the sketch's tables, and its word."""
        import psycopg

        prepared = super().prepare(stores)
        with psycopg.connect(prepared.database_url, autocommit=True) as conn:
            conn.execute(self.schema)
        prepared.spec["sketch"] = self.word
        return prepared
