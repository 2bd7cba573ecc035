"""The statements that settle leased tasks find their rows by primary key, whatever the
planner knows. A fresh table has no statistics until autovacuum's first ANALYZE; the planner
then guesses that one row of a queue is warm, and a statement that filtered on
``queue = … AND state = 'warm'`` scanned tierq_tasks_warm_since instead: every warm row of
the queue read for each batch of 100 acks (~50 µs of PostgreSQL CPU per task in the
benchmarks). Each plan here is checked generic and custom, on a table never analyzed."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.conftest import migrated_database
from tierq.dal.sql_files import query

WARM_ROWS = 20_000
BATCH = 100
PLACEHOLDER = re.compile(r"%\((\w+)\)s")


@pytest.fixture(scope="module")
def unanalyzed(services: Any) -> Iterator[psycopg.Connection[Any]]:
    """A database of its own: WARM_ROWS warm tasks of queue 'q', autovacuum off, no stats."""
    with migrated_database(services.postgres.url, "tierq_plans") as url, \
            psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE tierq_tasks SET (autovacuum_enabled = false)")
        conn.execute(
            "INSERT INTO tierq_tasks (id, queue, tenant, priority, payload, state, run_at,"
            " run_at_initially, max_attempts, seq, created_at, ready_since, state_since)"
            " SELECT gen_random_uuid(), 'q', '_', 0, '{}', 'warm', now(), now(), 5, g,"
            " now(), now(), now() FROM generate_series(1, %s) AS g", (WARM_ROWS,))
        yield conn


def arguments(ids: list[uuid.UUID]) -> dict[str, Any]:
    n = len(ids)
    return {"queue": "q", "ids": ids, "now": "2026-01-01T00:00:00Z",
            "attempts": [1] * n, "errors": ["boom"] * n,
            "retry_ats": ["2026-01-01T00:01:00Z"] * n, "deads": [False] * n,
            "results": ['{"ok": true}'] * n}


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
@pytest.mark.parametrize("name", ["ack_delete", "ack_keep", "lease_outcomes", "mark_cold",
                                  "lock_warm_for_restore"])
def test_settling_statements_use_the_primary_key_only(unanalyzed, name, mode):
    conn = unanalyzed
    ids = [r[0] for r in conn.execute(
        "SELECT id FROM tierq_tasks ORDER BY random() LIMIT %s", (BATCH,))]
    text = query(name)
    order: list[str] = []
    for placeholder in PLACEHOLDER.findall(text):
        if placeholder not in order:
            order.append(placeholder)
    numbered = PLACEHOLDER.sub(lambda m: f"${order.index(m.group(1)) + 1}", text)
    values = arguments(ids)
    statement = f"plan_{name}"
    conn.execute(f"SET plan_cache_mode = {mode}")
    conn.execute("BEGIN")
    try:
        conn.execute(f"PREPARE {statement} AS {numbered}")
        explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {}({})").format(
            sql.Identifier(statement),
            sql.SQL(", ").join(sql.Literal(values[p]) for p in order))
        row = conn.execute(explain).fetchone()
    finally:
        conn.execute("ROLLBACK")
        conn.execute(f"DEALLOCATE {statement}")  # prepared statements outlive a rollback
    assert row is not None
    nodes = list(plan_nodes(row[0][0]["Plan"]))
    indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
    assert indexes == {"tierq_tasks_pkey"}, (name, mode, indexes)
    for node in nodes:
        if node.get("Relation Name") == "tierq_tasks" or "Index Name" in node:
            read = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            # (a few more than BATCH: index entries of the row versions earlier cases rolled back)
            assert read <= 2 * BATCH, (name, mode, node["Node Type"], read)
