"""The cron tick: schedules with work are visited until its pass's budget is spent (at least
one per pass; those left come in the next pass); due schedules are ticked in one
transaction per slice, a failing one rolled back alone; its config is validated with the bad
variable named; its pass gives up a lock wait at its own lock timeout."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from tests.maintenance.helpers import TINY_BUDGET, lock_wait_given_up
from tierq.config import Settings
from tierq.engine import Tierq
from tierq.logic import schedules
from tierq.maintenance import cron_tick
from tierq.maintenance.registry import JobConfigError

SCHEDULES = ("s1", "s2", "s3")


def schedules_with_work(tq: Tierq) -> None:
    """Three schedules firing every second, 10 s on: each has 10 occurrences to install."""
    for name in SCHEDULES:
        tq.put_schedule(name, {"queue": "q", "payload": name, "every_seconds": 1})
    tq.ctx.clock.advance(10)


def installed(pg: psycopg.Connection[Any]) -> dict[str, int]:
    """Occurrences installed so far, by schedule."""
    return dict(pg.execute("SELECT schedule, count(*) FROM tierq_schedule_occurrences"
                           " GROUP BY schedule").fetchall())


def test_a_spent_budget_ends_the_pass_and_the_next_goes_on_after_it(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    schedules_with_work(tq)
    before = installed(pg)
    visited = []
    for _ in SCHEDULES:
        assert cron_tick.run(tq.ctx, budget_seconds=TINY_BUDGET).schedules == 1
        now = installed(pg)
        visited += [name for name in SCHEDULES if now[name] > before[name]]
        before = now
    # s1 still has work after its visit (its due occurrences have not run), yet the passes
    # go on after it instead of starting with it again
    assert visited == list(SCHEDULES)


def test_a_pass_with_budget_visits_every_schedule_with_work(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    schedules_with_work(tq)
    summary = cron_tick.run(tq.ctx, budget_seconds=60)
    assert (summary.schedules, summary.failed) == (3, [])
    assert summary.installed >= 30 and min(installed(pg).values()) >= 130


def test_config_defaults_and_the_shared_budget() -> None:
    config = cron_tick.JOB.configure(Settings(maintenance_budget_seconds=0.75), environ={})
    assert (config.budget_seconds, config.statement_timeout_ms, config.lock_timeout_ms) == \
        (0.75, 10_000, 2_000)
    assert cron_tick.JOB.schedule_env == "TIERQ_CRON_EVERY"
    assert cron_tick.JOB.every(Settings(cron_every=4.0)) == 4.0


@pytest.mark.parametrize(("variable", "value"), [
    ("TIERQ_CRON_TICK_BUDGET_SECONDS", "0"),
    ("TIERQ_CRON_TICK_BUDGET_SECONDS", "soon"),
    ("TIERQ_CRON_TICK_LOCK_TIMEOUT_MS", "-5"),
])
def test_a_bad_value_is_refused_with_its_variable_named(variable: str, value: str) -> None:
    with pytest.raises(JobConfigError, match=re.escape(f"{variable}='{value}'")):
        cron_tick.JOB.configure(Settings(), environ={variable: value})


def test_a_field_it_does_not_have_is_refused() -> None:
    with pytest.raises(JobConfigError, match=r"cron_tick\.batch=5"):
        cron_tick.JOB.configure(Settings(), environ={}, batch=5)


def test_a_pass_gives_up_a_lock_wait_at_its_lock_timeout(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    schedules_with_work(tq)
    waited = lock_wait_given_up(pg, "tierq_schedules",
                                lambda: cron_tick.run(tq.ctx, lock_timeout_ms=200))
    assert 0.15 < waited < 2.0  # the pool's lock timeout is 5 s
    assert cron_tick.run(tq.ctx).installed >= 30  # the next pass does the work


def test_a_schedule_whose_tick_times_out_is_listed_failed_and_the_others_go_on(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """A lock wait over the pass's lock timeout costs that schedule alone this tick (not
    the pass, and not as 'PostgreSQL is not answering'); the next tick installs it."""
    schedules_with_work(tq)
    before = installed(pg)
    with pg.transaction():
        pg.execute("SELECT 1 FROM tierq_schedules WHERE name = 's2' FOR UPDATE")
        summary = cron_tick.run(tq.ctx, budget_seconds=60, lock_timeout_ms=200)
    assert (summary.schedules, summary.failed) == (3, ["s2"])
    after = installed(pg)
    assert after["s2"] == before["s2"]
    assert after["s1"] > before["s1"] and after["s3"] > before["s3"]
    again = cron_tick.run(tq.ctx, budget_seconds=60)
    assert again.failed == [] and installed(pg)["s2"] > before["s2"]


def task_count(pg: psycopg.Connection[Any]) -> int:
    row = pg.execute("SELECT count(*) FROM tierq_tasks").fetchone()
    assert row is not None
    return int(row[0])


@contextmanager
def ticks_seen(pg: psycopg.Connection[Any]) -> Iterator[Callable[[], list[int]]]:
    """The transactions that write schedules' rows, counted on the server: a trigger notes
    the top transaction's id (``pg_current_xact_id``, the same inside a savepoint) of each
    row an install marks. Yields a function answering how many rows each transaction
    marked, in the order they began."""
    pg.execute("CREATE TABLE test_tick_xacts (xact xid8 NOT NULL)")
    pg.execute("""CREATE FUNCTION test_note_tick_xact() RETURNS trigger LANGUAGE plpgsql AS
                  $$ BEGIN INSERT INTO test_tick_xacts VALUES (pg_current_xact_id());
                  RETURN NULL; END $$""")
    pg.execute("CREATE TRIGGER test_note_tick_xact AFTER UPDATE ON tierq_schedules"
               " FOR EACH ROW EXECUTE FUNCTION test_note_tick_xact()")
    try:
        yield lambda: [n for _, n in pg.execute(
            "SELECT xact::text::bigint, count(*) FROM test_tick_xacts"
            " GROUP BY 1 ORDER BY 1").fetchall()]
    finally:
        pg.execute("DROP TRIGGER test_note_tick_xact ON tierq_schedules")
        pg.execute("DROP FUNCTION test_note_tick_xact()")
        pg.execute("DROP TABLE test_tick_xacts")


@contextmanager
def occurrences_of_refused(pg: psycopg.Connection[Any], schedule: str) -> Iterator[None]:
    """A broken schedule: every insert of an occurrence of ``schedule`` raises, after its
    install has written (pruned, withdrawn, inserted the tasks of its statement)."""
    pg.execute(f"""CREATE FUNCTION test_refuse_occurrence() RETURNS trigger LANGUAGE plpgsql
                   AS $$ BEGIN IF NEW.schedule = '{schedule}' THEN
                   RAISE EXCEPTION 'schedule % is broken', NEW.schedule; END IF;
                   RETURN NEW; END $$""")
    pg.execute("CREATE TRIGGER test_refuse_occurrence BEFORE INSERT"
               " ON tierq_schedule_occurrences"
               " FOR EACH ROW EXECUTE FUNCTION test_refuse_occurrence()")
    try:
        yield
    finally:
        pg.execute("DROP TRIGGER test_refuse_occurrence ON tierq_schedule_occurrences")
        pg.execute("DROP FUNCTION test_refuse_occurrence()")


def test_a_tick_commits_once_per_slice_of_due_schedules(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """12 due schedules in slices of 4: three transactions write them, four each (one
    commit per schedule would be twelve)."""
    names = [f"c{i:02}" for i in range(12)]
    for name in names:
        tq.put_schedule(name, {"queue": "q", "payload": name, "every_seconds": 1})
    tq.ctx.clock.advance(10)
    with ticks_seen(pg) as seen:
        summary = cron_tick.run(tq.ctx, budget_seconds=60, slice_size=4)
        assert (summary.schedules, summary.failed, summary.busy) == (12, [], 0)
        assert seen() == [4, 4, 4]
        assert summary.installed >= 12 * 10
    # with no slice size set, one transaction takes them all
    tq.ctx.clock.advance(10)
    with ticks_seen(pg) as seen:
        assert cron_tick.run(tq.ctx, budget_seconds=60).schedules == 12
        assert seen() == [12]


def test_a_transaction_holds_at_most_fifty_schedules_savepoints(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """Each schedule's savepoint that writes takes a subtransaction id, and PostgreSQL caches
    64 a transaction: a slice of 120 is written by transactions of 50, 50 and 20."""
    assert cron_tick.SCHEDULES_PER_TRANSACTION == 50
    for i in range(120):
        tq.put_schedule(f"m{i:03}", {"queue": "q", "payload": i, "every_seconds": 60})
    tq.ctx.clock.advance(120)
    with ticks_seen(pg) as seen:
        summary = cron_tick.run(tq.ctx, budget_seconds=120, slice_size=200)
        assert (summary.schedules, summary.failed) == (120, [])
        assert seen() == [50, 50, 20]


def test_a_broken_schedule_in_a_slice_is_rolled_back_alone(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """The slice's other schedules are installed and committed together; the broken one's
    writes are undone (its savepoint), it is listed failed, and it is installed at the next
    tick once mended."""
    schedules_with_work(tq)
    before = installed(pg)
    tasks_before = task_count(pg)
    with ticks_seen(pg) as seen, occurrences_of_refused(pg, "s2"):
        summary = cron_tick.run(tq.ctx, budget_seconds=60)
        assert (summary.schedules, summary.failed) == (3, ["s2"])
        assert seen() == [2]  # s1 and s3, in one transaction
    after = installed(pg)
    assert after["s2"] == before["s2"]
    assert after["s1"] > before["s1"] and after["s3"] > before["s3"]
    added = after["s1"] - before["s1"] + after["s3"] - before["s3"]
    assert task_count(pg) == tasks_before + added  # none of s2's tasks stayed
    again = cron_tick.run(tq.ctx, budget_seconds=60)
    assert again.failed == [] and installed(pg)["s2"] > before["s2"]


def test_a_schedule_another_holds_is_left_to_it_and_the_slice_goes_on(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """A PUT (or another tick) holds s2's lock: the pass counts it busy, installs s1 and s3
    without waiting, and the next pass installs s2."""
    schedules_with_work(tq)
    before = installed(pg)
    with pg.transaction():
        pg.execute("SELECT pg_advisory_xact_lock(hashtextextended('tierq-schedule|_|s2', 11))")
        summary = cron_tick.run(tq.ctx, budget_seconds=60)
    assert (summary.schedules, summary.busy, summary.failed) == (3, 1, [])
    after = installed(pg)
    assert after["s2"] == before["s2"]
    assert after["s1"] > before["s1"] and after["s3"] > before["s3"]
    assert cron_tick.run(tq.ctx, budget_seconds=60).busy == 0
    assert installed(pg)["s2"] > before["s2"]


def test_a_schedule_whose_queues_registry_row_is_held_is_listed_failed_and_the_others_go_on(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """Registering s1's queue (a process that has not registered it lately) meets its
    registry row held past the pass's lock timeout: s1 and s4 (same queue) alone wait for
    the next tick, s2 and s3 are installed. Before, the lock timeout ended the pass as if
    PostgreSQL were down, and the next pass started with s1 again."""
    for name, queue in (("s1", "a"), ("s2", "b"), ("s3", "b"), ("s4", "a")):
        tq.put_schedule(name, {"queue": queue, "payload": name, "every_seconds": 1})
    tq.ctx.clock.advance(10)
    before = installed(pg)
    tq.ctx.pairs.forget_local([("a", "_")])  # as a process new to the pair
    with pg.transaction():
        pg.execute("SELECT 1 FROM tierq_queue_tenants WHERE queue = 'a' FOR UPDATE")
        summary = cron_tick.run(tq.ctx, budget_seconds=60, lock_timeout_ms=200)
    assert (summary.schedules, summary.failed) == (4, ["s1", "s4"])
    after = installed(pg)
    assert (after["s1"], after["s4"]) == (before["s1"], before["s4"])
    assert after["s2"] > before["s2"] and after["s3"] > before["s3"]
    again = cron_tick.run(tq.ctx, budget_seconds=60)
    assert again.failed == [] and installed(pg)["s1"] > before["s1"]


def test_registry_rows_held_for_many_pairs_end_the_pass_at_its_budget(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """Each schedule's queue registry row held (a table-wide lock: a migration, a VACUUM
    FULL): every registration waits its lock timeout, so the pass stops at its budget
    rather than waiting once per pair (8 pairs here, 0.3 s each: 2.4 s without the check,
    with 2,000 schedules a pass and the 2 s default an hour), and the next pass, the rows
    free again, ticks them all."""
    queues = [f"q{i}" for i in range(8)]
    for i, queue in enumerate(queues):
        tq.put_schedule(f"s{i}", {"queue": queue, "payload": i, "every_seconds": 1})
    tq.ctx.clock.advance(10)
    before = installed(pg)
    tq.ctx.pairs.forget_local([(queue, "_") for queue in queues])  # as a new process
    with pg.transaction():
        pg.execute("SELECT 1 FROM tierq_queue_tenants FOR UPDATE")
        summary = cron_tick.run(tq.ctx, budget_seconds=0.05, lock_timeout_ms=300,
                                slice_size=4)
    assert summary.schedules == len(summary.failed) == 1  # one wait, then the budget
    again = cron_tick.run(tq.ctx, budget_seconds=60)
    assert again.failed == [] and all(installed(pg)[f"s{i}"] > before[f"s{i}"]
                                      for i in range(8))


def test_registrations_count_against_the_budget_and_the_first_schedule_is_ticked(
        tq: Tierq, monkeypatch: pytest.MonkeyPatch) -> None:
    """Registering each schedule's pair may wait on a store (a Valkey master that times
    out): the registrations stop at the pass's budget, and the first schedule registered
    is still ticked, so a pass makes progress."""
    for i in range(8):
        tq.put_schedule(f"r{i}", {"queue": f"rq{i}", "payload": i, "every_seconds": 1})
    tq.ctx.clock.advance(10)
    tq.ctx.pairs.forget_local([(f"rq{i}", "_") for i in range(8)])  # new to this process
    registered: list[str | None] = []
    real = schedules.prepare_tick

    def slow(ctx: Any, queue: str | None, *args: Any, **kwargs: Any) -> None:
        registered.append(queue)
        time.sleep(0.1)  # (a store that answers slowly)
        real(ctx, queue, *args, **kwargs)

    monkeypatch.setattr(schedules, "prepare_tick", slow)
    summary = cron_tick.run(tq.ctx, budget_seconds=0.15)
    assert (summary.schedules, summary.failed) == (1, [])
    assert summary.installed >= 10
    assert len(registered) <= 3, registered
