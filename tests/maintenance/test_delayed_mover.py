"""The delayed mover: due rows become ready in batches, as many batches as its config and
its pass's budget allow (the rest in the next pass); its config is validated with the bad
variable named; its pass gives up a lock wait at its own lock timeout."""

from __future__ import annotations

import re
import secrets
from typing import Any

import psycopg
import pytest

from tests.maintenance.helpers import TINY_BUDGET, cursor_of, lock_wait_given_up
from tierq.config import Settings
from tierq.engine import Tierq
from tierq.maintenance import delayed_mover
from tierq.maintenance.registry import JobConfigError


def due_tasks(tq: Tierq, queue: str, n: int) -> None:
    """``n`` delayed tasks of ``queue``, due now."""
    tq.enqueue(queue, [{"payload": i, "delay_seconds": 5} for i in range(n)])
    tq.ctx.clock.advance(6)


def test_due_rows_move_one_batch_per_pass_once_the_budget_is_spent(tq: Tierq) -> None:
    due_tasks(tq, "q", 5)
    first = delayed_mover.run(tq.ctx, batch=2, budget_seconds=TINY_BUDGET)
    assert (first.moved, first.batches, first.warm) == (2, 1, 2)
    second = delayed_mover.run(tq.ctx, batch=2, budget_seconds=TINY_BUDGET)
    assert (second.moved, second.batches) == (2, 1)
    rest = delayed_mover.run(tq.ctx, batch=2, budget_seconds=60)
    assert (rest.moved, rest.batches) == (1, 1)
    assert len(tq.claim("q", max=10)) == 5


def test_a_pass_with_budget_left_stops_at_max_batches(tq: Tierq) -> None:
    due_tasks(tq, "q", 7)
    capped = delayed_mover.run(tq.ctx, batch=2, max_batches=2, budget_seconds=60)
    assert (capped.moved, capped.batches) == (4, 2)
    rest = delayed_mover.run(tq.ctx, batch=2, budget_seconds=60)
    assert (rest.moved, rest.batches) == (3, 2)
    assert delayed_mover.run(tq.ctx).moved == 0


def test_config_defaults_and_the_shared_budget() -> None:
    config = delayed_mover.JOB.configure(Settings(maintenance_budget_seconds=1.25), environ={})
    assert (config.batch, config.max_batches, config.budget_seconds) == (1000, 50, 1.25)
    assert (config.batch_bytes, config.pairs) == (32 * 1024 * 1024, 100)
    assert (config.statement_timeout_ms, config.lock_timeout_ms) == (10_000, 2_000)
    assert delayed_mover.JOB.schedule_env == "TIERQ_DELAYED_EVERY"


@pytest.mark.parametrize(("variable", "value"), [
    ("TIERQ_DELAYED_MOVER_BATCH", "0"),
    ("TIERQ_DELAYED_MOVER_BATCH", "10001"),
    ("TIERQ_DELAYED_MOVER_MAX_BATCHES", "1.5"),
    ("TIERQ_DELAYED_MOVER_BATCH_BYTES", "1000"),
    ("TIERQ_DELAYED_MOVER_PAIRS", "0"),
    ("TIERQ_DELAYED_MOVER_BUDGET_SECONDS", "-1"),
    ("TIERQ_DELAYED_MOVER_STATEMENT_TIMEOUT_MS", "-1"),  # (0: the pool's alone)
])
def test_a_bad_value_is_refused_with_its_variable_named(variable: str, value: str) -> None:
    with pytest.raises(JobConfigError, match=re.escape(f"{variable}='{value}'")):
        delayed_mover.JOB.configure(Settings(), environ={variable: value})


def test_the_engine_runs_it_with_the_environments_config(
        make_tq: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_DELAYED_MOVER_BATCH", "2")
    monkeypatch.setenv("TIERQ_DELAYED_MOVER_MAX_BATCHES", "1")
    tq = make_tq()
    due_tasks(tq, "q", 3)
    assert tq.run_delayed_mover().moved == 2
    assert tq.run_job("delayed_mover").summary().moved == 1


def test_a_pass_gives_up_a_lock_wait_at_its_lock_timeout(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    due_tasks(tq, "q", 1)
    waited = lock_wait_given_up(pg, "tierq_tasks",
                                lambda: delayed_mover.run(tq.ctx, lock_timeout_ms=200))
    assert 0.15 < waited < 2.0  # the pool's lock timeout is 5 s
    assert delayed_mover.run(tq.ctx).moved == 1  # nothing was lost: the next pass moves it


def test_waits_that_fail_to_expire_never_hold_back_the_delayed_tasks(
        tq: Tierq, monkeypatch: pytest.MonkeyPatch) -> None:
    """One tenant's wait graph that cannot be expired now (a lock held past the timeout)
    is logged and left for the next pass; every tenant's due tasks still move."""
    from tierq.errors import DatabaseTimedOut
    from tierq.logic import flows

    def locked(*_: Any, **__: Any) -> int:
        raise DatabaseTimedOut()

    due_tasks(tq, "q", 3)
    monkeypatch.setattr(flows, "expire", locked)
    summary = delayed_mover.run(tq.ctx, batch=10, budget_seconds=60)
    assert summary.moved == 3 and summary.waited_too_long == 0
    assert len(tq.claim("q", max=10)) == 3


def test_a_batch_reads_back_at_most_its_bytes_and_the_rest_moves_after_it(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """Due rows are read back whole (payloads, parents) and held until their push, so a
    batch stops at ``batch_bytes``: a thousand payloads of 256 KiB due at once would
    otherwise be one batch of about 500 MB of the mover's memory, past its function's,
    and the same oldest rows would come first in every pass. The rows past it stay
    delayed, in place, and move in the next batches."""
    big = secrets.token_urlsafe(75 * 1024)  # 100 KiB that do not compress: stored as is
    tq.enqueue("q", [{"payload": {"b": big, "i": i}, "delay_seconds": 5} for i in range(9)])
    tq.ctx.clock.advance(6)
    first = delayed_mover.run(tq.ctx, batch_bytes=256 * 1024, budget_seconds=TINY_BUDGET)
    assert (first.moved, first.batches) == (2, 1)
    row = pg.execute("SELECT count(*) FROM tierq_tasks WHERE state = 'delayed'").fetchone()
    assert row is not None and row[0] == 7
    rest = delayed_mover.run(tq.ctx, batch_bytes=256 * 1024, budget_seconds=60)
    assert (rest.moved, rest.batches) == (7, 4)
    moved = [t.payload["i"] for t in tq.claim("q", max=10)]
    assert moved == list(range(9))  # in their order
    # one row over the bytes still moves: a batch takes at least one
    tq.enqueue("q", [{"payload": {"b": big}, "delay_seconds": 5}])
    tq.ctx.clock.advance(6)
    assert delayed_mover.run(tq.ctx, batch_bytes=64 * 1024).moved == 1


def test_a_pair_whose_keys_hold_the_wrong_type_keeps_its_rows_and_the_others_move(
        make_tq: Any, valkey: Any, pg: psycopg.Connection[Any]) -> None:
    """An error reply to one pair's admission leaves that pair's due rows delayed, in
    place (the batch would otherwise fail whole, pass after pass)."""
    tq = make_tq()
    tq.enqueue("a", [{"payload": 1, "delay_seconds": 5}])
    tq.enqueue("b", [{"payload": 2, "delay_seconds": 5}])
    tq.ctx.clock.advance(6)
    valkey.delete("tq:{a|_}:meta")
    valkey.set("tq:{a|_}:meta", "not a hash")
    fresh = make_tq()  # no mode remembered: each pair's admission asks Valkey
    fresh.ctx.clock.advance(6)
    summary = delayed_mover.run(fresh.ctx, budget_seconds=60)
    assert (summary.moved, summary.failed) == (1, ["a|_"])
    rows = pg.execute("SELECT queue, state FROM tierq_tasks ORDER BY queue").fetchall()
    assert rows == [("a", "delayed"), ("b", "warm")]


def test_a_queue_whose_stored_settings_are_refused_is_passed_over_and_the_others_moved(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """A queue's settings row holding a value the table allows but the settings model
    refuses (max_attempts 5000, written by hand) costs that queue alone, pass after pass:
    its due rows stay delayed and are listed; another queue's, due later, are moved."""
    tq.put_queue("a", {"max_attempts": 5})
    due_tasks(tq, "a", 3)  # the oldest due: every batch meets them first
    due_tasks(tq, "b", 2)
    pg.execute("UPDATE tierq_queues SET max_attempts = 5000 WHERE queue = 'a'")
    for _ in range(2):
        summary = delayed_mover.run(tq.ctx, batch=2)
        assert summary.failed == ["a|_"]
    states = dict(pg.execute("SELECT queue, array_agg(DISTINCT state) FROM tierq_tasks"
                             " GROUP BY queue").fetchall())
    assert states == {"a": ["delayed"], "b": ["warm"]}


def test_a_pass_reads_the_settings_on_its_own_connection(make_tq: Any) -> None:
    """The settings are read inside the batch's transaction on its connection: a pool of
    one connection (a miss of the settings cache each time) moves the rows, where a
    second pooled connection would wait out the pool's timeout."""
    tq = make_tq(db_pool_max=1, db_pool_timeout=1.0)
    tq.put_queue("a", {"max_attempts": 5})
    due_tasks(tq, "a", 3)
    summary = delayed_mover.run(tq.ctx)
    assert (summary.moved, summary.failed) == (3, [])


# -- fair across pairs: one pair's due rows never hold back another's ------------------------

def _delayed(pg: psycopg.Connection[Any], queue: str, tenant: str = "_") -> int:
    row = pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = %s AND tenant = %s"
                     " AND state = 'delayed'", (queue, tenant)).fetchone()
    assert row is not None
    return int(row[0])


def test_one_batch_moves_another_tenants_row_due_after_a_whole_backlog(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """200 rows of tenant a due at T, one of tenant b due 1 ms after all of them, batches
    of 10: the first batch moves b's row beside 9 of a's (oldest due first across every
    pair would move a's 200 first: b's row in the 21st batch); a's keep their order."""
    tq.enqueue("q", [{"payload": i, "delay_seconds": 5} for i in range(200)], tenant="a")
    tq.ctx.clock.advance(0.001)
    tq.enqueue("q", [{"payload": "b", "delay_seconds": 5}], tenant="b")
    tq.ctx.clock.advance(6)
    first = delayed_mover.run(tq.ctx, batch=10, max_batches=1, budget_seconds=60)
    assert (first.moved, first.batches) == (10, 1)
    assert (_delayed(pg, "q", "a"), _delayed(pg, "q", "b")) == (191, 0)
    assert [t.payload for t in tq.claim("q", tenant="b", max=5)] == ["b"]
    rest = delayed_mover.run(tq.ctx, batch=50, budget_seconds=60)
    assert (rest.moved, rest.batches) == (191, 4)
    assert [t.payload for t in tq.claim("q", tenant="a", max=200)] == list(range(200))


def test_what_a_pair_cannot_use_goes_to_the_others(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """A batch of 10 among a pair with 1 row due and two with 20: the small pair's row,
    the other nine shared between the two big ones (5 and 4, the odd one to the first in
    turn); the next batch begins after the pair that came last, so the odd row goes
    round. A pair alone takes a whole batch."""
    tq.enqueue("q", [{"payload": 0, "delay_seconds": 5}], tenant="a")
    for tenant in ("b", "c"):
        tq.enqueue("q", [{"payload": i, "delay_seconds": 5} for i in range(20)], tenant=tenant)
    tq.ctx.clock.advance(6)
    delayed_mover.run(tq.ctx, batch=10, max_batches=1, budget_seconds=60)
    assert [_delayed(pg, "q", t) for t in "abc"] == [0, 15, 16]
    delayed_mover.run(tq.ctx, batch=10, max_batches=1, budget_seconds=60)
    assert [_delayed(pg, "q", t) for t in "abc"] == [0, 10, 11]  # b came last: c first
    delayed_mover.run(tq.ctx, batch=10, max_batches=1, budget_seconds=60)
    assert [_delayed(pg, "q", t) for t in "abc"] == [0, 5, 6]
    delayed_mover.run(tq.ctx, batch=10, max_batches=1, budget_seconds=60)
    assert [_delayed(pg, "q", t) for t in "abc"] == [0, 0, 1]
    tq.enqueue("q", [{"payload": i, "delay_seconds": 5} for i in range(20, 40)], tenant="c")
    tq.ctx.clock.advance(6)
    delayed_mover.run(tq.ctx, batch=10, max_batches=1, budget_seconds=60)
    assert [_delayed(pg, "q", t) for t in "abc"] == [0, 0, 11]  # one pair alone fills it
    assert delayed_mover.run(tq.ctx, batch=10, budget_seconds=60).moved == 11
    assert [t.payload for t in tq.claim("q", tenant="b", max=50)] == list(range(20))
    assert [t.payload for t in tq.claim("q", tenant="c", max=50)] == list(range(40))


def test_pairs_past_one_batch_take_turns_across_passes(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """Five pairs with rows due and batches of 2: one row each of the first two in turn,
    and the next pass goes on after them (its cursor is saved), round to the start."""
    tenants = [f"t{i}" for i in range(5)]
    for tenant in tenants:
        tq.enqueue("q", [{"payload": i, "delay_seconds": 5} for i in range(4)], tenant=tenant)
    tq.ctx.clock.advance(6)
    left = []
    for _ in range(4):
        delayed_mover.run(tq.ctx, batch=2, max_batches=1, budget_seconds=60)
        left.append([_delayed(pg, "q", t) for t in tenants])
    assert left == [[3, 3, 4, 4, 4], [3, 3, 3, 3, 4], [2, 3, 3, 3, 3], [2, 2, 2, 3, 3]]
    assert cursor_of(pg, "delayed_mover") == ("q", "t2")
    rest = delayed_mover.run(tq.ctx, batch=2, budget_seconds=60)
    assert rest.moved == 12
    assert delayed_mover.run(tq.ctx, batch=2, budget_seconds=60).moved == 0
    for tenant in tenants:
        assert [t.payload for t in tq.claim("q", tenant=tenant, max=5)] == [0, 1, 2, 3]


def test_past_its_pairs_a_batch_shares_among_the_next_ones_in_turn(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """Each pair a batch takes rows of costs it a Valkey round trip, so a batch shares its
    rows among ``pairs`` pairs at once: the next two in turn here, 3 rows each of a batch of
    6; the room they leave (one row each due) goes to the next two. The next batch starts
    after the last pair in turn it took rows of."""
    tenants = [f"t{i}" for i in range(5)]
    for tenant, n in zip(tenants, (1, 1, 5, 5, 5), strict=True):
        tq.enqueue("q", [{"payload": i, "delay_seconds": 5} for i in range(n)], tenant=tenant)
    tq.ctx.clock.advance(6)
    left = []
    for _ in range(3):
        delayed_mover.run(tq.ctx, batch=6, pairs=2, max_batches=1, budget_seconds=60)
        left.append([_delayed(pg, "q", t) for t in tenants])
    assert left == [[0, 0, 3, 3, 5], [0, 0, 0, 3, 2], [0, 0, 0, 0, 0]]
    for tenant, n in zip(tenants, (1, 1, 5, 5, 5), strict=True):
        assert [t.payload for t in tq.claim("q", tenant=tenant, max=9)] == list(range(n))


def test_under_the_byte_bound_the_first_place_goes_round(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """Six rows of 100 KiB of tenant a due before one of tenant b, 64 KiB a batch (one row
    each) and one batch a pass: b's row moves in the second pass, not after all of a's."""
    big = secrets.token_urlsafe(75 * 1024)  # 100 KiB that do not compress
    tq.enqueue("q", [{"payload": {"b": big, "i": i}, "delay_seconds": 5} for i in range(6)],
               tenant="a")
    tq.ctx.clock.advance(1)
    tq.enqueue("q", [{"payload": {"b": big, "i": 0}, "delay_seconds": 5}], tenant="b")
    tq.ctx.clock.advance(6)
    for expected in ([5, 1], [5, 0], [4, 0]):
        summary = delayed_mover.run(tq.ctx, batch_bytes=64 * 1024, max_batches=1,
                                    budget_seconds=60)
        assert summary.moved == 1
        assert [_delayed(pg, "q", t) for t in "ab"] == expected


def test_rows_not_due_yet_are_left_and_hold_back_nothing(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    tq.enqueue("q", [{"payload": i, "delay_seconds": 600} for i in range(5)], tenant="later")
    tq.enqueue("q", [{"payload": i, "delay_seconds": 5} for i in range(3)], tenant="now")
    tq.enqueue("q", [{"payload": i, "delay_seconds": 5 + 600 * i} for i in range(2)],
               tenant="both")
    tq.ctx.clock.advance(6)
    summary = delayed_mover.run(tq.ctx, batch=2, budget_seconds=60)
    assert (summary.moved, summary.batches) == (4, 2)
    assert [_delayed(pg, "q", t) for t in ("later", "now", "both")] == [5, 0, 1]


def test_a_pair_that_comes_due_during_a_pass_gets_its_share_of_the_next_batch(
        tq: Tierq, pg: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass looks at every row due once, then each batch at the rows come due since:
    a pair whose first row comes due after the first batch is in the second."""
    tq.enqueue("q", [{"payload": i, "delay_seconds": 5} for i in range(30)], tenant="a")
    tq.enqueue("q", [{"payload": "b", "delay_seconds": 8}], tenant="b")
    tq.ctx.clock.advance(6)
    lock = tq.ctx.store.lock_due_of_pairs
    asked: list[list[str]] = []

    def counting(conn: Any, now: Any, shares: Any) -> Any:
        asked.append([tenant for (_, tenant), _, _ in shares])
        rows = lock(conn, now, shares)
        if len(asked) == 1:
            tq.ctx.clock.advance(3)  # b's row comes due
        return rows

    monkeypatch.setattr(tq.ctx.store, "lock_due_of_pairs", counting)
    summary = delayed_mover.run(tq.ctx, batch=10, max_batches=2, budget_seconds=60)
    # (a came last in the first batch: b's turn comes first; b has one row, a takes the
    # rest of the room in a second round)
    assert asked == [["a"], ["b", "a"], ["a"]]
    assert (summary.moved, _delayed(pg, "q", "b")) == (20, 0)


def test_a_failed_pairs_backlog_is_not_read_again_and_the_others_move(
        make_tq: Any, valkey: Any, pg: psycopg.Connection[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Pair a (its keys of the wrong type: its admission fails) has 50 rows due before
    pair b's 3: a's first row is its share of the first batch, then the pass reads none of
    a's rows again (the later batches are b's alone), and b's rows all move; a's stay
    delayed, in place."""
    tq = make_tq()
    tq.enqueue("a", [{"payload": i, "delay_seconds": 5} for i in range(50)])
    tq.ctx.clock.advance(1)
    tq.enqueue("b", [{"payload": i, "delay_seconds": 5} for i in range(3)])
    valkey.delete("tq:{a|_}:meta")
    valkey.set("tq:{a|_}:meta", "not a hash")
    fresh = make_tq()  # no mode remembered: each pair's admission asks Valkey
    fresh.ctx.clock.advance(7)
    first = delayed_mover.run(fresh.ctx, batch=2, max_batches=1, budget_seconds=60)
    assert (first.moved, first.failed) == (1, ["a|_"])  # b's row beside a's
    lock = fresh.ctx.store.lock_due_of_pairs
    read: list[str] = []

    def reading(conn: Any, now: Any, shares: Any) -> Any:
        rows = lock(conn, now, shares)
        read.extend(r.queue for r in rows)
        return rows

    monkeypatch.setattr(fresh.ctx.store, "lock_due_of_pairs", reading)
    summary = delayed_mover.run(fresh.ctx, batch=2, budget_seconds=60)
    assert (summary.moved, summary.failed) == (2, ["a|_"])
    assert read == ["a", "b", "b"]  # (b came last before: a's turn comes after it)
    assert (_delayed(pg, "a"), _delayed(pg, "b")) == (50, 0)
