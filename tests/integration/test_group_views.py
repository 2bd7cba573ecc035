"""Groups where people look, on the real stores: held tasks counted with the other states
(a queue's view, a tenant's, the detailed metrics), each pair's groups with work and its
oldest group head's age (from tierq_groups), and a task's group in the running leases and
the dead letters (logic/queues.py, logic/groups.py)."""

from __future__ import annotations

from typing import Any

from tierq.logic.context import OffsetClock


def _pair(tq: Any, queue: str, tenant: str) -> Any:
    [row] = [r for r in tq.detailed_counts() if (r.queue, r.tenant) == (queue, tenant)]
    return row


def test_held_tasks_and_groups_are_counted_and_the_oldest_head_ages(make_tq: Any) -> None:
    clock = OffsetClock()
    tq = make_tq(clock=clock)
    tq.enqueue("q", [{"payload": i, "group": "a"} for i in range(3)]
               + [{"payload": i, "group": "b"} for i in range(2)] + [{"payload": "free"}])
    tq.enqueue("q", [{"payload": "other", "group": "a", "tenant": "acme"}])
    assert tq.get_queue("q").counts.model_dump() == {
        "warm": 4, "waiting": 0, "held": 3, "cold": 0, "delayed": 0, "leased": 0, "dead": 0}
    assert tq.tenant_queue("q", "_").counts.model_dump() == {
        "warm": 3, "waiting": 0, "held": 3, "cold": 0, "delayed": 0, "leased": 0, "dead": 0}
    assert tq.tenant_queue("q", "acme").counts.held == 0
    clock.advance(30)
    row = _pair(tq, "q", "_")
    assert (row.held, row.groups, row.warm) == (3, 2, 3)
    assert row.oldest_group_head_age_seconds is not None
    assert 30 <= row.oldest_group_head_age_seconds < 60
    assert row.oldest_group_head_at == _pair(tq, "q", "_").oldest_group_head_at
    assert (_pair(tq, "q", "acme").groups, _pair(tq, "q", "acme").held) == (1, 0)
    # a's head finishes: a's next becomes its head, b's head stays the oldest
    heads = {t.group: t for t in tq.claim("q", max=10, tenant="_")}
    assert set(heads) == {"a", "b", None}
    tq.ack("q", [heads["a"]])
    row = _pair(tq, "q", "_")
    assert (row.held, row.groups) == (2, 2)
    assert row.oldest_group_head_age_seconds is not None
    assert row.oldest_group_head_age_seconds >= 30
    # b's head finishes too: every group's head is a fresh one
    tq.ack("q", [heads["b"]])
    row = _pair(tq, "q", "_")
    assert (row.held, row.groups) == (1, 2)
    assert row.oldest_group_head_age_seconds is not None
    assert row.oldest_group_head_age_seconds < 10
    # everything finished: no group, no head
    while got := tq.claim("q", max=10):
        tq.ack("q", got)
    row = _pair(tq, "q", "_")
    assert (row.held, row.groups, row.oldest_group_head_at,
            row.oldest_group_head_age_seconds) == (0, 0, None, None)
    assert tq.get_queue("q").counts.held == 0


def test_a_tasks_group_shows_in_running_leases_and_dead_letters(make_tq: Any) -> None:
    tq = make_tq(max_attempts=1)
    tq.enqueue("q", [{"payload": 1, "group": "g"}, {"payload": 2, "group": "g"},
                     {"payload": "free"}])
    claimed = tq.claim("q", max=10)
    assert sorted(str(t.payload) for t in claimed) == ["1", "free"]
    running = {str(r.id): r.group for r in tq.running("q")}
    assert running == {str(t.id): t.group for t in claimed}
    assert set(running.values()) == {"g", None}
    tq.nack("q", [{"id": t.id, "lease_token": t.lease_token, "dead": True} for t in claimed])
    dead = {str(t.payload): t.group for t in tq.dlq_list("q")}
    assert dead == {"1": "g", "free": None}
    [next_one] = tq.claim("q", max=10)  # the dead head left its group: the next goes on
    assert (next_one.payload, next_one.group) == (2, "g")
    assert [r.group for r in tq.running("q")] == ["g"]
