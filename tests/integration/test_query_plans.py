"""The statements that settle leased tasks find their rows by primary key, whatever the
planner knows. A fresh table has no statistics until autovacuum's first ANALYZE; the planner
then guesses that one row of a queue is warm, and a statement that filtered on
``queue = … AND state = 'warm'`` scanned tierq_tasks_warm_since instead: every warm row of
the queue read for each batch of 100 acks (~50 µs of PostgreSQL CPU per task in the
benchmarks). Each plan here is checked generic and custom, on a table never analyzed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.integration.plans import (
    BATCH_PAIRS_SETUP,
    PAIRS_SETUP,
    WARM_ROWS,
    explain,
    rows_read,
    rows_setup,
    seq_scans_of_tasks,
)

BATCH = 100
LARGE_BATCH = 400
# the statements that settle leased (or refused) tasks by id
SETTLING = ["ack_delete", "ack_delete_by_attempt", "ack_keep", "lease_outcomes",
            "release_leased", "mark_cold", "take_over_for_restore", "claimed_tasks_by_ids",
            "cancelled_among", "groups_of_tasks", "write_progress", "ack_keep_waited"]


def arguments(ids: list[uuid.UUID]) -> dict[str, Any]:
    n = len(ids)
    return {"queue": "q", "ids": ids, "now": "2026-01-01T00:00:00Z",
            "before": "2999-01-01T00:00:00Z",
            "attempt": 1, "attempts": [1] * n, "errors": ["boom"] * n,
            "retry_ats": ["2026-01-01T00:01:00Z"] * n, "deads": [False] * n,
            "results": ['{"ok": true}'] * n, "waited": False,
            "tenants": ["_"] * n, "tenant_set": ["_"], "progress": ['{"n": 1}'] * n,
            "progress_at": ["2026-01-01T00:00:00Z"] * n,
            # (claimed_tasks_by_ids: none of them a batch member)
            "member_ids": [], "batches": [], "places": [], "member_tenants": []}


def assert_reads_about(nodes: list[dict[str, Any]], rows: int, label: tuple[str, ...]) -> None:
    for node in nodes:
        if node.get("Relation Name") == "tierq_tasks" or "Index Name" in node:
            read = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            # (a few more than asked: index entries of the row versions earlier cases rolled
            # back)
            assert read <= 2 * rows, (*label, node["Node Type"], read)


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
@pytest.mark.parametrize("batch", [BATCH, LARGE_BATCH])
@pytest.mark.parametrize("name", SETTLING)
def test_settling_statements_use_the_primary_key_only(unanalyzed, name, batch, mode):
    """Also for a batch of 400 (a claim's most): a custom plan costs each id of the array at
    the default selectivity of a table without statistics, so 400 ids looked like most of
    20,000 rows and the whole table was read (13 ms a batch, against 0.5 by key). An
    engine behind RDS Proxy (no prepared statements) plans every statement custom."""
    ids = [r[0] for r in unanalyzed.execute(
        "SELECT id FROM tierq_tasks ORDER BY random() LIMIT %s", (batch,))]
    nodes = explain(unanalyzed, name, arguments(ids), mode)
    # (claimed_tasks_by_ids reads batch rows too, by their keys: migration 0030)
    indexes = {n["Index Name"] for n in nodes
               if n.get("Index Name", "").startswith("tierq_tasks")}
    assert indexes == {"tierq_tasks_pkey"}, (name, mode, indexes)
    assert seq_scans_of_tasks(nodes) == [], (name, mode)
    assert_reads_about(nodes, batch, (name, mode))


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


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_reconcilers_slice_reads_about_a_slice_after_its_cursor(unanalyzed, mode):
    """5,000 warm rows of one pair written at different times: a slice in the middle reads
    about its own rows by tierq_tasks_warm_since, not the rows before its cursor."""
    setup = ("INSERT INTO tierq_tasks (id, queue, tenant, priority, payload, state, run_at,"
             " run_at_initially, max_attempts, seq, created_at, ready_since, state_since)"
             " SELECT gen_random_uuid(), 'r', '_', 0, '{}', 'warm', now(), now(), 5, g, now(),"
             " now(), timestamptz '2026-01-01' + g * interval '1 ms'"
             " FROM generate_series(1, 5000) g")
    values = {"queue": "r", "tenant": "_", "before": "2999-01-01T00:00:00Z", "limit": BATCH,
              "after": "2026-01-01T00:00:03Z"}
    nodes = explain(unanalyzed, "warm_suspects", values, mode, setup)
    assert nodes[0]["Actual Rows"] == BATCH
    assert seq_scans_of_tasks(nodes) == [], mode
    assert {n["Index Name"] for n in nodes if "Index Name" in n} == {"tierq_tasks_warm_since"}
    assert_reads_about(nodes, BATCH, ("warm_suspects", mode))  # each of its two reads


# -- maintenance by activity: the walks read what has work, never the pairs ever seen ----------

@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_warm_walk_skips_over_each_pairs_rows(unanalyzed, mode):
    """20,000 warm rows of one pair and many batch rows of another: the walk reads one
    index entry per pair, not the rows."""
    values = {"after_queue": "", "after_tenant": "", "limit": 100}
    nodes = explain(unanalyzed, "walk_warm_pairs", values, mode, BATCH_PAIRS_SETUP)
    assert seq_scans_of_tasks(nodes) == [], mode
    assert nodes[0]["Actual Rows"] == 2  # b (its batch rows), q (its warm rows)
    assert {n["Index Name"] for n in nodes if "Index Name" in n} == {
        "tierq_tasks_warm_since", "tierq_batch_pairs_pkey"}
    assert rows_read(nodes) <= 4, (mode, rows_read(nodes))
    assert rows_read(nodes, "tierq_batch_pairs") <= 4, mode


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
    setup = ";".join([rows_setup("done-q", "done"), rows_setup("dead-q", "dead"),
                      rows_setup("cancelled-q", "cancelled")])
    nodes = explain(unanalyzed, "walk_finished_queues",
                    {"after_queue": "", "limit": 100}, mode, setup)
    assert seq_scans_of_tasks(nodes) == [], mode
    assert {"tierq_tasks_done_since", "tierq_tasks_dead_line",
            "tierq_tasks_cancelled_since"} <= {
        n["Index Name"] for n in nodes if "Index Name" in n}
    assert nodes[0]["Actual Rows"] == 3
    assert rows_read(nodes) <= 6, (mode, rows_read(nodes))


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
@pytest.mark.parametrize(("name", "state", "index"), [
    ("purge_done_before", "done", "tierq_tasks_done_since"),
    ("purge_cancelled_before", "cancelled", "tierq_tasks_cancelled_since"),
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


TOMBSTONES_SETUP = (
    "INSERT INTO tierq_payload_keys (object_key, tenant, state, created_at, deleted_at) "
    "SELECT 'tenants/t' || (g % 50) || '/' || md5(g::text), 't' || (g % 50), "
    "CASE WHEN g % 10 = 0 THEN 'used' ELSE 'deleted' END, '2026-01-01', "
    "CASE WHEN g % 10 = 0 THEN NULL ELSE timestamptz '2026-01-02' END "
    "FROM generate_series(1, 20000) g")


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_forgetting_tombstones_reads_the_oldest_by_index(unanalyzed, mode):
    """The reaper's removal of old payload tombstones (logic/payloads.sweep) reads the
    oldest tombstones by migration 0027's index and deletes by key: a slice's worth of
    rows, never the whole table (20,000 keys here, 100 removed). Checked on an analyzed
    table, unlike the statements above: without statistics the planner reads every old
    tombstone's index entry (a bitmap) and sorts them, which costs the tail of tombstones
    past their days, the tail this statement keeps short once it runs each pass."""
    values = {"before": "2999-01-01T00:00:00Z", "limit": 100}
    nodes = explain(unanalyzed, "payload_tombstones_forget", values, mode,
                    setup=TOMBSTONES_SETUP + "; ANALYZE tierq_payload_keys")
    assert [n for n in nodes if n["Node Type"] == "Seq Scan"] == [], mode
    assert {n["Index Name"] for n in nodes if "Index Name" in n} == {
        "tierq_payload_keys_deleted", "tierq_payload_keys_pkey"}, mode
    for node in nodes:
        if "Index Name" in node:
            read = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            assert read <= 2 * 100, (mode, node["Node Type"], read)


REPLAY_BATCH = 1000  # logic/dlq.REPLAY_BATCH


def dead_keyed_setup(ids: list[uuid.UUID]) -> str:
    """Dead rows of queue 'dq' with these ids, keys k1, k2, …; every tenth key held by a
    warm task."""
    literal = "{" + ",".join(map(str, ids)) + "}"
    columns = ("id, queue, tenant, key, priority, payload, state, run_at, run_at_initially,"
               " max_attempts, seq, created_at, ready_since, state_since, finished_at")
    return (f"INSERT INTO tierq_tasks ({columns})"
            f" SELECT v.id, 'dq', '_', 'k' || v.n, 0, '{{}}', 'dead', now(), now(), 5,"
            " 200000 + v.n, now(), now(), now(), now()"
            f" FROM unnest('{literal}'::uuid[]) WITH ORDINALITY AS v(id, n);"
            f" INSERT INTO tierq_tasks ({columns})"
            " SELECT gen_random_uuid(), 'dq', '_', 'k' || g, 0, '{}', 'warm', now(), now(), 5,"
            f" 300000 + g, now(), now(), now(), NULL FROM generate_series(10, {len(ids)}, 10) g")


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
@pytest.mark.parametrize(("name", "everything", "index"), [
    ("lock_dead", True, "tierq_tasks_dead_by_queue"),
    ("lock_dead", False, "tierq_tasks_dead_by_queue"),
    ("reset_dead", False, "tierq_tasks_pkey")])
def test_a_replay_reads_its_dead_rows_by_index_and_probes_the_live_keys(
        unanalyzed, name, everything, index, mode):
    """A replay's batch of dead rows (its lock, then its reset) is read by index, and each
    row's key is probed on tierq_tasks_live_key: the 20,000 warm rows of queue 'q' are
    never read."""
    ids = [uuid.uuid4() for _ in range(REPLAY_BATCH)]
    values = {"queue": "dq", "tenant": None, "all": everything,
              "ids": [] if everything else ids, "limit": REPLAY_BATCH,
              "now": "2026-01-01T00:00:00Z"}
    nodes = explain(unanalyzed, name, values, mode, dead_keyed_setup(ids))
    assert nodes[0]["Actual Rows"] == REPLAY_BATCH - REPLAY_BATCH // 10  # (the keys free)
    assert seq_scans_of_tasks(nodes) == [], (name, mode)
    indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
    assert indexes == {index, "tierq_tasks_live_key"}, (name, mode, indexes)
    assert_reads_about(nodes, REPLAY_BATCH, (name, mode))


# -- the delayed mover: the pairs with rows due, then each pair's share from its line --------

NOW = "2026-01-01T00:00:00Z"
BUSY_DUE = 5_000  # due rows of one pair, which has as many not due
LATER_PAIRS = 50  # pairs whose delayed rows are not due, 20 each
DELAYED_SETUP = ";".join(
    "INSERT INTO tierq_tasks (id, queue, tenant, priority, payload, state, run_at,"
    " run_at_initially, max_attempts, seq, created_at, state_since)"
    f" SELECT gen_random_uuid(), {queue}, {tenant}, 0, '{{}}', 'delayed', {run_at},"
    f" {run_at}, 5, 200000 + {seq}, now(), now() FROM generate_series(1, {n}) AS g"
    for queue, tenant, run_at, seq, n in [
        ("'d'", "'busy'", f"timestamptz '{NOW}' - interval '1 day' + g * interval '1 ms'",
         "g", BUSY_DUE),
        ("'d'", "'busy'", f"timestamptz '{NOW}' + g * interval '1 ms'", "5000 + g", BUSY_DUE),
        ("'d'", "'one'", f"timestamptz '{NOW}' - interval '1 hour'", "10000 + g", 1),
        ("'later-' || (g % 50)", "'_'", f"timestamptz '{NOW}' + interval '1 hour'",
         "20000 + g", 20 * LATER_PAIRS)])


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_pairs_come_due_are_read_from_the_due_rows_alone(unanalyzed, mode):
    """5,001 rows due of two pairs, 6,000 not due (the busy pair's other half, 50 pairs of
    20): the due range of tierq_tasks_delayed_due, never a row not due."""
    values = {"after_run_at": "0001-01-01T00:00:00Z", "after_seq": -(2**63), "now": NOW,
              "rows": 20_000}
    nodes = explain(unanalyzed, "pairs_come_due", values, mode, DELAYED_SETUP)
    assert nodes[0]["Actual Rows"] == 2
    assert seq_scans_of_tasks(nodes) == [], mode
    assert {n["Index Name"] for n in nodes if "Index Name" in n} == {
        "tierq_tasks_delayed_due"}, mode
    assert_reads_about(nodes, BUSY_DUE + 1, ("pairs_come_due", mode))
    assert rows_read(nodes) <= BUSY_DUE + 1 + 10, (mode, rows_read(nodes))


def test_a_look_reads_at_most_its_slice_of_the_rows_due(unanalyzed):
    """However many rows are due, one look reads its slice of them (here 1,000 of the
    busy pair's 5,000), from where the last one stopped: the prepared (generic) plan. A
    custom plan of this small table reads the range through a bitmap and sorts it (the
    planner finds that cheaper for 5,000 rows); for a flood it takes the index in order,
    as tests/maintenance/test_delayed_mover.py's flood under a short statement timeout
    shows."""
    mode = "force_generic_plan"
    values = {"after_run_at": "2025-12-31T00:00:00.100Z", "after_seq": 200100, "now": NOW,
              "rows": 1_000}
    nodes = explain(unanalyzed, "pairs_come_due", values, mode, DELAYED_SETUP)
    assert nodes[0]["Actual Rows"] == 1  # the busy pair alone in that slice
    assert seq_scans_of_tasks(nodes) == [], mode
    assert rows_read(nodes) <= 1_000 + 10, (mode, rows_read(nodes))


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_a_batch_looks_again_only_at_the_rows_come_due_since(unanalyzed, mode):
    """After the pass has seen every row due, a batch reads the rows come due since the
    one before: a millisecond of the busy pair's rows, not its 5,000 due before."""
    values = {"after_run_at": "2025-12-31T00:00:04.998Z", "after_seq": 2**63 - 1,
              "now": "2025-12-31T00:00:04.999Z", "rows": 20_000}
    nodes = explain(unanalyzed, "pairs_come_due", values, mode, DELAYED_SETUP)
    assert nodes[0]["Actual Rows"] == 1
    assert {n["Index Name"] for n in nodes if "Index Name" in n} == {
        "tierq_tasks_delayed_due"}, mode
    assert rows_read(nodes) <= 3, (mode, rows_read(nodes))


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
@pytest.mark.parametrize("after", [None, 100])
def test_a_delayed_batch_reads_each_pairs_share_from_the_front_of_its_line(
        unanalyzed, mode, after):
    """Each pair's share read from tierq_tasks_delayed_line in due order (no sort of the
    busy pair's 10,000 rows), locked; a pair whose rows are not due reads one entry. The
    batch reads about its own rows, also after a row it took in an earlier round."""
    share = BATCH // 2
    after_run_at = None if after is None else f"2025-12-31T00:00:00.{after:03d}Z"
    values = {"queues": ["d", "d", "later-1"], "tenants": ["busy", "one", "_"],
              "limits": [share, share, share], "now": NOW,
              "after_run_ats": [after_run_at, None, None],
              "after_seqs": [None if after is None else 200000 + after, None, None]}
    nodes = explain(unanalyzed, "lock_due_of_pairs", values, mode, DELAYED_SETUP)
    assert nodes[0]["Actual Rows"] == share + 1  # the busy pair's share, the other's one
    assert seq_scans_of_tasks(nodes) == [], mode
    assert {n["Index Name"] for n in nodes if "Index Name" in n} == {
        "tierq_tasks_delayed_line"}, mode
    assert "LockRows" in {n["Node Type"] for n in nodes}
    assert "Sort" not in {n["Node Type"] for n in nodes}
    assert_reads_about(nodes, share, ("lock_due_of_pairs", mode))
    assert rows_read(nodes) <= share + 1 + 3, (mode, rows_read(nodes))
