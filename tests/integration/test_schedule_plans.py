"""The cron tick's reads cost the schedules due, whatever the planner knows: with 20,000
schedules that are not due (and removed schedules' remnants), the slice query reads a few
entries of its partial indexes and never scans either table. Checked generic and custom, on
tables never analyzed (the ``unanalyzed`` database, tests/integration/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.plans import explain

IDLE_SCHEDULES = 20_000
DUE = 3
NOW_MS = 1_800_000_000_000

SETUP = ";".join([
    # idle schedules: due tomorrow, or never (disabled)
    "INSERT INTO tierq_schedules (name, queue, tenant, payload, every_ms, config_hash,"
    " tick_at_ms, created_at, updated_at)"
    f" SELECT 'idle-' || g, 'q', 't' || (g % 50), '{{}}', 86400000, 'h',"
    f" CASE WHEN g % 4 = 0 THEN NULL ELSE {NOW_MS} + 86400000 END, now(), now()"
    f" FROM generate_series(1, {IDLE_SCHEDULES}) AS g",
    # a few due
    "INSERT INTO tierq_schedules (name, queue, tenant, payload, every_ms, config_hash,"
    " tick_at_ms, created_at, updated_at)"
    f" SELECT 'due-' || g, 'q', 'acme', '{{}}', 60000, 'h', {NOW_MS} - g, now(), now()"
    f" FROM generate_series(1, {DUE}) AS g",
    # remnants of removed schedules: one due, the rest later
    "INSERT INTO tierq_schedule_remnants (tenant, name, tick_at_ms)"
    f" SELECT 'acme', 'gone-' || g, {NOW_MS} + g FROM generate_series(0, 999) AS g",
])
TABLES = {"tierq_schedules", "tierq_schedule_remnants"}


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_tick_reads_the_due_schedules_on_their_index(unanalyzed: Any, mode: str) -> None:
    values = {"now_ms": NOW_MS, "after_at": -1, "after_tenant": "", "after_name": "",
              "limit": 200}
    nodes = explain(unanalyzed, "schedules_due", values, mode, SETUP)
    assert nodes[0]["Actual Rows"] == DUE + 1
    assert [n["Node Type"] for n in nodes
            if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in TABLES] == [], mode
    assert {n["Index Name"] for n in nodes if "Index Name" in n} == {
        "tierq_schedules_due", "tierq_schedule_remnants_due"}, mode
    for node in nodes:
        if node.get("Relation Name") in TABLES:
            read = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            assert read <= DUE + 1, (mode, node["Relation Name"], read)


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_a_slice_after_its_cursor_reads_about_a_slice(unanalyzed: Any, mode: str) -> None:
    """All 20,000 due: a slice of 100 after a cursor half way reads about 100 entries."""
    setup = SETUP + f"; UPDATE tierq_schedules SET tick_at_ms = {NOW_MS} - 5"
    values = {"now_ms": NOW_MS, "after_at": NOW_MS - 5, "after_tenant": "t3",
              "after_name": "idle-5000", "limit": 100}
    nodes = explain(unanalyzed, "schedules_due", values, mode, setup)
    assert nodes[0]["Actual Rows"] == 100
    for node in nodes:
        if node.get("Relation Name") in TABLES:
            read = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            assert read <= 2 * 100, (mode, node["Relation Name"], read)
