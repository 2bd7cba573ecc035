"""The reaper visits only pairs with work, in budgeted slices whose cursor carries over, and
forgets pairs idle past the pair retention (never while a row of theirs remains, and
race-free against a process that still remembers them)."""

from __future__ import annotations

import re
import threading
from typing import Any

import psycopg
import pytest

from tests.integration.helpers import count_rows
from tests.maintenance.helpers import (
    TINY_BUDGET,
    cursor_of,
    lease_and_expire,
    lock_wait_given_up,
    registered,
    seed_idle_pairs,
)
from tierq.config import Settings
from tierq.logic import pairs
from tierq.logic.context import OffsetClock, to_datetime
from tierq.maintenance import reaper
from tierq.maintenance.registry import JobConfigError

RETENTION = 600.0  # the pair retention these tests set (the refresh interval is 150 s)


def test_idle_pairs_are_not_visited_and_an_expired_lease_is_reaped(make_tq, pg):
    tq = make_tq()
    seed_idle_pairs(pg, 300)
    lease_and_expire(tq, "live")
    tq.ctx.clock.advance(2)
    summary = reaper.run(tq.ctx)
    assert summary.pairs == 1 and summary.expired == 1 and summary.requeued == 1
    assert summary.completed and summary.purge_queues == 0 and summary.forgotten == []
    # the task is back in line and claimed again, attempt 2
    tq.run_delayed_mover()
    [again] = tq.claim("live", max=5)
    assert again.attempt == 2


def test_a_tiny_budget_visits_one_pair_per_pass_and_the_cursor_goes_round(make_tq, pg):
    tq = make_tq(maintenance_budget_seconds=TINY_BUDGET)  # TIERQ_MAINTENANCE_BUDGET_SECONDS
    seed_idle_pairs(pg, 50)
    queues = [f"q{i}" for i in range(5)]
    for queue in queues:
        lease_and_expire(tq, queue, ready=1)  # a ready task keeps the pair in the walk
    tq.ctx.clock.advance(2)
    reaped: list[str] = []
    for i, queue in enumerate(queues):
        summary = tq.run_reaper()
        assert (summary.pairs, summary.slices, summary.expired) == (1, 1, 1), i
        assert cursor_of(pg, reaper.LEASES_WALK) == (queue, "_")
        reaped.append(queue)
        expired_so_far = pg.execute(
            "SELECT array_agg(DISTINCT queue ORDER BY queue) FROM tierq_tasks"
            " WHERE attempts = 1").fetchone()
        assert expired_so_far is not None and expired_so_far[0] == reaped
    # round again from the start: nobody starves, nothing is expired twice
    summary = tq.run_reaper()
    assert (summary.pairs, summary.expired) == (1, 0)
    assert cursor_of(pg, reaper.LEASES_WALK) == ("q0", "_")


def test_small_slices_cover_every_pair_in_one_pass_with_time_to_spare(make_tq, pg):
    tq = make_tq()
    for queue in ("a", "b", "c", "d", "e"):
        lease_and_expire(tq, queue)
    tq.ctx.clock.advance(2)
    summary = reaper.run(tq.ctx, slice_size=2, budget_seconds=60)
    assert (summary.pairs, summary.slices, summary.expired) == (5, 3, 5)
    assert summary.completed
    # the expired tasks are back in line (warm rows): visited again, nothing to expire
    again = reaper.run(tq.ctx, slice_size=2)
    assert (again.pairs, again.expired) == (5, 0)
    # once they are done, no pair has work: nothing is visited
    for queue in ("a", "b", "c", "d", "e"):
        tq.ack(queue, tq.claim(queue, max=5))
    assert reaper.run(tq.ctx, slice_size=2).pairs == 0


def test_a_pass_that_stops_early_resumes_after_the_last_pair_it_visited(make_tq, pg):
    tq = make_tq()
    for queue in ("a", "b", "c", "d", "e"):
        lease_and_expire(tq, queue, ready=1)
    tq.ctx.clock.advance(2)
    pg.execute("INSERT INTO tierq_maintenance_cursors (walk, queue, tenant)"
               " VALUES (%s, 'c', '_')", (reaper.LEASES_WALK,))
    first = reaper.run(tq.ctx, budget_seconds=TINY_BUDGET)
    assert first.expired == 1 and cursor_of(pg, reaper.LEASES_WALK) == ("d", "_")
    rest = reaper.run(tq.ctx, slice_size=2, budget_seconds=60)
    # e, then round to a, b, c, d: every pair once, d's lease already taken
    assert (rest.pairs, rest.expired, rest.completed) == (5, 4, True)
    assert cursor_of(pg, reaper.LEASES_WALK) == ("d", "_")


def test_idle_pairs_are_forgotten_after_the_retention_but_not_while_rows_remain(make_tq, pg):
    tq = make_tq(pair_retention_seconds=RETENTION)
    queues = ("gone", "dead", "kept", "scheduled", "later")
    for queue in queues:
        tq.enqueue(queue, [{"payload": 1}])
    done = {q: tq.claim(q, max=1)[0] for q in queues}
    for queue in ("gone", "scheduled", "later"):  # acked: no task left
        tq.ack(queue, [done[queue]])
    tq.nack("dead", [{"id": done["dead"].id, "lease_token": done["dead"].lease_token,
                      "dead": True}])
    tq.ack("kept", [{"id": done["kept"].id, "lease_token": done["kept"].lease_token,
                     "result": {"ok": True}}])
    tq.put_schedule("nightly", {"queue": "scheduled", "payload": {}, "cron": "0 3 * * *"})
    # its occurrence's row too: only the schedule is left
    pg.execute("DELETE FROM tierq_tasks WHERE queue = 'scheduled'")

    assert reaper.run(tq.ctx).forgotten == []  # within the retention: kept
    tq.ctx.clock.advance(RETENTION + 1)
    tq.enqueue("later", [{"payload": 2}])  # used again just now: kept
    summary = reaper.run(tq.ctx)
    assert summary.forgotten == ["gone|_"]
    for queue in ("dead", "kept", "scheduled", "later"):
        assert registered(pg, queue), queue
    # once the rows are gone, their pairs go too
    pg.execute("DELETE FROM tierq_tasks WHERE queue IN ('dead', 'kept')")
    tq.delete_schedule("nightly")
    assert sorted(reaper.run(tq.ctx).forgotten) == ["dead|_", "kept|_", "scheduled|_"]
    assert registered(pg, "later")


def test_the_forget_walk_reads_one_slice_per_pass_and_wraps(make_tq, pg):
    tq = make_tq(pair_retention_seconds=RETENTION)
    seed_idle_pairs(pg, 25)
    tq.ctx.clock.advance(RETENTION + 1)
    first = reaper.run(tq.ctx, forget_slice=10)
    assert len(first.forgotten) == 10
    assert cursor_of(pg, reaper.FORGET_WALK) == ("idle-000010", "_")
    assert len(reaper.run(tq.ctx, forget_slice=10).forgotten) == 10
    last = reaper.run(tq.ctx, forget_slice=10)
    assert len(last.forgotten) == 5 and cursor_of(pg, reaper.FORGET_WALK) == ("", "")
    assert pg.execute("SELECT count(*) FROM tierq_queue_tenants").fetchone() == (0,)


def test_a_process_that_remembers_a_forgotten_pair_registers_it_again(make_tq, pg):
    clock = OffsetClock()
    reaper_side = make_tq(clock=clock, pair_retention_seconds=RETENTION)
    producer = make_tq(clock=clock, pair_retention_seconds=RETENTION)
    producer.enqueue("jobs", [{"payload": 0, "tenant": "t1"}])
    reaper_side.ack("jobs", reaper_side.claim("jobs", max=1))
    clock.advance(RETENTION + 1)
    assert reaper.run(reaper_side.ctx).forgotten == ["jobs|t1"]
    assert not registered(pg, "jobs", "t1")
    # the producer still has the pair in memory; its next enqueue registers it again
    producer.enqueue("jobs", [{"payload": 1, "tenant": "t1"}])
    assert registered(pg, "jobs", "t1")
    # so a claim across the queue's tenants finds the task, and maintenance keeps it
    [task] = reaper_side.claim("jobs", max=5, lease_seconds=1)
    assert task.tenant == "t1" and task.payload == 1
    clock.advance(2)
    summary = reaper.run(reaper_side.ctx)
    assert summary.expired == 1 and summary.forgotten == []
    reaper_side.run_delayed_mover()
    [again] = reaper_side.claim("jobs", max=5)
    assert again.id == task.id and again.attempt == 2


def test_a_registration_racing_with_the_forget_keeps_the_pair(make_tq, database_url, pg):
    tq = make_tq(pair_retention_seconds=RETENTION)
    tq.enqueue("race", [{"payload": 0}])
    tq.ack("race", tq.claim("race", max=1))
    tq.ctx.clock.advance(RETENTION + 1)
    outcome: dict[str, Any] = {}
    with psycopg.connect(database_url) as other:
        with other.transaction():
            # another process registers the pair again (last_seen now), not committed yet
            other.execute("UPDATE tierq_queue_tenants SET last_seen = %s"
                          " WHERE queue = 'race'", (to_datetime(tq.ctx.now()),))
            walker = threading.Thread(
                target=lambda: outcome.update(summary=reaper.run(tq.ctx)))
            walker.start()
            walker.join(0.5)  # the forget waits for the registration's row lock
        walker.join(30)
    assert not walker.is_alive()
    assert outcome["summary"].forgotten == [] and registered(pg, "race")


def test_quota_counts_distinct_queues_per_tenant_and_writes_nothing_beyond_it(make_tq, pg):
    from tierq.errors import QuotaExceeded

    tq = make_tq(max_queues_per_tenant=2)
    tq.enqueue("one", [{"payload": 1, "tenant": "a"}])
    tq.enqueue("two", [{"payload": 1, "tenant": "a"}])
    tq.enqueue("one", [{"payload": 2, "tenant": "a"}])  # a known queue: fine
    try:
        tq.enqueue("three", [{"payload": 1, "tenant": "a"}])
    except QuotaExceeded as exc:
        assert exc.status == 409 and exc.to_body()["error"]["code"] == "quota_exceeded"
        assert "three" in exc.message
    else:
        raise AssertionError("a third queue of tenant a was accepted")
    assert count_rows(pg, "three") == 0 and not registered(pg, "three", "a")
    # a batch with one tenant over the cap writes nothing for any tenant
    try:
        tq.enqueue("three", [{"payload": 1, "tenant": "b"}, {"payload": 2, "tenant": "a"}])
    except QuotaExceeded:
        pass
    else:
        raise AssertionError("the batch was accepted")
    assert count_rows(pg, "three") == 0 and not registered(pg, "three", "b")
    tq.enqueue("three", [{"payload": 1, "tenant": "b"}])  # another tenant: its own count
    # schedules register their pair the same way
    try:
        tq.put_schedule("s", {"queue": "four", "tenant": "a", "payload": {},
                              "every_seconds": 60})
    except QuotaExceeded:
        pass
    else:
        raise AssertionError("a schedule on a third queue of tenant a was accepted")
    assert pg.execute("SELECT count(*) FROM tierq_schedules").fetchone() == (0,)


def test_quota_holds_for_the_feeders_registration_and_for_racing_registrations(
        make_tq, database_url, pg):
    from tierq.errors import QuotaExceeded

    tq = make_tq(max_queues_per_tenant=3)
    now = tq.ctx.now()
    # the feeder registers inside its chunk's transaction (spark_glue writer.write_chunk)
    with psycopg.connect(database_url, row_factory=psycopg.rows.dict_row) as conn, \
            conn.transaction():
        pairs.register(tq.ctx.store, conn, "fed", ["a", "b"], now=now, cap=3)
    assert registered(pg, "fed", "a") and registered(pg, "fed", "b")
    # eight processes add a queue each for tenant a at once: exactly two more fit
    results: list[str] = []

    def add(i: int) -> None:
        try:
            pairs.register_pairs(tq.ctx.store, f"race-{i}", ["a"], now=now, cap=3)
            results.append("ok")
        except QuotaExceeded:
            results.append("refused")

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == ["ok"] * 2 + ["refused"] * 6
    assert pg.execute("SELECT count(*) FROM tierq_queue_tenants WHERE tenant = 'a'"
                      ).fetchone() == (3,)


def test_no_cap_when_the_setting_is_zero(make_tq, pg):
    tq = make_tq(max_queues_per_tenant=0)
    for i in range(5):
        tq.enqueue(f"q{i}", [{"payload": i}])
    assert pg.execute("SELECT count(*) FROM tierq_queue_tenants").fetchone() == (5,)


def test_forgetting_frees_quota(make_tq, pg):
    tq = make_tq(max_queues_per_tenant=1, pair_retention_seconds=RETENTION)
    tq.enqueue("old", [{"payload": 1}])
    tq.ack("old", tq.claim("old", max=1))
    tq.ctx.clock.advance(RETENTION + 1)
    assert reaper.run(tq.ctx).forgotten == ["old|_"]
    tq.enqueue("new", [{"payload": 1}])
    assert registered(pg, "new") and not registered(pg, "old")


def test_a_pair_whose_members_all_ended_is_forgotten_in_the_first_pass_past_the_retention(
        make_tq: Any, pg: Any) -> None:
    """Batch rows on whatever the environment: the pass sweeps the ended batch row before
    its walk and its forget, so the pair is neither touched as busy by the walk nor kept
    for its batch row, and is forgotten in the pass its rows would be."""
    tq = make_tq(batch_rows=True, pair_retention_seconds=RETENTION)
    tq.enqueue("members", [{"payload": i} for i in range(3)])
    assert pg.execute("SELECT count(*), sum(tasks) FROM tierq_batches").fetchone() == (1, 3)
    tq.ack("members", tq.claim("members", max=3))
    tq.ctx.clock.advance(RETENTION + 1)
    summary = reaper.run(tq.ctx)
    assert (summary.batches_swept, summary.pairs) == (1, 0)
    assert summary.forgotten == ["members|_"]


def test_a_batch_sweep_held_up_ends_the_sweep_not_the_pass(
        make_tq: Any, pg: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The sweep runs first in a pass: a statement of it that meets a lock gives up after
    SWEEP_LOCK_TIMEOUT and is logged, and the pass's other parts go on within the default
    budget (expired leases reaped)."""
    tq = make_tq()
    tq.enqueue("keyed", [{"payload": 1, "key": "k"}])  # (a row in either layout)
    [task] = tq.claim("keyed", max=1, lease_seconds=1)
    tq.ctx.clock.advance(2)
    with pg.transaction():
        pg.execute("LOCK TABLE tierq_batch_ends IN ACCESS EXCLUSIVE MODE")
        summary = reaper.run(tq.ctx)
    assert (summary.expired, summary.requeued, summary.failed) == (1, 1, [])
    assert "timed out sweeping batch rows" in caplog.text
    tq.run_delayed_mover()
    [again] = tq.claim("keyed", max=1)
    assert (again.id, again.attempt) == (task.id, 2)


def test_retention_purges_only_the_queues_with_finished_rows(make_tq, pg):
    tq = make_tq()
    seed_idle_pairs(pg, 100)
    for queue in ("dead", "kept"):
        tq.put_queue(queue, {"retention_seconds": 10})
        tq.enqueue(queue, [{"payload": 1}, {"payload": 2}])
    for task in tq.claim("dead", max=2):
        tq.nack("dead", [{"id": task.id, "lease_token": task.lease_token, "dead": True}])
    tq.ack("kept", [{"id": t.id, "lease_token": t.lease_token, "result": {"n": 1}}
                    for t in tq.claim("kept", max=2)])
    first = reaper.run(tq.ctx)
    assert (first.purge_queues, first.purged) == (2, 0)
    tq.ctx.clock.advance(11)
    second = reaper.run(tq.ctx)
    assert (second.purge_queues, second.purged) == (2, 4)
    assert count_rows(pg) == 0
    assert reaper.run(tq.ctx).purge_queues == 0


def more_expired_than_a_pass(make_tq, monkeypatch):
    """An engine whose reaper expires 10 leases a batch within a tiny budget, with 25 of
    pair "a"'s leases and one of pair "b"'s expired."""
    monkeypatch.setenv("TIERQ_REAPER_EXPIRED_BATCH", "10")  # read on the first pass
    tq = make_tq(maintenance_budget_seconds=TINY_BUDGET)
    tq.enqueue("a", [{"payload": i} for i in range(25)])
    assert len(tq.claim("a", max=25, lease_seconds=1)) == 25
    lease_and_expire(tq, "b")
    tq.ctx.clock.advance(2)
    return tq


def test_a_pair_with_more_expired_leases_than_a_pass_allows_takes_turns_with_the_others(
        make_tq, pg, monkeypatch):
    tq = more_expired_than_a_pass(make_tq, monkeypatch)
    progress = []
    for _ in range(5):
        summary = tq.run_reaper()
        progress.append((summary.expired, summary.pairs, cursor_of(pg, reaper.LEASES_WALK)))
    # one batch of "a" per turn; its turn ends with the budget, and "b" comes next
    assert progress == [(10, 1, ("a", "_")), (1, 1, ("b", "_")), (10, 1, ("a", "_")),
                        (0, 1, ("b", "_")), (5, 1, ("a", "_"))]


def test_config_has_the_reapers_batches_with_their_defaults() -> None:
    config = reaper.JOB.configure(Settings(maintenance_slice=30), environ={})
    assert (config.slice_size, config.expired_batch, config.reconcile_batch,
            config.purge_batch, config.forget_slice, config.idempotency_purge_batches,
            config.gauges_every_seconds, config.batch_slice, config.batch_slices) == (
        30, 500, 5000, 5000, 1000, 4, 60.0, 500, 4)
    assert reaper.JOB.schedule_env == "TIERQ_REAPER_EVERY"


@pytest.mark.parametrize(("variable", "value"), [
    ("TIERQ_REAPER_EXPIRED_BATCH", "0"),
    ("TIERQ_REAPER_PURGE_BATCH", "100001"),
    ("TIERQ_REAPER_FORGET_SLICE", "ten"),
    ("TIERQ_REAPER_GAUGES_EVERY_SECONDS", "0"),
    ("TIERQ_REAPER_STATEMENT_TIMEOUT_MS", "1000000"),
    ("TIERQ_REAPER_BATCH_SLICE", "0"),
])
def test_a_bad_value_is_refused_with_its_variable_named(variable, value) -> None:
    with pytest.raises(JobConfigError, match=re.escape(f"{variable}='{value}'")):
        reaper.JOB.configure(Settings(), environ={variable: value})


def test_purges_go_in_batches_of_its_config_and_stop_once_the_budget_is_spent(make_tq, pg):
    tq = make_tq(retention_seconds=10)
    tq.enqueue("q", [{"payload": i} for i in range(5)])
    tq.ack("q", [{"id": t.id, "lease_token": t.lease_token, "result": 1}  # kept as done
                 for t in tq.claim("q", max=5)])
    tq.ctx.clock.advance(11)
    first = reaper.run(tq.ctx, purge_batch=2, budget_seconds=TINY_BUDGET)
    assert (first.purge_queues, first.purged) == (1, 2)  # out of time inside the queue
    rest = reaper.run(tq.ctx, purge_batch=2, budget_seconds=60)
    assert (rest.purge_queues, rest.purged) == (1, 3)
    assert count_rows(pg) == 0


def test_a_queue_with_more_to_purge_than_a_pass_allows_takes_turns_with_the_others(
        make_tq, pg):
    """Running out of time inside a queue's retention ends its turn: the next pass purges
    the queue after it, not the same backlog again."""
    tq = make_tq(retention_seconds=10)
    for queue, n in (("a", 20), ("b", 1)):
        tq.enqueue(queue, [{"payload": i} for i in range(n)])
        tq.ack(queue, [{"id": t.id, "lease_token": t.lease_token, "result": 1}
                       for t in tq.claim(queue, max=n)])
    tq.ctx.clock.advance(11)
    progress = []
    for _ in range(4):
        summary = reaper.run(tq.ctx, purge_batch=2, budget_seconds=TINY_BUDGET)
        progress.append((summary.purged, cursor_of(pg, reaper.PURGE_WALK)))
    # one batch of "a" per turn; "b" comes next, then "a" again (round from the start)
    assert progress == [(2, ("a", "")), (1, ("b", "")), (2, ("a", "")), (2, ("a", ""))]
    assert (count_rows(pg, "a"), count_rows(pg, "b")) == (14, 0)


def test_a_pass_gives_up_a_lock_wait_at_its_lock_timeout(make_tq, pg) -> None:
    tq = make_tq()
    lease_and_expire(tq, "q")
    tq.ctx.clock.advance(2)
    waited = lock_wait_given_up(pg, "tierq_tasks",
                                lambda: reaper.run(tq.ctx, lock_timeout_ms=200))
    assert 0.15 < waited < 2.0  # the pool's lock timeout is 5 s
    assert reaper.run(tq.ctx).expired == 1  # the next pass does the work


def test_a_pair_whose_rows_stay_locked_is_listed_failed_and_the_others_are_reaped(
        make_tq, pg) -> None:
    """A lock wait over the pass's lock timeout costs that pair alone (not the pass, and not
    as 'PostgreSQL is not answering'); the next pass reaps it."""
    tq = make_tq()
    lease_and_expire(tq, "held")
    lease_and_expire(tq, "free")
    tq.ctx.clock.advance(2)
    with pg.transaction():
        # its task's row, or on batch rows the batch row its expiry moves it out of
        pg.execute("SELECT 1 FROM tierq_tasks WHERE queue = 'held' FOR UPDATE")
        pg.execute("SELECT 1 FROM tierq_batches WHERE queue = 'held' FOR UPDATE")
        summary = reaper.run(tq.ctx)
    assert summary.failed == ["held|_"]
    assert (summary.pairs, summary.expired, summary.requeued) == (2, 1, 1)
    again = reaper.run(tq.ctx)
    assert (again.failed, again.expired) == ([], 1)


def test_a_pair_that_keeps_its_leases_expiring_never_holds_back_the_pairs_after_it(
        make_tq, pg, monkeypatch):
    """A tenant whose workers claim and die as fast as the reaper expires (more expired
    leases every pass than a pass's budget allows) is served its turn, then the walk moves
    on: the other pairs' expired leases are reaped within a pass or two, not after it
    stops."""
    tq = more_expired_than_a_pass(make_tq, monkeypatch)

    def b_reaped() -> bool:
        row = pg.execute("SELECT attempts FROM tierq_tasks WHERE queue = 'b'").fetchone()
        return row is not None and row[0] == 1

    passes = 0
    while passes < 6 and not b_reaped():
        tq.run_reaper()
        passes += 1
        tq.claim("a", max=25, lease_seconds=1)  # a's workers take back its tasks and die
        tq.ctx.clock.advance(2)
    assert b_reaped() and passes <= 2


def test_a_pair_whose_keys_hold_the_wrong_type_is_listed_failed_and_the_others_are_reaped(
        make_tq, pg, valkey):
    """An error reply to one pair's script (its keys in a state no script expects) costs
    that pair alone: before, every pass raised at it and the pairs after it kept their
    expired leases."""
    tq = make_tq()
    lease_and_expire(tq, "a", ready=1)
    lease_and_expire(tq, "b", ready=1)
    tq.ctx.clock.advance(2)
    valkey.delete("tq:{a|_}:leased")
    valkey.set("tq:{a|_}:leased", "not a sorted set")
    for _ in range(2):  # and again the next pass: the others still go on
        summary = reaper.run(tq.ctx, budget_seconds=60)
        assert summary.failed == ["a|_"] and summary.pairs == 2
    row = pg.execute("SELECT attempts FROM tierq_tasks WHERE queue = 'b' AND attempts > 0"
                     ).fetchone()
    assert row == (1,)  # b's lease was reaped (once)


def test_a_queue_whose_finished_rows_stay_locked_is_passed_over_and_the_others_purged(
        make_tq, pg):
    """A finished row held past the pass's lock timeout costs its queue's retention alone:
    before, every pass ended there, before the other queues' purge and the pass's later
    parts."""
    tq = make_tq(retention_seconds=10)
    for queue in ("a", "b"):
        tq.enqueue(queue, [{"payload": i} for i in range(3)])
        tq.ack(queue, [{"id": t.id, "lease_token": t.lease_token, "result": 1}
                       for t in tq.claim(queue, max=5)])
    tq.ctx.clock.advance(11)
    with pg.transaction():
        pg.execute("SELECT 1 FROM tierq_tasks WHERE queue = 'a' FOR UPDATE")
        summary = reaper.run(tq.ctx)
        assert (summary.purge_failed, summary.purge_queues, summary.purged) == (["a"], 2, 3)
        assert count_rows(pg, "b") == 0 and count_rows(pg, "a") == 3
    again = reaper.run(tq.ctx)
    assert (again.purge_failed, again.purged) == ([], 3)
    assert count_rows(pg) == 0


def test_a_pair_whose_registry_row_is_held_is_reaped_and_touched_next_pass(make_tq, pg):
    """A registry row held past the pass's lock timeout is not waited for when the walk
    records its pairs busy: before, the pass ended there, before its cursor was saved, so
    every pass stopped at the same slice and the pass's later parts never ran."""
    tq = make_tq(retention_seconds=10)
    lease_and_expire(tq, "a")
    tq.enqueue("b", [{"payload": 1}])
    tq.ack("b", [{"id": t.id, "lease_token": t.lease_token, "result": 1}
                 for t in tq.claim("b", max=1)])
    tq.ctx.clock.advance(3600)  # past the lease, the retention and the refresh interval
    seen = "SELECT last_seen FROM tierq_queue_tenants WHERE queue = 'a'"
    [before] = pg.execute(seen).fetchone() or (None,)
    with pg.transaction():
        pg.execute("SELECT 1 FROM tierq_queue_tenants WHERE queue = 'a' FOR UPDATE")
        summary = reaper.run(tq.ctx)
        assert (summary.pairs, summary.expired, summary.purged) == (1, 1, 1)
        assert cursor_of(pg, reaper.LEASES_WALK) == ("a", "_")
    assert pg.execute(seen).fetchone() == (before,)  # left for the next pass
    reaper.run(tq.ctx, lock_timeout_ms=200, budget_seconds=60)
    [after] = pg.execute(seen).fetchone() or (None,)
    assert after > before


def test_an_idle_pair_whose_registry_row_is_held_is_kept_and_the_others_forgotten(
        make_tq, pg):
    """An idle pair's registry row held past the pass's lock timeout is passed over: before,
    the delete waited for it and the pass ended there, every pass, with none of the slice's
    pairs forgotten and the pass's later parts not run."""
    tq = make_tq(pair_retention_seconds=RETENTION)
    seed_idle_pairs(pg, 3)
    tq.ctx.clock.advance(RETENTION + 1)
    with pg.transaction():
        pg.execute("SELECT 1 FROM tierq_queue_tenants WHERE queue = 'idle-000002' FOR UPDATE")
        summary = reaper.run(tq.ctx)
        assert summary.forgotten == ["idle-000001|_", "idle-000003|_"]
    assert registered(pg, "idle-000002")
    assert reaper.run(tq.ctx).forgotten == ["idle-000002|_"]  # the walk came round


def stalled_group(tq: Any, pg: Any, queue: str, tenant: str) -> list[Any]:
    """Three tasks of group "g" of (queue, tenant), the first claimed and its row deleted
    (a crash between an ack's commit and its release): held with nothing active."""
    made = tq.enqueue(queue, [{"payload": i, "group": "g", "tenant": tenant}
                              for i in range(3)])
    [head] = tq.claim(queue, tenant=tenant)
    pg.execute("DELETE FROM tierq_tasks WHERE id = %s", (str(head.id),))
    return made


def test_a_stalled_group_whose_row_is_held_is_passed_over_and_the_others_released(
        make_tq, pg):
    """A group row held past the pass's lock timeout costs that group's release alone:
    before, the sweep released a queue's stalled groups in one transaction that waited for
    it, so every other tenant's stalled group of the queue stayed held with it."""
    tq = make_tq()
    held = stalled_group(tq, pg, "q", "ta")
    other = stalled_group(tq, pg, "q", "tb")
    with pg.transaction():
        pg.execute("SELECT 1 FROM tierq_groups WHERE tenant = 'ta' FOR UPDATE")
        summary = reaper.run(tq.ctx)
        assert (summary.groups_released, summary.groups_failed) == (1, ["q|ta|g"])
    assert tq.get_task("q", other[1].id).state == "warm"
    assert tq.get_task("q", held[1].id).state == "held"
    again = reaper.run(tq.ctx)  # the sweep came round
    assert (again.groups_released, again.groups_failed) == (1, [])
    assert tq.get_task("q", held[1].id).state == "warm"


def test_a_broken_ready_tenant_index_or_ready_set_costs_its_own_entry_alone(
        make_tq, pg, valkey):
    """Queue a's ready-tenant index holding the wrong type, and pair (b, tx)'s ready set
    too: the pass goes on, and (b, ty) is entered in b's index. Before, a's index refused
    the entry and the error ended every pass at the same slice; tx's count failing left
    every pair of b out of the backstop."""
    tq = make_tq()
    tq.enqueue("a", [{"payload": 1}])
    tq.enqueue("b", [{"payload": 1, "tenant": "tx"}, {"payload": 2, "tenant": "ty"}])
    lease_and_expire(tq, "c")
    tq.ctx.clock.advance(2)
    valkey.delete("tq:{a}:ready_tenants", "tq:{b|tx}:ready")
    valkey.set("tq:{a}:ready_tenants", "not a sorted set")
    valkey.set("tq:{b|tx}:ready", "not a sorted set")
    valkey.zrem("tq:{b}:ready_tenants", "ty")
    passes = [reaper.run(tq.ctx, budget_seconds=60) for _ in range(2)]  # the next one too
    assert [(s.ready_index_failed, s.pairs, s.expired) for s in passes] == [
        (["a"], 4, 1), (["a"], 4, 0)]
    assert valkey.zscore("tq:{b}:ready_tenants", "ty") is not None
    assert pg.execute("SELECT attempts FROM tierq_tasks WHERE queue = 'c'").fetchone() == (1,)


def dead_child(tq: Any, tenant: str) -> tuple[Any, Any]:
    """A parent in queue "q" dead at its first failure, and its child in "r" dead-lettered
    with it while waiting (the child keeps its wait)."""
    [parent] = tq.enqueue("q", [{"payload": "p", "max_attempts": 1, "tenant": tenant}])
    [child] = tq.enqueue("r", [{"payload": "c", "after": [parent.id], "tenant": tenant}])
    [task] = tq.claim("q", tenant=tenant)
    tq.nack("q", [{"id": task.id, "lease_token": task.lease_token, "error": "boom"}])
    assert tq.get_task("r", child.id).state == "dead"
    return parent, child


@pytest.mark.parametrize("purge_batch", [5000, 1])
def test_a_dead_childs_parent_held_keeps_its_wait_alone_and_the_others_are_forgotten(
        make_tq, pg, purge_batch):
    """A parent's row held past the pass's lock timeout when its dead child's retention
    ends keeps that child's wait alone: before, the waits of every tenant's purged dead
    letters went in one transaction that waited for it, so none were forgotten (their
    parents' waiters stayed up), and the queue's purge was listed failed. The wait kept is
    counted once, however many batches of dead letters the pass purged."""
    tq = make_tq()
    held, _ = dead_child(tq, "x")
    other, _ = dead_child(tq, "y")
    tq.put_queue("r", {"retention_seconds": 60})
    tq.ctx.clock.advance(120)
    waiters = "SELECT waiters FROM tierq_tasks WHERE id = %s"
    with pg.transaction():
        pg.execute("SELECT 1 FROM tierq_tasks WHERE id = %s FOR UPDATE", (str(held.id),))
        summary = reaper.run(tq.ctx, lock_timeout_ms=200, budget_seconds=60,
                             purge_batch=purge_batch)
        assert (summary.purge_failed, summary.purged, summary.waits_kept) == ([], 2, 1)
    assert pg.execute(waiters, (str(other.id),)).fetchone() == (0,)
    assert pg.execute(waiters, (str(held.id),)).fetchone() == (1,)
    dead_child(tq, "z")  # a later purge of dead letters forgets the wait kept
    tq.ctx.clock.advance(120)
    again = reaper.run(tq.ctx)
    assert (again.purged, again.waits_kept) == (1, 0)
    assert pg.execute(waiters, (str(held.id),)).fetchone() == (0,)
    assert pg.execute("SELECT count(*) FROM tierq_task_waits").fetchone() == (0,)


def test_a_queue_whose_stored_settings_are_refused_is_passed_over_and_the_others_reaped(
        make_tq, pg):
    """A queue's settings row holding a value the table allows but the settings model
    refuses (max_attempts 5000, written by hand) costs that queue alone: before, its first
    pair's lease expiry raised the model's error every pass, before the walk saved its
    cursor, and no other pair's lease was reaped nor any queue purged."""
    tq = make_tq(retention_seconds=10)
    for queue in ("a", "b"):
        tq.enqueue(queue, [{"payload": 1}])
        tq.ack(queue, [{"id": t.id, "lease_token": t.lease_token, "result": 1}
                       for t in tq.claim(queue, max=1)])
        lease_and_expire(tq, queue)
    tq.put_queue("a", {"max_attempts": 5})
    pg.execute("UPDATE tierq_queues SET max_attempts = 5000 WHERE queue = 'a'")
    tq.ctx.clock.advance(20)
    for _ in range(2):  # and again the next pass
        summary = reaper.run(tq.ctx, budget_seconds=60)
        assert (summary.failed, summary.purge_failed) == (["a|_"], ["a"])
    leased = "SELECT attempts FROM tierq_tasks WHERE queue = %s AND state <> 'done'"
    assert pg.execute(leased, ("b",)).fetchone() == (1,)  # b's lease reaped
    assert (count_rows(pg, "a"), count_rows(pg, "b")) == (2, 1)  # b's done row purged


def test_ended_batch_rows_are_swept_a_slice_at_a_time_and_the_walk_wraps(make_tq, pg):
    """The reaper's batch sweep (migration 0030): a pass looks at ``batch_slices`` slices
    of ``batch_slice`` batch rows after its cursor, deletes those whose every member has
    ended (acked or moved out) with their ends, and the next pass goes on after the last
    one it looked at, then round from the start."""
    from tierq.core.batch_ids import batch_ids

    tq = make_tq()
    store, now = tq.ctx.store, to_datetime(tq.ctx.now())
    batches = []
    for _ in range(5):
        ids = batch_ids(2)
        store.insert_batch("q", now, {
            "batch": ids[0], "tenant_names": "{a}", "tenant_of": None, "priorities": "{0,0}",
            "payloads": "[1, 2]", "max_attempts": 5, "timeout": None})
        batches.append(ids)
    for ids in batches[:4]:  # every member of four batches ended; the fifth's half
        store.end_batch_members("q", ids[:1], ["a"], [1])
        store.move_out_of_batches("q", ids[1:], ["a"])
    store.end_batch_members("q", batches[4][:1], ["a"], [1])
    first = reaper.run(tq.ctx, batch_slice=1, batch_slices=3)
    assert (first.batches_swept, first.batch_tasks_swept) == (3, 6)
    cursor = "SELECT queue FROM tierq_maintenance_cursors WHERE walk = 'reaper.batches'"
    assert pg.execute(cursor).fetchone() == (batches[2][0],)
    second = reaper.run(tq.ctx, batch_slice=1, batch_slices=3)
    assert (second.batches_swept, second.batch_tasks_swept) == (1, 2)
    assert pg.execute(cursor).fetchone() == ("00000000-0000-0000-0000-000000000000",)
    store.end_batch_members("q", batches[4][1:], ["a"], [1])
    assert reaper.run(tq.ctx).batches_swept == 1
    assert pg.execute("SELECT (SELECT count(*) FROM tierq_batches),"
                      " (SELECT count(*) FROM tierq_batch_ends)").fetchone() == (0, 0)
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (4,)  # the moved
