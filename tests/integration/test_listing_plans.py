"""The API's listings read what they list, not every pair ever seen: each filter (tenant,
queue, both, none) has a statement whose plan walks the index that matches it, generic or
custom, on tables never analyzed, and a pinned caller's listing reads only its tenant's
index entries."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.integration.plans import explain
from tests.support.stores import migrated_database

QUEUES, TENANTS = 200, 100  # 20,000 registered pairs
PAGE = 50
DEAD_ROWS = 20 * TENANTS  # in queue 'deadq', 20 per tenant
BATCHES_PER_PAIR = 20


@pytest.fixture(scope="module")
def registry(services: Any) -> Iterator[psycopg.Connection[Any]]:
    """A database of its own: QUEUES x TENANTS registered pairs, one warm and one dead task
    and BATCHES_PER_PAIR batch rows' entries (migration 0030) in each of tenant t042's
    pairs, autovacuum off, no statistics."""
    with migrated_database(services.postgres.url, "tierq_listing_plans") as url, \
            psycopg.connect(url, autocommit=True) as conn:
        for table in ("tierq_tasks", "tierq_queue_tenants", "tierq_batch_pairs"):
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        conn.execute(
            "INSERT INTO tierq_queue_tenants (queue, tenant)"
            " SELECT 'q' || lpad(q::text, 3, '0'), 't' || lpad(t::text, 3, '0')"
            " FROM generate_series(1, %s) AS q, generate_series(1, %s) AS t",
            (QUEUES, TENANTS))
        conn.execute(
            "INSERT INTO tierq_tasks (id, queue, tenant, priority, payload, state, run_at,"
            " run_at_initially, max_attempts, seq, created_at, ready_since, state_since,"
            " finished_at)"
            " SELECT gen_random_uuid(), 'q' || lpad(q::text, 3, '0'), 't042', 0, '{}', s, now(),"
            " now(), 5, q * 2 + (s = 'dead')::int, now(), now(), now(),"
            " CASE WHEN s = 'dead' THEN now() END"
            " FROM generate_series(1, %s) AS q, unnest(ARRAY['warm', 'dead']) AS s",
            (QUEUES,))
        conn.execute(
            "INSERT INTO tierq_tasks (id, queue, tenant, priority, payload, state, run_at,"
            " run_at_initially, max_attempts, seq, created_at, state_since, finished_at)"
            " SELECT gen_random_uuid(), 'deadq', 't' || lpad((g %% %s + 1)::text, 3, '0'), 0,"
            " '{}', 'dead', now(), now(), 5, 1000 + g, now(), now(),"
            " now() - g * interval '1 second'"
            " FROM generate_series(1, %s) AS g", (TENANTS, DEAD_ROWS))
        conn.execute(
            "INSERT INTO tierq_batch_pairs (queue, tenant, batch)"
            " SELECT 'q' || lpad(q::text, 3, '0'), 't042', gen_random_uuid()"
            " FROM generate_series(1, %s) AS q, generate_series(1, %s)",
            (QUEUES, BATCHES_PER_PAIR))
        yield conn


def index_reads(nodes: list[dict[str, Any]], *label: str) -> dict[str, int]:
    """Index name -> entries read (returned plus removed by a filter), over the plan."""
    reads: dict[str, int] = {}
    for node in nodes:
        assert node["Node Type"] != "Seq Scan", (*label, node.get("Relation Name"), nodes)
        if "Index Name" in node:
            loops = node.get("Actual Loops", 1)
            read = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * loops
            reads[node["Index Name"]] = reads.get(node["Index Name"], 0) + read
    return reads


MODES = ["force_generic_plan", "force_custom_plan"]
AFTER = {"after_queue": "q100", "after_tenant": "t042", "limit": PAGE}


@pytest.mark.parametrize("mode", MODES)
def test_a_tenants_pairs_and_queues_come_from_its_own_index_entries(registry, mode):
    # at most the tenant's own entries (QUEUES of the 20,000), by its index
    for name, values in [
        ("pairs_of_tenant_page", {**AFTER, "tenant": "t042"}),
        ("queue_names_of_tenant_page", {"tenant": "t042", "after": "q100", "limit": PAGE}),
    ]:
        reads = index_reads(explain(registry, name, values, mode), name, mode)
        assert set(reads) == {"tierq_queue_tenants_by_tenant"}, (name, mode, reads)
        assert PAGE <= reads["tierq_queue_tenants_by_tenant"] <= QUEUES, (name, mode, reads)
    nodes = explain(registry, "pair_of_queue_and_tenant_page",
                    {**AFTER, "after_tenant": "", "queue": "q100", "tenant": "t042"}, mode)
    assert sum(index_reads(nodes).values()) <= 1, mode


@pytest.mark.parametrize("mode", MODES)
def test_other_listings_read_about_a_page(registry, mode):
    for name, values in [
        ("pairs_page", AFTER),
        ("pairs_of_queue_page", {**AFTER, "queue": "q100"}),
        ("queue_names_page", {"after": "q100", "limit": PAGE}),
    ]:
        reads = index_reads(explain(registry, name, values, mode), name, mode)
        # queue_names_page reads the pairs of each queue it lists (DISTINCT over the key)
        bound = PAGE * TENANTS + TENANTS if name == "queue_names_page" else PAGE + 1
        assert 0 < sum(reads.values()) <= bound + PAGE, (name, mode, reads)


@pytest.mark.parametrize("mode", MODES)
def test_counts_of_a_page_of_pairs_use_the_state_indexes(registry, mode):
    pairs = {"queues": [f"q{q:03d}" for q in range(1, PAGE + 1)], "tenants": ["t042"] * PAGE}
    for name, values in [("pair_state_counts", pairs),
                         ("pair_oldest_ready", {**pairs, "heads": [], "head_batches": [],
                                                "head_places": []}),
                         ("pairs_with_warm_rows", pairs)]:
        reads = index_reads(explain(registry, name, values, mode), name, mode)
        assert reads and sum(reads.values()) <= 4 * PAGE, (name, mode, reads)


@pytest.mark.parametrize("mode", MODES)
def test_a_tenants_dead_letters_page_reads_its_own_part_of_the_dead_line(registry, mode):
    first = {"queue": "deadq", "tenant": "t042", "limit": 10, "after": "infinity",
             "after_id": "ffffffff-ffff-ffff-ffff-ffffffffffff"}
    reads = index_reads(explain(registry, "dlq_page_of_tenant", first, mode),
                        "dlq_page_of_tenant", mode)
    assert set(reads) == {"tierq_tasks_dead_line"}, (mode, reads)
    assert reads["tierq_tasks_dead_line"] <= DEAD_ROWS // TENANTS, (mode, reads)


@pytest.mark.parametrize("mode", MODES)
def test_a_queues_dead_letters_page_reads_about_a_page(registry, mode):
    # an admin's page names no tenant: it walks the queue's dead letters in page order
    # instead of sorting all of them
    first = {"queue": "deadq", "limit": 10, "after": "infinity",
             "after_id": "ffffffff-ffff-ffff-ffff-ffffffffffff"}
    nodes = explain(registry, "dlq_page", first, mode)
    assert not any(node["Node Type"] == "Sort" for node in nodes), (mode, nodes)
    reads = index_reads(nodes, "dlq_page", mode)
    assert set(reads) == {"tierq_tasks_dead_by_queue"}, (mode, reads)
    assert reads["tierq_tasks_dead_by_queue"] <= 10, (mode, reads)
