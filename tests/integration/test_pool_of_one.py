"""Hold and wait: code that holds a pooled connection (an open transaction, or a session
lock) must run what it needs on that connection, never wait for a second pooled one. With
TIERQ_DB_POOL_MAX=1 (or N threads each holding one) such a wait lasts the pool's timeout
and fails. Each case runs the path under test on an engine whose pool has one connection
(the settings cache is off in tests: every settings read misses); the tasks it works on
are made by an engine with the default pool."""

from __future__ import annotations

from typing import Any

from tests.support.every_task import EVERY_TASK
from tierq.dal.store.rows import FeedOffsetRow
from tierq.engine import Tierq
from tierq.errors import WarmTierFull, WarmTierUnavailable
from tierq.logic import feed, wake
from tierq.maintenance import cold_to_warm


def pool_of_one(make_tq: Any, setup: Tierq) -> Tierq:
    """An engine over the same stores and clock as ``setup``, with one pooled connection."""
    return make_tq(clock=setup.ctx.clock, db_pool_max=1, db_pool_timeout=1.0)


def states(pg: Any, queue: str) -> list[str]:
    """The states of the tasks of ``queue`` PostgreSQL holds (a batch row's members too), in
    seq order."""
    return [r[0] for r in pg.execute(f"SELECT state FROM {EVERY_TASK} WHERE queue = %s"
                                     " ORDER BY seq", (queue,))]


def test_an_enqueue_of_grouped_tasks(make_tq: Any, pg: Any) -> None:
    """groups.place reads the group's room in the enqueue's transaction."""
    one = pool_of_one(make_tq, make_tq())
    made = one.enqueue("q", [{"payload": i, "group": "g"} for i in range(2)])
    assert [m.state for m in made] == ["warm", "held"]


def test_an_enqueue_whose_grouped_task_meets_a_live_key(make_tq: Any, pg: Any) -> None:
    """A grouped task not created (its key is live) releases its group in the enqueue's
    transaction (groups.count_placed, groups.release)."""
    setup = make_tq()
    [first] = setup.enqueue("q", [{"payload": 0, "group": "g", "key": "k"}])
    one = pool_of_one(make_tq, setup)
    [again] = one.enqueue("q", [{"payload": 1, "group": "g", "key": "k"}])
    assert (again.id, again.outcome) == (first.id, "ignored")


def test_a_replay_of_a_grouped_dead_letter(make_tq: Any, pg: Any) -> None:
    """groups.on_replay reads the group's room in the replay's transaction."""
    setup = make_tq(max_attempts=1)
    [made] = setup.enqueue("q", [{"payload": 0, "group": "g"}])
    [task] = setup.claim("q")
    setup.nack("q", [{"id": task.id, "lease_token": task.lease_token, "error": "boom"}])
    one = pool_of_one(make_tq, setup)
    assert one.dlq_replay_slice("q", ids=[made.id]).replayed == [made.id]
    assert states(pg, "q") == ["warm"]


def test_a_replay_of_a_dead_letter_whose_lease_is_left(make_tq: Any, pg: Any) -> None:
    """A dead letter whose lease Valkey still holds (its drop failed after the reaper's
    commit): the replay ends it in its transaction (dlq.end_leases), and gives back its
    reservation, which reads the queue's settings."""
    setup = make_tq(lease_seconds=10, max_attempts=1)
    [made] = setup.enqueue("q", [{"payload": 0}])
    setup.claim("q")
    setup.ctx.clock.advance(11)

    def down(*args: Any, **kwargs: Any) -> Any:
        raise WarmTierUnavailable("the master did not answer")

    setup.ctx.warm.release_pairs = down  # type: ignore[method-assign]
    assert setup.run_reaper().failed == ["q|_"]
    one = pool_of_one(make_tq, setup)
    assert one.dlq_replay_slice("q", ids=[made.id]).replayed == [made.id]
    assert states(pg, "q") == ["warm"]


def cold_work(make_tq: Any) -> Tierq:
    """4 warm and 4 cold tasks of queue 'q', room for them all (warm_max 4 at the
    enqueue, then 100), made by an engine with the default pool; the engine of one
    connection."""
    setup = make_tq()
    setup.put_queue("q", {"warm_max": 4})
    setup.enqueue("q", [{"payload": i} for i in range(8)])
    setup.put_queue("q", {"warm_max": 100})
    return pool_of_one(make_tq, setup)


def test_the_cold_to_warm_mover_promotes(make_tq: Any, pg: Any) -> None:
    """The promotion holds its connection (the pair's lock) while it pushes each batch:
    the push reads the queue's settings (tiering._promote, admission.dispatch)."""
    one = cold_work(make_tq)
    summary = cold_to_warm.run(one.ctx)
    assert (summary.promoted, summary.failed) == (4, [])
    assert states(pg, "q") == ["warm"] * 8


def test_a_claims_inline_refill(make_tq: Any, pg: Any) -> None:
    """A claim that finds the warm set dry refills it inline (tiering._promote)."""
    one = cold_work(make_tq)
    got = one.claim("q", max=8)
    assert sorted(t.payload for t in got) == list(range(8))


def test_an_enqueues_first_refill_of_a_pair(make_tq: Any, pg: Any) -> None:
    """An engine that meets a pair for the first time registers it and refills it
    (tiering.refill: the cold line promoted first), then writes the new tasks after them."""
    one = cold_work(make_tq)
    one.enqueue("q", [{"payload": 8}])
    assert states(pg, "q") == ["warm"] * 9


def test_a_promotion_valkey_refuses_marks_its_rows_cold(make_tq: Any, pg: Any) -> None:
    """Valkey out of memory refuses the promotion's push: its rows are marked cold again
    (admission.dispatch's mark_cold) while the promotion holds the pair's lock."""
    one = cold_work(make_tq)

    def full(*args: Any, **kwargs: Any) -> Any:
        raise WarmTierFull()

    one.ctx.warm.push = full  # type: ignore[method-assign]
    summary = cold_to_warm.run(one.ctx)
    assert (summary.promoted, summary.failed) == (0, [])
    assert sorted(states(pg, "q")) == ["cold"] * 4 + ["warm"] * 4


def test_a_promotion_asks_the_waker_on_the_held_connection(make_tq: Any, pg: Any,
                                                          caplog: Any) -> None:
    """With a waker installed (a dispatcher's deployment), a push asks whether the
    queue has a consumer (wake.task_ready): read on the promotion's connection, not
    logged as a failed wake after the pool's timeout."""
    one = cold_work(make_tq)
    previous = wake.install(lambda: None)
    try:
        summary = cold_to_warm.run(one.ctx)
    finally:
        wake.install(previous)
    assert summary.promoted == 4
    assert "waking the dispatcher" not in caplog.text


def test_a_feed_run_under_its_lock(make_tq: Any, pg: Any) -> None:
    """The feed's session lock is held for the whole run (feed.feed_lock) while the run
    takes pooled connections: its offsets, its backlog, an enqueue."""
    one = pool_of_one(make_tq, make_tq())
    with feed.feed_lock(one.ctx, "feed"):
        assert feed.load_offsets(one.ctx, "feed") == []
        one.enqueue("fed", [{"payload": i} for i in range(3)])
        assert feed.backlog(one.ctx, "fed", cap=10).warm == 3
        feed.save_offsets(one.ctx, "feed", [FeedOffsetRow("s", "", 3, "2")])
    assert [o.rows_done for o in feed.load_offsets(one.ctx, "feed")] == [3]
