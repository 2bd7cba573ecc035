"""Release: a worker gives leased tasks back unfinished. They return to their old places in
line, ready at once, without counting an attempt; a release and a lease expiry of one lease
never both happen."""

from __future__ import annotations

import pytest

from tests.integration import release_race_scenarios as races
from tests.integration.helpers import count_state, drain, mode_of
from tierq.logic import batch_rows
from tierq.maintenance import reaper


def test_released_tasks_go_back_to_their_places_without_counting_an_attempt(make_tq, pg):
    tq = make_tq(max_attempts=1)
    tq.enqueue("q", [{"payload": i} for i in range(5)])
    taken = tq.claim("q", max=3)
    assert [t.payload for t in taken] == [0, 1, 2]
    tq.enqueue_one("q", "later")
    result = tq.release("q", taken[1:])  # the claimed tasks themselves, or id + token
    assert sorted(map(str, result.released)) == sorted(str(t.id) for t in taken[1:])
    assert result.rejected == []
    tq.ack("q", taken[:1])
    again = drain(tq, "q", batch=1)
    assert [t.payload for t in again] == [1, 2, 3, 4, "later"]
    assert [t.attempt for t in again[:2]] == [1, 1]  # max_attempts=1 and not dead-lettered
    assert [t.redelivered for t in again[:2]] == [False, False]
    assert count_state(pg, "q", "dead") == 0


def test_a_released_lease_is_gone_and_a_second_release_is_refused(tq):
    tq.enqueue_one("q", "x")
    [task] = tq.claim("q")
    item = {"id": task.id, "lease_token": task.lease_token}
    assert tq.release("q", [item]).released == [task.id]
    for late in (tq.release("q", [item]), tq.ack("q", [item]),
                 tq.nack("q", [{**item, "error": "late"}])):
        assert [(r.id, r.reason) for r in late.rejected] == [(task.id, "not_owner")]
    assert [t.id for t in tq.claim("q")] == [task.id]


def test_a_wrong_token_or_an_expired_lease_is_not_released(make_tq):
    tq = make_tq(lease_seconds=10)
    tq.enqueue("q", [{"payload": i} for i in range(2)])
    first, second = tq.claim("q", max=2)
    wrong = tq.release("q", [{"id": first.id, "lease_token": second.lease_token}])
    assert [(r.id, r.reason) for r in wrong.rejected] == [(first.id, "not_owner")]
    tq.ctx.clock.advance(11)
    expired = tq.release("q", [first])
    assert [r.reason for r in expired.rejected] == ["not_owner"]
    summary = tq.run_reaper()
    assert summary.expired == 2  # the reaper records both attempts
    assert {(t.id, t.attempt) for t in tq.claim("q", max=5)} == {(first.id, 2), (second.id, 2)}


def test_a_lease_the_reaper_has_listed_cannot_be_released(make_tq, pg):
    """The reaper lists an expired lease, then records its attempt. Had a release (checked
    with a clock a little behind) given the task back in between and another worker claimed
    it, the reaper's record would put it back in line while that lease runs: a double
    dispatch. Listing marks the lease, and a release takes only unmarked ones."""
    tq = make_tq(lease_seconds=10, max_attempts=5)
    created = tq.enqueue_one("r", "once")
    [first] = tq.claim("r")
    tq.ctx.clock.advance(11)
    listed = tq.ctx.warm.expired("r", first.tenant, now_ms=int(tq.ctx.now() * 1000),
                                 limit=reaper.ReaperConfig().expired_batch)
    assert [e[0] for e in listed] == [str(created.id)]
    # a release whose clock is 20 s behind the reaper's still sees the deadline ahead
    tq.ctx.clock.advance(-20)
    refused = tq.release("r", [first])
    heartbeat = tq.heartbeat("r", [{"id": first.id, "lease_token": first.lease_token}])
    tq.ctx.clock.advance(20)
    assert [r.reason for r in refused.rejected] == ["not_owner"]
    assert [r.reason for r in heartbeat.rejected] == ["not_owner"]
    assert tq.claim("r") == []  # still leased: only the reaper puts it back
    assert tq.running("r") == []  # a lease being expired is no longer running

    summary = reaper.ReaperSummary()
    reaper.record_expired(tq.ctx, "r", first.tenant, listed, summary)
    assert summary.requeued == 1
    [second] = tq.claim("r")
    assert (second.id, second.attempt) == (created.id, 2)
    assert tq.claim("r") == []
    assert tq.ack("r", [second]).acked == [second.id]
    assert count_state(pg, "r", "warm") == 0


def test_a_reaper_pass_stopped_after_listing_leaves_nothing_behind(make_tq):
    tq = make_tq(lease_seconds=10, max_attempts=5)
    created = tq.enqueue_one("r", "once")
    [first] = tq.claim("r")
    tq.ctx.clock.advance(11)
    tq.ctx.warm.expired("r", first.tenant, now_ms=int(tq.ctx.now() * 1000),
                        limit=reaper.ReaperConfig().expired_batch)  # and then the pass stopped
    assert tq.run_reaper().requeued == 1
    [second] = tq.claim("r")
    assert (second.id, second.attempt) == (created.id, 2)


def test_a_release_in_cold_mode_puts_the_tasks_back_at_the_front(make_tq, valkey, pg):
    """In cold mode the released tasks are still the oldest of their line: into the warm
    set while it has room, else at the front of the cold line."""
    tq = make_tq(warm_max=4)
    tq.enqueue("c", [{"payload": i} for i in range(10)])  # 4 warm, 6 cold: cold mode
    taken = tq.claim("c", max=2)
    assert [t.payload for t in taken] == [0, 1]
    assert mode_of(valkey, "c") == "cold"
    tq.enqueue_one("c", 10)  # cold mode: to the back of the cold line
    assert tq.release("c", taken).released == [t.id for t in taken]
    assert count_state(pg, "c", "cold") == 7  # two released into the room left
    order = []
    while True:
        got = drain(tq, "c", batch=3)
        order.extend(t.payload for t in got)
        if not tq.run_cold_to_warm().promoted and not got:
            break
    assert order == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]


def test_a_release_of_a_task_gone_from_postgres_is_answered_not_found(tq):
    tq.enqueue("q", [{"payload": "gone"}, {"payload": "kept"}])
    gone, kept = tq.claim("q", max=2)
    # gone from PostgreSQL as a plain ack leaves it (its row deleted, or its member ended),
    # its lease still in Valkey
    finished = batch_rows.finish_plain(tq.ctx, "q", [str(gone.id)], [gone.tenant],
                                       [gone.attempt])
    assert [r.id for r in finished] == [str(gone.id)]
    result = tq.release("q", [gone, kept])
    assert result.released == [kept.id]
    assert [(r.id, r.reason) for r in result.rejected] == [(gone.id, "not_found")]
    assert [t.id for t in drain(tq, "q")] == [kept.id]


def test_a_cancelled_task_is_not_released(tq):
    tq.enqueue_one("q", "x")
    [task] = tq.claim("q")
    tq.cancel_task("q", task.id)
    result = tq.release("q", [task])
    assert [(r.id, r.reason) for r in result.rejected] == [(task.id, "not_owner")]
    assert tq.claim("q") == []


def test_a_release_with_leases_of_several_tenants(tq):
    tq.enqueue("q", [{"payload": t, "tenant": t} for t in ("acme", "globex", "initech")])
    taken = tq.claim("q", max=3)
    assert len(taken) == 3
    result = tq.release("q", taken)
    assert len(result.released) == 3 and result.rejected == []
    assert {t.payload for t in drain(tq, "q")} == {"acme", "globex", "initech"}


@pytest.mark.parametrize("race", sorted(races.RACES))
def test_an_outcome_and_a_release_of_one_lease_never_both_happen(make_tq, monkeypatch, race):
    races.RACES[race](make_tq, monkeypatch)
