"""A dead letter replayed while the lease of the attempt that dead-lettered it is still in
Valkey (its drop on the way, or left by a Valkey failure after the commit): the replay
ends that lease (logic/dlq.end_leases), so the replayed task is in line at once and no
reaper pass counts the old lease against it."""

from __future__ import annotations

from typing import Any

from tests.integration.one_lease_scenarios import leases_of, ready_of, stalled
from tierq.errors import WarmTierUnavailable


def row_of(pg: Any, task_id: Any) -> tuple[str, int]:
    return pg.execute("SELECT state, attempts FROM tierq_tasks WHERE id = %s",
                      (str(task_id),)).fetchone()


def test_a_replay_while_the_nacks_drop_is_on_its_way_is_in_line_at_once(make_tq, valkey, pg):
    """The nack that dead-lettered the task has committed; its lease drop waits. The replay
    in between puts the task in line (the old lease ended), and the drop that follows
    changes nothing."""
    tq = make_tq()
    [out] = tq.enqueue("q", [{"payload": "once"}])
    [task] = tq.claim("q")
    item = {"id": task.id, "lease_token": task.lease_token, "dead": True, "error": "boom"}
    with stalled(tq.ctx.warm, "release_pairs", lambda: tq.nack("q", [item])):
        assert row_of(pg, out.id) == ("dead", 1)
        assert tq.dlq_replay_slice("q", ids=[out.id]).replayed == [out.id]
        assert leases_of(valkey, "q") == []
        assert ready_of(valkey, "q") == [str(out.id)]
    [again] = tq.claim("q")
    assert (again.id, again.attempt) == (out.id, 1)
    assert tq.ack("q", [again]).acked == [out.id]


def test_a_lease_a_failed_drop_left_does_not_dead_letter_the_replayed_task(make_tq, valkey,
                                                                           pg):
    """The reaper dead-letters an expired lease, and Valkey fails before the lease is
    dropped. The dead letter is replayed: the next pass finds no lease to expire, and the
    task runs with its attempts counted from 0."""
    tq = make_tq(lease_seconds=10, max_attempts=1)
    [out] = tq.enqueue("q", [{"payload": "once"}])
    [task] = tq.claim("q")
    tq.ctx.clock.advance(11)
    real = tq.ctx.warm.release_pairs

    def down(*args: Any, **kwargs: Any) -> Any:
        raise WarmTierUnavailable("the master did not answer")

    tq.ctx.warm.release_pairs = down  # type: ignore[method-assign]
    try:
        assert tq.run_reaper().failed == ["q|_"]
    finally:
        tq.ctx.warm.release_pairs = real  # type: ignore[method-assign]
    assert row_of(pg, out.id) == ("dead", 1)
    assert leases_of(valkey, "q") == [f"{task.id}|{task.lease_token}"]  # (marked)
    assert tq.dlq_replay_slice("q", ids=[out.id]).replayed == [out.id]
    assert leases_of(valkey, "q") == []
    summary = tq.run_reaper()
    assert (summary.expired, summary.dead) == (0, 0)
    assert row_of(pg, out.id) == ("warm", 0)
    [again] = tq.claim("q")
    assert (again.id, again.attempt) == (out.id, 1)
    assert tq.ack("q", [again]).acked == [out.id]
