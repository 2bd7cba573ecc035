"""The cold -> warm mover visits only pairs with cold work or that it left in cold mode, in
budgeted slices whose cursor carries over; a pair whose cold line drained gets the visit
that returns it to warm mode, and then no more."""

from __future__ import annotations

import re

import pytest

from tests.integration.helpers import mode_of, ready_size
from tests.maintenance.helpers import (
    TINY_BUDGET,
    cursor_of,
    lock_wait_given_up,
    seed_idle_pairs,
)
from tierq.config import Settings
from tierq.maintenance import cold_to_warm
from tierq.maintenance.registry import JobConfigError


def cold_work(tq, queue: str, *, tasks: int = 8) -> None:
    """A pair in cold mode with ``tasks - 4`` cold tasks: warm_max 4 at the enqueue, then
    raised to 100, so the mover has room (a claim would refill inline)."""
    tq.put_queue(queue, {"warm_max": 4})
    tq.enqueue(queue, [{"payload": i} for i in range(tasks)])
    tq.put_queue(queue, {"warm_max": 100})


def marked(pg) -> list[str]:
    return [r[0] for r in pg.execute("SELECT queue FROM tierq_queue_tenants"
                                     " WHERE cold_mode_since IS NOT NULL ORDER BY queue")]


def test_idle_pairs_are_not_visited_and_cold_work_is_promoted(make_tq, pg):
    tq = make_tq()
    seed_idle_pairs(pg, 300)
    tq.enqueue("warm-only", [{"payload": 1}])
    cold_work(tq, "busy")
    summary = cold_to_warm.run(tq.ctx)
    assert summary.pairs == 1 and summary.promoted == 4 and summary.completed
    assert summary.returned_to_warm == ["busy|_"]
    assert cold_to_warm.run(tq.ctx).pairs == 0


def test_a_drained_cold_line_gets_the_visit_that_returns_the_pair_to_warm(make_tq, valkey, pg):
    tq = make_tq()
    tq.put_queue("q", {"warm_max": 10})
    tq.enqueue("q", [{"payload": i} for i in range(12)])  # 10 warm, 2 cold: cold mode
    tq.ack("q", tq.claim("q", max=3))  # 7 warm: room for 2 (90%)
    first = cold_to_warm.run(tq.ctx)
    assert (first.pairs, first.promoted) == (1, 2)
    # no cold row is left, but the warm set (9) is above 80%: still cold, and recorded
    assert ready_size(valkey, "q") == 9 and mode_of(valkey, "q") == "cold"
    assert marked(pg) == ["q"]
    second = cold_to_warm.run(tq.ctx)
    assert (second.pairs, second.promoted, second.returned_to_warm) == (1, 0, [])
    tq.ack("q", tq.claim("q", max=2))  # 7 warm: at or below 80%
    third = cold_to_warm.run(tq.ctx)
    assert third.pairs == 1 and third.returned_to_warm == ["q|_"]
    assert mode_of(valkey, "q") == "warm" and marked(pg) == []
    assert cold_to_warm.run(tq.ctx).pairs == 0


def test_a_tiny_budget_visits_one_pair_per_pass_and_the_cursor_goes_round(make_tq, pg):
    tq = make_tq(maintenance_budget_seconds=TINY_BUDGET)  # TIERQ_MAINTENANCE_BUDGET_SECONDS
    seed_idle_pairs(pg, 50)
    queues = ["c0", "c1", "c2", "c3"]
    for queue in queues:
        cold_work(tq, queue, tasks=20)
    for queue in queues:
        summary = tq.run_cold_to_warm()
        assert (summary.pairs, summary.slices, summary.promoted) == (1, 1, 16)
        assert cursor_of(pg, cold_to_warm.WALK) == (queue, "_")
    # c0 gets cold work again: the next pass goes round to it
    tq.put_queue("c0", {"warm_max": 4})
    tq.enqueue("c0", [{"payload": "late"}])
    summary = tq.run_cold_to_warm()
    assert summary.pairs == 1 and cursor_of(pg, cold_to_warm.WALK) == ("c0", "_")


def test_small_slices_cover_every_pair_in_one_pass(make_tq, pg):
    tq = make_tq()
    for queue in ("a", "b", "c", "d", "e"):
        cold_work(tq, queue)
    summary = cold_to_warm.run(tq.ctx, slice_size=2, budget_seconds=60)
    assert (summary.pairs, summary.slices, summary.promoted) == (5, 3, 20)
    assert summary.completed


def test_config_follows_the_shared_settings_unless_its_own_variable_is_set() -> None:
    shared = Settings(maintenance_budget_seconds=1.5, maintenance_slice=40)
    config = cold_to_warm.JOB.configure(shared, environ={})
    assert (config.budget_seconds, config.slice_size) == (1.5, 40)
    own = cold_to_warm.JOB.configure(shared, environ={"TIERQ_COLD_TO_WARM_SLICE_SIZE": "7"})
    assert (own.budget_seconds, own.slice_size) == (1.5, 7)
    assert cold_to_warm.JOB.schedule_env == "TIERQ_COLD_TO_WARM_EVERY"


@pytest.mark.parametrize(("variable", "value"), [
    ("TIERQ_COLD_TO_WARM_SLICE_SIZE", "0"),
    ("TIERQ_COLD_TO_WARM_BUDGET_SECONDS", "nan"),
    ("TIERQ_COLD_TO_WARM_LOCK_TIMEOUT_MS", "soon"),
])
def test_a_bad_value_is_refused_with_its_variable_named(variable: str, value: str) -> None:
    with pytest.raises(JobConfigError, match=re.escape(f"{variable}='{value}'")):
        cold_to_warm.JOB.configure(Settings(), environ={variable: value})


def test_a_pass_gives_up_a_lock_wait_at_its_lock_timeout(make_tq, pg) -> None:
    tq = make_tq()
    cold_work(tq, "q")
    waited = lock_wait_given_up(pg, "tierq_tasks",
                                lambda: cold_to_warm.run(tq.ctx, lock_timeout_ms=200))
    assert 0.15 < waited < 2.0  # the pool's lock timeout is 5 s
    assert cold_to_warm.run(tq.ctx).promoted == 4  # the next pass does the work


def test_a_spent_budget_stops_a_pairs_promotion_between_batches(make_tq, valkey, monkeypatch):
    """A pair of many batches (warm_max rows is 25 batches at the default) promotes one
    batch per pass once the budget is spent, not all of its room: the pass keeps its time."""
    from tierq.logic import tiering

    monkeypatch.setattr(tiering, "PROMOTE_BATCH", 5)
    tq = make_tq(maintenance_budget_seconds=TINY_BUDGET)
    cold_work(tq, "big", tasks=24)  # 4 warm, 20 cold, room for 86
    passes = []
    while (summary := tq.run_cold_to_warm()).promoted:
        passes.append((summary.promoted, summary.busy))
        assert len(passes) <= 4
    assert passes == [(5, 0)] * 4  # one batch a pass, none counted as busy
    assert ready_size(valkey, "big") == 24


def test_a_pair_whose_keys_hold_the_wrong_type_is_listed_failed_and_the_others_promoted(
        make_tq, valkey):
    """An error reply to one pair's script fails that pair alone, pass after pass; the
    pairs after it are still promoted."""
    tq = make_tq()
    cold_work(tq, "a")
    cold_work(tq, "b")
    valkey.delete("tq:{a|_}:ready")
    valkey.set("tq:{a|_}:ready", "not a sorted set")
    summary = cold_to_warm.run(tq.ctx, budget_seconds=60)
    assert summary.failed == ["a|_"] and (summary.pairs, summary.promoted) == (2, 4)
    assert ready_size(valkey, "b") == 8


def test_a_broken_ready_tenant_index_costs_its_queue_alone(make_tq, valkey, pg):
    """Queue a's ready-tenant index holding the wrong type: the backstop's entry is refused
    for a alone, listed in ``ready_index_failed``, and the pass goes on: b is promoted,
    entered in its index and recorded in cold mode, and the cursor moves past the slice.
    Before, the error reply ended every pass at the same slice, before the cold-mode
    record and the cursor."""
    tq = make_tq()
    tq.put_queue("a", {"warm_max": 4})
    tq.enqueue("a", [{"payload": i} for i in range(8)])  # cold mode, no room: no push
    tq.put_queue("b", {"warm_max": 10})
    tq.enqueue("b", [{"payload": i} for i in range(12)])  # 10 warm, 2 cold
    tq.ack("b", tq.claim("b", max=3))  # 7 warm: room for 2, then above 80%: stays cold
    valkey.delete("tq:{a}:ready_tenants", "tq:{b}:ready_tenants")
    valkey.set("tq:{a}:ready_tenants", "not a sorted set")
    passes = [cold_to_warm.run(tq.ctx, budget_seconds=60) for _ in range(2)]
    assert [(s.ready_index_failed, s.failed, s.pairs, s.promoted) for s in passes] == [
        (["a"], [], 2, 2), (["a"], [], 2, 0)]
    assert valkey.zscore("tq:{b}:ready_tenants", "_") is not None
    assert marked(pg) == ["a", "b"]
    assert cursor_of(pg, cold_to_warm.WALK) == ("b", "_")


def test_a_pair_whose_registry_row_is_held_is_promoted_and_recorded_next_pass(make_tq, pg):
    """Pair a's registry row held past the pass's lock timeout: its cold-mode record is
    passed over, not waited for (a is listed in ``failed``), and b's is written. Before,
    the record waited for the row and raised, before the walk saved its cursor: every pass
    ended at the same slice and no pair's record changed."""
    tq = make_tq()
    tq.put_queue("a", {"warm_max": 4})
    tq.enqueue("a", [{"payload": i} for i in range(8)])  # cold mode, no room: stays cold
    tq.put_queue("b", {"warm_max": 10})
    tq.enqueue("b", [{"payload": i} for i in range(12)])  # 10 warm, 2 cold
    tq.ack("b", tq.claim("b", max=3))  # room for 2, then above 80%: stays cold
    with pg.transaction():
        pg.execute("SELECT 1 FROM tierq_queue_tenants WHERE queue = 'a' FOR UPDATE")
        summary = cold_to_warm.run(tq.ctx, lock_timeout_ms=200, budget_seconds=60)
        assert (summary.failed, summary.pairs, summary.promoted) == (["a|_"], 2, 2)
        assert cursor_of(pg, cold_to_warm.WALK) == ("b", "_")
        assert marked(pg) == ["b"]
    again = cold_to_warm.run(tq.ctx, lock_timeout_ms=200, budget_seconds=60)
    assert (again.failed, again.pairs, again.promoted) == ([], 2, 0)
    assert marked(pg) == ["a", "b"]


def test_a_queue_whose_stored_settings_are_refused_is_passed_over_and_the_others_promoted(
        make_tq, valkey, pg):
    """A queue's settings row holding a value the table allows but the settings model
    refuses (max_attempts 5000, written by hand) costs that queue alone, pass after pass.
    Before, its pair's refill raised the model's error, before the walk saved its cursor,
    and no pair after it was promoted."""
    tq = make_tq()
    cold_work(tq, "a")
    cold_work(tq, "b")
    pg.execute("UPDATE tierq_queues SET max_attempts = 5000 WHERE queue = 'a'")
    passes = [cold_to_warm.run(tq.ctx, budget_seconds=60) for _ in range(2)]
    assert [(s.failed, s.pairs, s.promoted) for s in passes] == [
        (["a|_"], 2, 4), (["a|_"], 1, 0)]
    assert (ready_size(valkey, "a"), ready_size(valkey, "b")) == (4, 8)
