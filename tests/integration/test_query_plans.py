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

from tests.support.stores import migrated_database
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
            "attempt": 1, "attempts": [1] * n, "errors": ["boom"] * n,
            "retry_ats": ["2026-01-01T00:01:00Z"] * n, "deads": [False] * n,
            "results": ['{"ok": true}'] * n}


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


def assert_reads_about(nodes: list[dict[str, Any]], rows: int, label: tuple[str, ...]) -> None:
    for node in nodes:
        if node.get("Relation Name") == "tierq_tasks" or "Index Name" in node:
            read = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            # (a few more than asked: index entries of the row versions earlier cases rolled
            # back)
            assert read <= 2 * rows, (*label, node["Node Type"], read)


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
@pytest.mark.parametrize("name", ["ack_delete", "ack_delete_by_attempt", "ack_keep",
                                  "lease_outcomes", "mark_cold", "lock_warm_for_restore"])
def test_settling_statements_use_the_primary_key_only(unanalyzed, name, mode):
    ids = [r[0] for r in unanalyzed.execute(
        "SELECT id FROM tierq_tasks ORDER BY random() LIMIT %s", (BATCH,))]
    nodes = explain(unanalyzed, name, arguments(ids), mode)
    indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
    assert indexes == {"tierq_tasks_pkey"}, (name, mode, indexes)
    assert_reads_about(nodes, BATCH, (name, mode))


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_promotion_reads_the_cold_line_and_updates_by_primary_key(unanalyzed, mode):
    """promote_cold once joined its picked rows to the table by a hash join over a scan of
    every row of the table, for each batch."""
    cold_rows = 5 * BATCH
    setup = ("INSERT INTO tierq_tasks (id, queue, tenant, priority, payload, state, run_at,"
             " run_at_initially, max_attempts, seq, created_at, ready_since, state_since)"
             " SELECT gen_random_uuid(), 'q', '_', 0, '{}', 'cold', now(), now(), 5,"
             f" {WARM_ROWS} + g, now(), now(), now() FROM generate_series(1, {cold_rows}) g")
    values = {"queue": "q", "tenant": "_", "limit": BATCH, "now": "2026-01-01T00:00:00Z"}
    nodes = explain(unanalyzed, "promote_cold", values, mode, setup)
    assert nodes[0]["Node Type"] == "ModifyTable" and nodes[0]["Actual Rows"] == BATCH
    assert [n for n in nodes if n["Node Type"] == "Seq Scan"] == [], mode
    indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
    assert indexes == {"tierq_tasks_pkey", "tierq_tasks_cold_line"}, (mode, indexes)
    assert_reads_about(nodes, BATCH, ("promote_cold", mode))


# -- maintenance by activity: the walks read what has work, never the pairs ever seen ----------

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


PAIRS_SETUP = ("INSERT INTO tierq_queue_tenants (queue, tenant, last_seen)"
               " SELECT 'idle-' || g, '_', now() - interval '400 days'"
               f" FROM generate_series(1, {IDLE_PAIRS}) AS g")


def seq_scans_of_tasks(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["Node Type"] for n in nodes
            if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "tierq_tasks"]


def rows_read(nodes: list[dict[str, Any]]) -> int:
    return max((n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0)) * n.get(
        "Actual Loops", 1) for n in nodes if n.get("Relation Name") == "tierq_tasks")


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_warm_walk_skips_over_each_pairs_rows(unanalyzed, mode):
    """20,000 warm rows of one pair: the walk reads one index entry per pair, not the rows."""
    values = {"after_queue": "", "after_tenant": "", "limit": 100}
    nodes = explain(unanalyzed, "walk_warm_pairs", values, mode)
    assert seq_scans_of_tasks(nodes) == [], mode
    assert {n["Index Name"] for n in nodes if "Index Name" in n} == {"tierq_tasks_warm_since"}
    assert rows_read(nodes) <= 4, (mode, rows_read(nodes))


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_cold_walk_skips_over_each_pairs_rows(unanalyzed, mode):
    setup = ";".join([rows_setup("c", "cold"), rows_setup("d", "cold"), PAIRS_SETUP])
    values = {"after_queue": "", "after_tenant": "", "limit": 100}
    nodes = explain(unanalyzed, "walk_cold_to_warm_pairs", values, mode, setup)
    assert seq_scans_of_tasks(nodes) == [], mode
    assert "tierq_tasks_cold_line" in {n["Index Name"] for n in nodes if "Index Name" in n}
    assert nodes[0]["Actual Rows"] == 2
    assert rows_read(nodes) <= 4, (mode, rows_read(nodes))


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_purge_walk_reads_one_entry_per_queue_with_finished_rows(unanalyzed, mode):
    setup = ";".join([rows_setup("done-q", "done"), rows_setup("dead-q", "dead")])
    nodes = explain(unanalyzed, "walk_finished_queues",
                    {"after_queue": "", "limit": 100}, mode, setup)
    assert seq_scans_of_tasks(nodes) == [], mode
    assert {"tierq_tasks_done_since", "tierq_tasks_dead_line"} <= {
        n["Index Name"] for n in nodes if "Index Name" in n}
    assert nodes[0]["Actual Rows"] == 2
    assert rows_read(nodes) <= 4, (mode, rows_read(nodes))


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
@pytest.mark.parametrize(("name", "state", "index"), [
    ("purge_done_before", "done", "tierq_tasks_done_since"),
    ("purge_dead_before", "dead", "tierq_tasks_dead_line")])
def test_the_retention_purge_reads_its_partial_index(unanalyzed, name, state, index, mode):
    setup = rows_setup("p", state)
    values = {"queue": "p", "before": "2999-01-01T00:00:00Z", "limit": BATCH}
    nodes = explain(unanalyzed, name, values, mode, setup)
    assert nodes[0]["Node Type"] == "ModifyTable"
    assert seq_scans_of_tasks(nodes) == [], mode
    assert_reads_about(nodes, BATCH, (name, mode))
    assert {n["Index Name"] for n in nodes if "Index Name" in n} == {index, "tierq_tasks_pkey"}


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_forgetting_probes_the_tasks_by_index_per_idle_pair(unanalyzed, mode):
    """Each idle pair of the slice is checked for rows by index look-ups (20,000 warm rows of
    another queue are never read)."""
    values = {"after_queue": "", "after_tenant": "", "limit": 1000,
              "before": "2999-01-01T00:00:00Z"}
    nodes = explain(unanalyzed, "forget_idle_pairs", values, mode, PAIRS_SETUP)
    assert seq_scans_of_tasks(nodes) == [], mode
    assert nodes[0]["Actual Rows"] == 1000 + 1  # every pair of the slice, then its last
    assert rows_read(nodes) <= 2 * 1000, (mode, rows_read(nodes))


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
@pytest.mark.parametrize(("name", "indexes"), [
    ("refresh_pairs", {"tierq_queue_tenants_pkey", "tierq_queue_tenants_by_tenant"}),
    ("insert_pairs_within_quota", {"tierq_queue_tenants_by_tenant"})])
def test_registration_reads_the_registry_by_index(unanalyzed, name, indexes, mode):
    """A refresh finds its pairs by (queue, tenant) on either index; the cap counts one
    tenant's queues on the tenant index, never the whole registry."""
    setup = ";".join([PAIRS_SETUP, PAIRS_SETUP.replace("'_'", "'other'")])
    values = {"queue": "new-queue", "tenants": ["other"], "now": "2026-01-01T00:00:00Z",
              "cap": 1_000_000}
    nodes = explain(unanalyzed, name, values, mode, setup)
    assert [n for n in nodes if n["Node Type"] == "Seq Scan"] == [], (name, mode)
    assert indexes & {n["Index Name"] for n in nodes if "Index Name" in n}, (name, mode)
