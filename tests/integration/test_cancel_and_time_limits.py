"""Cancelling a task, running or not (kept as ``cancelled``: logic/tasks.cancel), and the
time limit of an attempt (``timeout_seconds``: logic/time_limits.py), on the real stores."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from tests.integration.helpers import count_rows, count_state
from tierq.core.ordering import place
from tierq.dal.lua_calls import PushReady
from tierq.dal.warm_tier import PairKeys, lease_member
from tierq.errors import NotFound, TaskFinished
from tierq.logic import admission, flows, time_limits
from tierq.logic.context import from_ms, to_ms
from tierq.models.tasks import MAX_TIMEOUT_SECONDS

# -- cancel ---------------------------------------------------------------------------------


def test_a_ready_task_cancelled_leaves_the_line_at_once_and_is_kept(tq, pg, valkey):
    first, second = tq.enqueue("c", [{"payload": 1}, {"payload": 2}])
    view = tq.cancel("c", first.id)
    assert view.state == "cancelled" and view.finished_at is not None
    assert tq.get_task("c", first.id).state == "cancelled"  # kept, as a finished task
    assert valkey.zcard(PairKeys.of("c", "_").ready) == 1
    [claimed] = tq.claim("c", max=5)
    assert claimed.id == second.id
    # cancelling it again answers it as it is; a finished task cannot be cancelled
    assert tq.cancel("c", first.id).state == "cancelled"
    tq.ack("c", [claimed])
    with pytest.raises(NotFound):  # (acked without a result: deleted)
        tq.cancel("c", second.id)


def test_a_done_or_dead_task_is_not_cancelled(tq):
    tq.put_queue("f", {"max_attempts": 1})
    done_id = tq.enqueue_one("f", "done").id
    [task] = tq.claim("f")
    tq.ack("f", [{"id": task.id, "lease_token": task.lease_token, "result": 1}])
    dead_id = tq.enqueue_one("f", "dead").id
    [task] = tq.claim("f")
    tq.nack("f", [{"id": task.id, "lease_token": task.lease_token, "error": "x"}])
    for task_id, state in ((done_id, "done"), (dead_id, "dead")):
        with pytest.raises(TaskFinished, match=state):
            tq.cancel("f", task_id)
        assert tq.get_task("f", task_id).state == state


def test_cold_delayed_and_waiting_tasks_leave_their_lines(make_tq, pg):
    tq = make_tq(warm_max=1)
    _, cold = tq.enqueue("l", [{"payload": "w"}, {"payload": "c"}])
    later = tq.enqueue_one("l", "later", delay_seconds=60)
    assert count_state(pg, "l", "cold") == 1
    parent = tq.enqueue_one("l", "parent", delay_seconds=3600)
    child = tq.enqueue("l", [{"payload": "child", "after": [parent.id]}])[0]
    for task_id in (cold.id, later.id, child.id):
        assert tq.cancel("l", task_id).state == "cancelled"
    tq.ctx.clock.advance(61)
    tq.run_delayed_mover()
    tq.run_cold_to_warm()
    assert [t.payload for t in tq.claim("l", max=10)] == ["w"]
    assert count_state(pg, "l", "cancelled") == 3


def test_a_cancelled_parent_settles_its_children_as_cancelled(tq):
    parent = tq.enqueue_one("p", "parent")
    dies, runs = tq.enqueue("p", [
        {"payload": "dies", "after": [parent.id]},
        {"payload": "runs", "after": [parent.id], "on_parent_failure": "run"}])
    tq.cancel("p", parent.id)
    assert tq.get_task("p", dies.id).state == "dead"
    [task] = tq.claim("p", max=5)
    assert task.id == runs.id
    assert [(p.id, p.state) for p in task.parents or []] == [(parent.id, "cancelled")]


def test_a_cancelled_group_member_releases_its_group(tq):
    first, second = tq.enqueue("g", [{"payload": 1, "group": "g1"},
                                     {"payload": 2, "group": "g1"}])
    assert second.state == "held"
    [leased] = tq.claim("g")
    assert leased.id == first.id
    tq.cancel("g", first.id)  # running: its group's next task goes on
    [task] = tq.claim("g")
    assert task.id == second.id
    # and a held one cancelled leaves the line without running
    third = tq.enqueue_one("g", 3, group="g1")
    tq.cancel("g", third.id)
    tq.ack("g", [task])
    assert tq.claim("g") == []


def test_a_leased_task_cancelled_is_told_at_its_heartbeat_and_ack_and_never_retried(
        make_tq, pg, valkey):
    tq = make_tq(lease_seconds=30, max_attempts=3)
    out = tq.enqueue_one("r", "work")
    [task] = tq.claim("r")
    tq.cancel("r", out.id)
    # the lease is gone at once (its place under the limits is free)
    assert valkey.zcard(PairKeys.of("r", "_").leased) == 0
    beat = tq.heartbeat("r", [{"id": task.id, "lease_token": task.lease_token}])
    assert beat.extended == [] and beat.cancelled == [task.id]
    assert [r.reason for r in beat.rejected] == ["not_owner"]  # (what older clients read)
    acked = tq.ack("r", [task])
    assert acked.acked == [] and acked.cancelled == [task.id]
    nacked = tq.nack("r", [{"id": task.id, "lease_token": task.lease_token}])
    assert nacked.retried == [] and nacked.cancelled == [task.id]
    tq.ctx.clock.advance(60)
    summary = tq.run_reaper()
    assert summary.expired == 0
    row = tq.get_task("r", out.id)
    assert (row.state, row.attempts) == ("cancelled", 0)
    assert tq.claim("r") == []
    # an ordinary lost lease is not reported as cancelled
    other = tq.enqueue_one("r", "other")
    [task2] = tq.claim("r")
    tq.ctx.clock.advance(31)
    late = tq.heartbeat("r", [{"id": task2.id, "lease_token": task2.lease_token}])
    assert late.cancelled == [] and late.rejected[0].id == other.id


def test_a_tenant_cancels_only_its_own_tasks(tq):
    mine = tq.enqueue_one("t", "x", tenant="acme")
    with pytest.raises(NotFound):
        tq.cancel("t", mine.id, tenant="other")
    assert tq.get_task("t", mine.id).state == "warm"
    assert tq.cancel("t", mine.id, tenant="acme").state == "cancelled"


def test_a_wait_wakes_on_a_cancel(tq):
    out = tq.enqueue_one("w", "x", tenant="acme")
    seen: list[Any] = []
    waiter = threading.Thread(target=lambda: seen.append(
        tq.get_task("w", out.id, wait_seconds=10, tenant="acme")))
    started = time.monotonic()
    waiter.start()
    time.sleep(0.3)
    tq.cancel("w", out.id)
    waiter.join(10)
    assert seen[0].state == "cancelled" and time.monotonic() - started < 3


def test_cancelled_tasks_are_purged_when_retention_ends(tq, pg):
    tq.put_queue("k", {"retention_seconds": 60})
    out = tq.enqueue_one("k", "x")
    tq.cancel("k", out.id)
    tq.run_reaper()
    assert count_rows(pg, "k") == 1
    tq.ctx.clock.advance(61)
    assert tq.run_reaper().purged == 1
    assert count_rows(pg, "k") == 0
    with pytest.raises(NotFound):
        tq.get_task("k", out.id)


def test_delete_keeps_its_meaning(tq):
    out = tq.enqueue_one("d", "x")
    tq.cancel_task("d", out.id)
    with pytest.raises(NotFound):
        tq.get_task("d", out.id)


def test_a_retried_cancel_takes_out_a_task_its_first_call_left_ready(tq, valkey):
    """The first call committed its mark and failed before the task left the warm tier (a
    5xx): the retry takes it out, or it would stay claimable."""
    first, second = tq.enqueue("y", [{"payload": 1}, {"payload": 2}])
    flows.cancel_mark(tq.ctx, "y", first.id, None)  # (the first call's commit, no more)
    assert tq.cancel("y", first.id).state == "cancelled"
    assert [t.id for t in tq.claim("y", max=5)] == [second.id]
    assert valkey.zcard(PairKeys.of("y", "_").ready) == 0


def test_a_retried_cancel_ends_a_lease_claimed_in_between_and_frees_its_place(make_tq):
    """Claimed between the first call's commit and its (failed) removal: the retry ends
    the lease the removal finds and gives back its queue-wide reservation (max_leased),
    whoever claimed it."""
    tq = make_tq(lease_seconds=300)
    tq.put_queue("z", {"max_leased": 1})
    first, second = tq.enqueue("z", [{"payload": 1}, {"payload": 2}])
    flows.cancel_mark(tq.ctx, "z", first.id, None)
    [task] = tq.claim("z", max=2)
    assert task.id == first.id and tq.claim("z") == []  # the limit is reached
    tq.cancel("z", first.id)
    beat = tq.heartbeat("z", [{"id": task.id, "lease_token": task.lease_token}])
    assert beat.extended == [] and beat.cancelled == [task.id]
    [task] = tq.claim("z")  # its place is free at once
    assert task.id == second.id


def test_a_running_task_cancelled_keeps_its_last_progress(make_tq, pg):
    tq = make_tq(lease_seconds=300)
    out = tq.enqueue_one("pr", "work")
    [task] = tq.claim("pr")
    tq.heartbeat("pr", [{"id": task.id, "lease_token": task.lease_token,
                         "progress": {"done": 1}}])
    tq.ctx.clock.advance(2)
    tq.heartbeat("pr", [{"id": task.id, "lease_token": task.lease_token,
                         "progress": {"done": 3}}])
    view = tq.cancel("pr", out.id)
    assert view.progress == {"done": 3} and view.progress_at is not None
    row = tq.get_task("pr", out.id)
    assert (row.state, row.progress) == ("cancelled", {"done": 3})
    assert row.progress_at == view.progress_at
    assert row.progress_at.timestamp() == pytest.approx(tq.ctx.now(), abs=1)  # (the last)
    # a retry answers it with its progress, unchanged
    assert tq.cancel("pr", out.id).progress == {"done": 3}


# -- time limits ----------------------------------------------------------------------------


def test_heartbeats_never_extend_a_lease_past_its_time_limit(make_tq, valkey):
    tq = make_tq(lease_seconds=30)
    tq.enqueue("h", [{"payload": "limited", "timeout_seconds": 2}, {"payload": "free"}])
    limited, free = tq.claim("h", max=2)
    started = to_ms(tq.ctx.now())
    assert (limited.timeout_seconds, free.timeout_seconds) == (2, None)
    assert to_ms(limited.lease_expires_at.timestamp()) <= started + 2000
    tq.ctx.clock.advance(1)
    beat = tq.heartbeat("h", [{"id": t.id, "lease_token": t.lease_token, "extend_seconds": 60}
                              for t in (limited, free)])
    deadlines = {e.id: to_ms(e.lease_expires_at.timestamp()) for e in beat.extended}
    assert deadlines[limited.id] <= started + 2000
    assert deadlines[free.id] >= started + 60_000
    tq.ctx.clock.advance(1.1)  # past the limit: refused whatever the heartbeats
    late = tq.heartbeat("h", [{"id": limited.id, "lease_token": limited.lease_token}])
    assert late.extended == [] and late.cancelled == []
    assert tq.ack("h", [limited]).rejected[0].reason == "not_owner"
    key = PairKeys.of("h", "_").limits
    assert valkey.zscore(key, lease_member(str(limited.id), limited.lease_token)) is not None


def test_an_attempt_at_its_limit_fails_as_a_nack_with_backoff_then_dies(make_tq, valkey):
    tq = make_tq(lease_seconds=30)
    tq.put_queue("x", {"max_attempts": 2, "backoff": {
        "kind": "fixed", "base_seconds": 10, "cap_seconds": 10, "jitter": 0}})
    out = tq.enqueue_one("x", "hangs", timeout_seconds=2)
    [task] = tq.claim("x")
    tq.ctx.clock.advance(2.5)
    before = tq.ctx.now()
    summary = tq.run_reaper()
    assert (summary.timed_out, summary.requeued) == (1, 1)
    row = tq.get_task("x", out.id)
    after = tq.ctx.now()  # (the reaper's moment lies between: however loaded the machine)
    assert row.state == "delayed" and row.attempts == 1
    assert row.last_error is not None and row.last_error.startswith("timeout:")
    # the queue's backoff, not the expired lease's "back of the line at once"
    assert before + 10 - 0.01 <= row.run_at.timestamp() <= after + 10 + 0.01
    assert valkey.zcard(PairKeys.of("x", "_").limits) == 0  # it left with its lease
    tq.ctx.clock.advance(11)
    tq.run_delayed_mover()
    [again] = tq.claim("x")
    assert again.attempt == 2 and again.timeout_seconds == 2
    tq.ctx.clock.advance(2.5)
    assert tq.run_reaper().dead == 1
    assert tq.get_task("x", out.id).state == "dead"
    assert task.id == out.id


def test_an_expired_lease_with_a_limit_far_ahead_is_an_expiry(make_tq):
    tq = make_tq(lease_seconds=5)
    out = tq.enqueue_one("e", "x", timeout_seconds=600)
    tq.claim("e")
    tq.ctx.clock.advance(6)  # no heartbeat: the lease expired long before its limit
    summary = tq.run_reaper()
    assert (summary.expired, summary.timed_out) == (1, 0)
    assert tq.get_task("e", out.id).last_error == "lease expired (attempt 1)"


def test_a_lease_that_expired_before_its_limit_and_is_reaped_after_it_is_an_expiry(make_tq,
                                                                                   valkey):
    """The worker stopped heartbeating at 5 s; the reaper came only past the 10 s limit:
    the lease expired (back in line at once), the limit did not end it."""
    tq = make_tq(lease_seconds=5)
    out = tq.enqueue_one("late", "x", timeout_seconds=10)
    tq.claim("late")
    tq.ctx.clock.advance(12)
    summary = tq.run_reaper()
    assert (summary.expired, summary.timed_out) == (1, 0)
    row = tq.get_task("late", out.id)
    assert row.last_error == "lease expired (attempt 1)" and row.state == "warm"
    assert valkey.zcard(PairKeys.of("late", "_").limits) == 0


@pytest.mark.parametrize("heartbeats", [True, False])
def test_a_lease_ended_by_its_limit_times_out_whenever_it_is_reaped(make_tq, heartbeats):
    """Its deadline was the limit: brought to it by heartbeats, or by the claim itself (a
    lease longer than the limit); listed by one pass and recorded by a later one, as a
    reaper stopped in between would leave it."""
    tq = make_tq(lease_seconds=5 if heartbeats else 60)
    out = tq.enqueue_one("capped", "x", timeout_seconds=8)
    [task] = tq.claim("capped")
    if heartbeats:
        for _ in range(3):
            tq.ctx.clock.advance(3)
            tq.heartbeat("capped", [{"id": task.id, "lease_token": task.lease_token}])
    tq.ctx.clock.advance(30)
    # listed (and marked) by a pass that stopped before recording them
    assert len(tq.ctx.warm.expired("capped", "_", now_ms=to_ms(tq.ctx.now()), limit=10)) == 1
    summary = tq.run_reaper()
    assert (summary.expired, summary.timed_out) == (1, 1)
    assert (tq.get_task("capped", out.id).last_error or "").startswith("timeout:")


def test_the_queue_default_applies_to_tasks_without_their_own(make_tq):
    tq = make_tq(lease_seconds=30)
    tq.put_queue("q", {"timeout_seconds": 5})
    tq.enqueue("q", [{"payload": "default"}, {"payload": "own", "timeout_seconds": 1}])
    default, own = tq.claim("q", max=2)
    assert (default.timeout_seconds, own.timeout_seconds) == (5, 1)
    assert tq.get_queue("q").settings.timeout_seconds == 5
    tq.put_queue("q", {"timeout_seconds": None})  # cleared
    assert tq.get_queue("q").settings.timeout_seconds is None
    assert tq.get_task("q", own.id).timeout_seconds == 1


def test_the_claim_script_reads_a_tasks_own_limit_as_the_claim_does(tq, valkey):
    """lua/claim.lua finds a task's own "to" at the end of its blob (or before its trace)
    without parsing it; the claim's answer parses the blob. Both agree on every shape of
    blob (logic/admission.task_blob), whatever "to" or "tr" the payload, a group's name or
    a trace's text hold, a trace longer than the script's first window included: each lease
    is limited and ends as the claim reports (logic/time_limits.cut_deadlines)."""
    queue, now, lease_ms, default = "shapes", 1_000_000, 8_000, 7
    big = orjson.dumps({"x": [1, "to"], "to": 4, "tr": {"to": 5}, "pad": ',"tr":{' * 2000})
    payloads = [b"1", b'{"to":3}', b'",\\"to\\":3,\\"tr\\":{"', big]
    traces = [None, b'{"traceparent":"00-%s-%s-01"}' % (b"a" * 32, b"b" * 16),
              orjson.dumps({"tracestate": ',"to":2,"tr":{' * 300})]
    blobs = [admission.task_blob(0, payload, None, 0, 3, 5, parents, group, seq, own, trace)
             for payload, (parents, group, seq), own, trace in itertools.product(
                 payloads, [(None, None, None), (b'["p"]', ',"to":3', 4)], [None, 2, 11],
                 traces)]
    k = PairKeys.of(queue, "_")
    valkey.hset(k.meta, "mode", "warm")
    ids = [str(uuid.UUID(int=i + 1)) for i in range(len(blobs))]
    tq.ctx.warm.call(PushReady(
        k, items=[(task_id, place(0, i + 1, task_id), blob)
                  for i, (task_id, blob) in enumerate(zip(ids, blobs, strict=True))],
        warm_max=1000, kind="restore", now_ms=now, token="adm", warm_max_bytes=10**8,
        since_ms=now, bound="", grant=0, charge=0, keep=0))
    _, _, claimed, _, _ = tq.ctx.warm.claim_limited(
        queue, "_", n=len(blobs), now_ms=now, lease_ms=lease_ms, token_prefix="_~x~",
        worker="w", timeout_seconds=default)
    assert len(claimed) == len(blobs)
    leases = [(raw_id.decode(), token.decode(), orjson.loads(body).get("to", default))
              for raw_id, _, token, body in claimed]
    assert {own for *_, own in leases} == {2, 7, 11}
    cut = time_limits.cut_deadlines(now, lease_ms, [(i, limit) for i, _, limit in leases])
    for task_id, token, limit in leases:
        member = lease_member(task_id, token)
        assert valkey.zscore(k.limits, member) == now + limit * 1000, (task_id, limit)
        expected = cut[task_id] if task_id in cut else from_ms(now + lease_ms)
        assert from_ms(int(valkey.zscore(k.leased, member))) == expected


@pytest.mark.parametrize("bad", [0, -1, MAX_TIMEOUT_SECONDS + 1, 1.5, "2s", [2]])
def test_a_bad_timeout_is_refused_and_nothing_is_written(tq, pg, bad):
    with pytest.raises(ValidationError, match="timeout_seconds"):
        tq.enqueue("b", [{"payload": 1}, {"payload": 2, "timeout_seconds": bad}])
    assert count_rows(pg, "b") == 0
    with pytest.raises(ValidationError, match="timeout_seconds"):
        tq.put_queue("b", {"timeout_seconds": bad})


def test_a_cancelled_lease_frees_its_place_under_the_queues_limits(make_tq):
    tq = make_tq(lease_seconds=300)
    tq.put_queue("m", {"max_leased": 1, "tenant_max_leased": 1})
    first, second = tq.enqueue("m", [{"payload": 1}, {"payload": 2}])
    [task] = tq.claim("m", max=2)
    assert task.id == first.id and tq.claim("m") == []  # the limit is reached
    tq.cancel("m", first.id)
    [task] = tq.claim("m")  # at once, not once the cancelled lease would have run out
    assert task.id == second.id
