"""The reaper's gauge walk reads one index entry per pair with rows in a counted state, from
each state's partial index: neither the rows of a busy pair (20,000 warm rows of one pair),
nor the registry's idle pairs, nor done rows. Checked generic and custom, on a table never
analyzed (see test_query_plans)."""

from __future__ import annotations

import pytest

from tests.integration.plans import (
    BATCH_PAIRS_SETUP,
    PAIRS_SETUP,
    explain,
    rows_read,
    rows_setup,
    seq_scans_of_tasks,
)

STATE_INDEXES = {"tierq_tasks_warm_since", "tierq_tasks_cold_line", "tierq_tasks_delayed_line",
                 "tierq_tasks_dead_line"}


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_gauge_walk_reads_one_entry_per_pair_with_rows(unanalyzed, mode):
    setup = ";".join([rows_setup("c", "cold"), rows_setup("d", "delayed"),
                      rows_setup("x", "dead"), rows_setup("done-only", "done"), PAIRS_SETUP,
                      BATCH_PAIRS_SETUP])
    values = {"after_queue": "", "after_tenant": "", "limit": 100}
    nodes = explain(unanalyzed, "walk_gauge_pairs", values, mode, setup)
    assert seq_scans_of_tasks(nodes) == [], mode
    # b (its batch rows), c, d, q (the warm rows), x; not done-only
    assert nodes[0]["Actual Rows"] == 5
    relations = {n["Relation Name"] for n in nodes if "Relation Name" in n}
    # (the idle registry is not read)
    assert relations == {"tierq_tasks", "tierq_batch_pairs"}, (mode, relations)
    indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
    assert indexes == STATE_INDEXES | {"tierq_batch_pairs_pkey"}, (mode, indexes)
    assert rows_read(nodes) <= 4, (mode, rows_read(nodes))
    assert rows_read(nodes, "tierq_batch_pairs") <= 4, mode


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_gauge_walk_goes_on_after_its_cursor(unanalyzed, mode):
    setup = ";".join([rows_setup("c", "cold"), rows_setup("x", "dead"), PAIRS_SETUP])
    values = {"after_queue": "c", "after_tenant": "_", "limit": 100}
    nodes = explain(unanalyzed, "walk_gauge_pairs", values, mode, setup)
    assert seq_scans_of_tasks(nodes) == [], mode
    assert nodes[0]["Actual Rows"] == 2  # q and x, after c
    assert rows_read(nodes) <= 4, (mode, rows_read(nodes))
