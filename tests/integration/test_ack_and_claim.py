"""An ack that claims the next tasks (logic/ack_claim.py): one call, the ack's lease drop in
the claim's first round trip, and each failure answered as the module's table says.

| case                                  | what is shown                                   |
| ------------------------------------- | ----------------------------------------------- |
| the usual loop                        | acked rows gone, leases dropped, next tasks     |
|                                       | leased; a round trip fewer than apart           |
| a claim that sends nothing (paused)   | the drop is sent on its own                     |
| the claim fails (Valkey full)         | the ack stands; ``claim_error``, retry_after_ms |
| the ack's drop fails                  | its error; the claimed tasks back in line, no   |
|                                       | attempt counted                                 |
| the ack fails (no lease)              | rejected as a plain ack's; the claim still runs |
| a claim error of no ``TierqError``    | ``claim_error`` internal; the ack stands        |
| the queue's ``max_leased`` full       | the acked leases make room for the claim        |
| a claim that waits                    | the drop is sent before the wait                |
| the block holding the drop raises      | the drop sent; its own failure logged, the      |
|                                       | block's error raised                            |
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest
import redis

from tests.integration.helpers import counted_sends
from tests.support.polling import eventually
from tierq.dal.warm_tier import PairKeys, lease_member
from tierq.models import ClaimRequest

QUEUE = "ac"


def enqueued(tq, tenant: str, n: int, payload: object = None) -> None:
    tq.put_queue(QUEUE, {})
    tq.enqueue(QUEUE, [{"payload": {"n": i} if payload is None else payload,
                        "tenant": tenant} for i in range(n)])


def held(valkey: redis.Redis, tenant: str, tasks) -> list[bool]:
    """Whether each task's lease is still in its pair's leased set."""
    leased = PairKeys.of(QUEUE, tenant).leased
    return [valkey.zscore(leased, lease_member(str(t.id), t.lease_token)) is not None
            for t in tasks]


def test_the_ack_is_done_and_the_next_tasks_leased(tq, valkey: redis.Redis):
    enqueued(tq, "a", 6)
    first = tq.claim(QUEUE, max=3)
    answer = tq.ack_and_claim(QUEUE, first, max=3)
    assert sorted(answer.acked) == sorted(t.id for t in first)
    assert answer.rejected == [] and answer.claim_error is None
    assert len(answer.tasks) == 3 and not {t.id for t in answer.tasks} & set(answer.acked)
    assert [tq.ctx.store.task_by_id(QUEUE, t.id) for t in first] == [None] * 3
    assert held(valkey, "a", first) == [False] * 3
    assert held(valkey, "a", answer.tasks) == [True] * 3
    # (the next loop acks those: the queue is empty after it)
    last = tq.ack_and_claim(QUEUE, answer.tasks, max=3)
    assert len(last.acked) == 3 and last.tasks == []
    counts = tq.get_queue(QUEUE).counts
    assert (counts.warm, counts.cold, counts.leased) == (0, 0, 0)


def test_the_drop_rides_in_the_claim_s_round_trip(tq):
    """An ack of one pair is two round trips (the check; the drop) and a claim of one named
    pair one (its pop): three apart, two together."""
    enqueued(tq, "a", 12)
    request = ClaimRequest(max=3, tenant="a")
    got = tq.claim(QUEUE, request)
    tq.ack(QUEUE, got[:1])  # (not counted: these load the scripts)
    got = tq.ack_and_claim(QUEUE, got[1:], request).tasks
    with counted_sends(tq) as apart:
        tq.ack(QUEUE, got)
        got = tq.claim(QUEUE, request)
    with counted_sends(tq) as together:
        answer = tq.ack_and_claim(QUEUE, got, request)
    assert len(answer.acked) == 3 and len(answer.tasks) == 3
    assert apart.sends == 3, dict(apart.commands)
    assert together.sends == 2, dict(together.commands)
    assert together.commands["lease_drop"] == 1 and together.commands["claim"] == 1
    # (committed alone, acks committed together on by default: no mailbox joined)
    assert tq.ctx.settings.gathers_acks and "ack_check_join" not in together.commands


def test_a_claim_that_sends_nothing_sends_the_drop_alone(tq, valkey: redis.Redis):
    enqueued(tq, "a", 4)
    got = tq.claim(QUEUE, max=2)
    tq.pause(QUEUE)
    answer = tq.ack_and_claim(QUEUE, got, max=2)
    assert len(answer.acked) == 2 and answer.tasks == []
    assert held(valkey, "a", got) == [False, False]


def test_a_failed_claim_leaves_the_ack_done(tq, valkey: redis.Redis,
                                            small_valkey: Callable[[int], None]):
    """Valkey full: cold work the claim would bring warm does not fit, so the claim fails
    (WarmTierFull); the ack before it stands and the answer says when to claim again."""
    enqueued(tq, "a", 2)
    got = tq.claim(QUEUE, max=2)
    small_valkey(0)
    tq.enqueue(QUEUE, [{"payload": "x" * 200_000, "tenant": "a"}])  # (cold: no room warm)
    small_valkey(32 * 1024)
    answer = tq.ack_and_claim(QUEUE, got, max=2)
    assert sorted(answer.acked) == sorted(t.id for t in got)
    assert answer.tasks == [] and answer.claim_error == "unavailable"
    assert answer.retry_after_ms == 5000
    assert held(valkey, "a", got) == [False, False]
    assert [tq.ctx.store.task_by_id(QUEUE, t.id) for t in got] == [None, None]


def test_a_failed_drop_is_the_answer_and_the_claimed_tasks_go_back(
        tq, valkey: redis.Redis):
    enqueued(tq, "a", 2)
    enqueued(tq, "b", 2)
    got = tq.claim(QUEUE, ClaimRequest(max=2, tenant="a"))
    # (a's progress key of the wrong type: its drop's HMGET fails, the check reads none)
    valkey.set(PairKeys.of(QUEUE, "a").progress, "not a hash")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        tq.ack_and_claim(QUEUE, got, ClaimRequest(max=2, tenant="b"))
    assert [tq.ctx.store.task_by_id(QUEUE, t.id) for t in got] == [None, None]  # (committed)
    again = tq.claim(QUEUE, ClaimRequest(max=2, tenant="b"))
    assert len(again) == 2 and [t.attempt for t in again] == [1, 1]


def test_an_ack_without_its_lease_is_rejected_and_the_claim_runs(tq):
    enqueued(tq, "a", 4)
    got = tq.claim(QUEUE, max=1)
    tq.ack(QUEUE, got)
    answer = tq.ack_and_claim(QUEUE, got, max=2)
    assert answer.acked == [] and [r.reason for r in answer.rejected] == ["not_owner"]
    assert len(answer.tasks) == 2


def test_a_claim_error_of_another_kind_is_internal_and_the_ack_stands(
        tq, valkey: redis.Redis):
    enqueued(tq, "a", 2)
    enqueued(tq, "b", 1)
    got = tq.claim(QUEUE, ClaimRequest(max=2, tenant="a"))
    valkey.delete(PairKeys.of(QUEUE, "b").ready)
    valkey.set(PairKeys.of(QUEUE, "b").ready, "not a sorted set")  # (the pop: WRONGTYPE)
    answer = tq.ack_and_claim(QUEUE, got, ClaimRequest(max=2, tenant="b"))
    assert sorted(answer.acked) == sorted(t.id for t in got)
    assert answer.tasks == [] and answer.claim_error == "internal"
    assert answer.retry_after_ms == 1000
    assert held(valkey, "a", got) == [False, False]


def test_under_max_leased_the_acked_leases_make_room(tq):
    """The queue-wide reservations of the acked leases go back before the claim takes its
    own (on a cluster, after the drop and before the claim's round trip)."""
    tq.put_queue(QUEUE, {"max_leased": 2})
    enqueued(tq, "a", 8)
    # (a plain ack first loads the drop's scripts: a drop Valkey did not know runs again
    # after the claim it went with, which then finds the reservations still held)
    tq.ack(QUEUE, tq.claim(QUEUE, max=2))
    got = tq.claim(QUEUE, max=2)
    assert tq.claim(QUEUE, max=2) == []  # (full)
    answer = tq.ack_and_claim(QUEUE, got, max=2)
    assert len(answer.acked) == 2 and len(answer.tasks) == 2, answer
    again = tq.ack_and_claim(QUEUE, answer.tasks, max=2)
    assert len(again.tasks) == 2


def test_a_claim_that_waits_sends_the_drop_before_it_waits(tq, valkey: redis.Redis):
    enqueued(tq, "a", 2)
    got = tq.claim(QUEUE, max=2)
    tq.pause(QUEUE)
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(
        tq.ack_and_claim(QUEUE, got, ClaimRequest(max=2, wait_seconds=3))))
    thread.start()
    try:
        eventually(lambda: held(valkey, "a", got) == [False, False], timeout=1.5,
                   what="the leases still held while the claim waits")
        assert not done  # (still waiting)
    finally:
        thread.join(timeout=10)
    [answer] = done
    assert len(answer.acked) == 2 and answer.tasks == []


def test_a_block_that_raises_sends_its_drop_and_tells_of_its_failure(
        tq, valkey: redis.Redis, caplog: pytest.LogCaptureFixture):
    # (an ack within holding_drop commits alone, acks committed together on by default)
    assert tq.ctx.settings.gathers_acks
    enqueued(tq, "a", 4)
    got = tq.claim(QUEUE, ClaimRequest(max=2, tenant="a"))
    with pytest.raises(ValueError, match="the block's"), tq.ctx.warm.holding_drop():
        tq.ack(QUEUE, got[:1])
        raise ValueError("the block's own error")
    assert held(valkey, "a", got) == [False, True]  # (the drop went, alone)
    valkey.set(PairKeys.of(QUEUE, "a").progress, "not a hash")
    with caplog.at_level(logging.WARNING, logger="tierq"), \
            pytest.raises(ValueError, match="again"), tq.ctx.warm.holding_drop():
        tq.ack(QUEUE, got[1:])
        raise ValueError("again")
    assert any("held lease drop failed" in r.getMessage() for r in caplog.records)
