"""Hold and wait: code that holds a pooled connection (an open transaction, or a session
lock) must run what it needs on that connection, never wait for a second pooled one. With
TIERQ_DB_POOL_MAX=1 (or N threads each holding one) such a wait lasts the pool's timeout
and fails. Each case runs the path under test on an engine whose pool has one connection
(the settings cache is off in tests: every settings read misses); the tasks it works on
are made by an engine with the default pool."""

from __future__ import annotations

from typing import Any

from tierq.engine import Tierq
from tierq.errors import WarmTierUnavailable


def pool_of_one(make_tq: Any, setup: Tierq) -> Tierq:
    """An engine over the same stores and clock as ``setup``, with one pooled connection."""
    return make_tq(clock=setup.ctx.clock, db_pool_max=1, db_pool_timeout=1.0)


def states(pg: Any, queue: str) -> list[str]:
    return [r[0] for r in pg.execute("SELECT state FROM tierq_tasks WHERE queue = %s"
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
