"""Reading the plans of the engine's named queries (tests/integration/test_*_plans.py): a
query prepared as the engine's connections prepare it, executed under EXPLAIN ANALYZE; the
rows and pairs the maintenance walks are checked against. The database of never-analyzed
tables they run on is the fixture ``unanalyzed`` (tests/integration/conftest.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from tierq.dal.sql_files import query

WARM_ROWS = 20_000  # warm tasks of queue 'q' in the ``unanalyzed`` database
PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def explain(conn: psycopg.Connection[Any], name: str, values: dict[str, Any], mode: str,
            setup: str | None = None) -> list[dict[str, Any]]:
    """The nodes of a named query's executed plan, prepared as the engine's connections
    prepare it, in a transaction rolled back afterwards (with ``setup`` run first in it)."""
    text = query(name)
    order: list[str] = []
    for placeholder in PLACEHOLDER.findall(text):
        if placeholder not in order:
            order.append(placeholder)
    numbered = PLACEHOLDER.sub(lambda m: f"${order.index(m.group(1)) + 1}", text)
    statement = f"plan_{name}"
    conn.execute(f"SET plan_cache_mode = {mode}")
    conn.execute("BEGIN")
    try:
        if setup:
            conn.execute(setup)
        conn.execute(f"PREPARE {statement} AS {numbered}")
        explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {}({})").format(
            sql.Identifier(statement),
            sql.SQL(", ").join(sql.Literal(values[p]) for p in order))
        row = conn.execute(explain).fetchone()
    finally:
        conn.execute("ROLLBACK")
        conn.execute(f"DEALLOCATE {statement}")  # prepared statements outlive a rollback
    assert row is not None
    return list(plan_nodes(row[0][0]["Plan"]))


IDLE_PAIRS = 2_000
FINISHED_ROWS = 500


def rows_setup(queue: str, state: str, n: int = FINISHED_ROWS) -> str:
    """``n`` rows of ``queue`` in ``state``, finished a day ago (for the states that are)."""
    return ("INSERT INTO tierq_tasks (id, queue, tenant, priority, payload, state, run_at,"
            " run_at_initially, max_attempts, seq, created_at, ready_since, state_since,"
            " finished_at)"
            f" SELECT gen_random_uuid(), '{queue}', '_', 0, '{{}}', '{state}', now(), now(), 5,"
            " 100000 + g, now(), now(), now(), now() - interval '1 day'"
            f" FROM generate_series(1, {n}) AS g")


# FINISHED_ROWS batch rows' entries of one pair ('b', '_') in tierq_batch_pairs (migration
# 0030): a walk must read one entry of the pair, not its batch rows.
BATCH_PAIRS_SETUP = ("INSERT INTO tierq_batch_pairs (queue, tenant, batch)"
                     " SELECT 'b', '_', gen_random_uuid()"
                     f" FROM generate_series(1, {FINISHED_ROWS})")

PAIRS_SETUP = ("INSERT INTO tierq_queue_tenants (queue, tenant, last_seen)"
               " SELECT 'idle-' || g, '_', now() - interval '400 days'"
               f" FROM generate_series(1, {IDLE_PAIRS}) AS g")


def seq_scans_of_tasks(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["Node Type"] for n in nodes
            if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "tierq_tasks"]


def rows_read(nodes: list[dict[str, Any]], relation: str = "tierq_tasks") -> int:
    """The most rows one node of ``relation`` read, over all its loops."""
    return max((n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0)) * n.get(
        "Actual Loops", 1) for n in nodes if n.get("Relation Name") == relation)
