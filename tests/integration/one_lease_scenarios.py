"""One live lease per task: a push that stalls past the reconciler's grace, and a Valkey
failover that loses a claim. Scenarios run on a single Valkey
(tests/integration/test_one_lease.py) and on a three-master cluster
(tests/cluster/test_one_lease_on_cluster.py).

The stall is real: the admitting engine's push waits on an event between its commit and
its Valkey call (``Stall``, a hook around the real ``WarmTier.push``; Valkey itself is not
touched), while another engine's reaper, its clock past the grace, restores the row and a
worker leases it. Then the push goes on."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tierq.core.ordering import task_of
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.models.leases import ClaimedTask

Factory = Callable[..., Tierq]
GRACE = 30.0


class Stall:
    """Holds an engine's next call of ``attr`` on ``target`` (its first argument aside)
    until ``go``: ``arrived`` is set when the call is made, with the call's committed work
    already done."""

    def __init__(self, target: Any, attr: str) -> None:
        self.target, self.attr = target, attr
        self.arrived = threading.Event()
        self.go = threading.Event()
        self.real = getattr(target, attr)
        self.calls = 0

        def held(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == 1:
                self.arrived.set()
                if not self.go.wait(60):
                    raise TimeoutError("the test never let the stalled call go on")
            return self.real(*args, **kwargs)

        setattr(target, attr, held)

    def restore(self) -> None:
        setattr(self.target, self.attr, self.real)


@contextmanager
def stalled(target: Any, attr: str, action: Callable[[], Any]) -> Iterator[Stall]:
    """Run ``action`` on a thread with its first ``target.attr`` call held; the block runs
    while it waits there. On leaving the block the call goes on and the thread is joined
    (its exception, if any, raised here)."""
    stall = Stall(target, attr)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert stall.arrived.wait(30), f"{attr} was never called"
        yield stall
    finally:
        stall.go.set()
        thread.join(60)
        stall.restore()
    if failure:
        raise failure[0]


def leases_of(valkey: Any, queue: str, tenant: str = "_") -> list[str]:
    """The pair's lease members, '<id>|<token>'."""
    return sorted(m.decode() for m in valkey.zrange(PairKeys.of(queue, tenant).leased, 0, -1))


def ready_of(valkey: Any, queue: str, tenant: str = "_") -> list[str]:
    """The ids of the pair's ready tasks, in line (either form of member)."""
    return [task_of(m.decode())
            for m in valkey.zrange(PairKeys.of(queue, tenant).ready, 0, -1)]


def restore_past_the_grace(make_tq: Factory, writer: Tierq) -> Tierq:
    """An engine whose clock is past the grace of what ``writer`` wrote just now: its
    reaper pass takes every row Valkey does not know over."""
    reaper_side = make_tq(reconcile_grace_seconds=GRACE)
    reaper_side.ctx.clock.advance(writer.ctx.clock.offset + GRACE + 1)
    return reaper_side


# -- each path that makes a task ready, stalled between its commit and its push ---------------


def stall_enqueue(writer: Tierq, queue: str) -> tuple[Callable[[], Any], list[str]]:
    """An enqueue (push kind 'new')."""
    ids: list[str] = []

    def action() -> None:
        ids.extend(str(o.id) for o in writer.enqueue(queue, [{"payload": "once"}]))
    return action, ids


def stall_delayed_mover(writer: Tierq, queue: str) -> tuple[Callable[[], Any], list[str]]:
    """The delayed mover making a due task ready (push kind 'enqueue')."""
    [out] = writer.enqueue(queue, [{"payload": "once", "delay_seconds": 5}])
    writer.ctx.clock.advance(6)
    return (lambda: writer.run_delayed_mover()), [str(out.id)]


def stall_promotion(writer: Tierq, queue: str) -> tuple[Callable[[], Any], list[str]]:
    """The cold -> warm mover promoting a cold task (push kind 'promote')."""
    writer.put_queue(queue, {"warm_max": 1})
    first, second = writer.enqueue(queue, [{"payload": "warm"}, {"payload": "once"}])
    assert (first.state, second.state) == ("warm", "cold")
    writer.put_queue(queue, {"warm_max": 1000})
    return (lambda: writer.run_cold_to_warm()), [str(second.id)]


def stall_ready_now(writer: Tierq, queue: str) -> tuple[Callable[[], Any], list[str]]:
    """A nack whose retry is due now (``admission.ready_now``, push kind 'enqueue')."""
    [out] = writer.enqueue(queue, [{"payload": "once"}])
    [task] = writer.claim(queue)

    def action() -> None:
        result = writer.nack(queue, [{"id": task.id, "lease_token": task.lease_token,
                                      "retry_in_seconds": 0}])
        assert [str(i) for i in result.retried] == [str(out.id)]
    return action, [str(out.id)]


def stall_release(writer: Tierq, queue: str) -> tuple[Callable[[], Any], list[str]]:
    """A release putting its task back (push kind 'restore')."""
    [out] = writer.enqueue(queue, [{"payload": "once"}])
    [task] = writer.claim(queue)

    def action() -> None:
        result = writer.release(queue, [{"id": task.id, "lease_token": task.lease_token}])
        assert [str(i) for i in result.released] == [str(out.id)]
    return action, [str(out.id)]


PATHS = {"enqueue": stall_enqueue, "delayed_mover": stall_delayed_mover,
         "promotion": stall_promotion, "ready_now": stall_ready_now,
         "release": stall_release}


def push_stalled_past_the_grace(make_tq: Factory, valkey: Any, path: str, *,
                                ack_first: bool) -> None:
    """The path's push stalls past the grace; the reconciler restores the row; a worker
    leases it (and with ``ack_first`` acks it); then the push lands. The task is leased
    once, and after the ack it is gone for good."""
    queue = f"stall-{path}"
    writer = make_tq(reconcile_grace_seconds=GRACE)
    worker = make_tq(reconcile_grace_seconds=GRACE)
    action, ids = PATHS[path](writer, queue)
    held: list[ClaimedTask] = []
    with stalled(writer.ctx.warm, "push", action):
        reaper_side = restore_past_the_grace(make_tq, writer)
        assert reaper_side.run_reaper().restored == 1
        got = worker.claim(queue, max=5)
        held.extend(t for t in got if t.payload == "once")
        assert len(held) == 1
        if ack_first:
            assert [str(i) for i in worker.ack(queue, held).acked] == [str(held[0].id)]
    assert [str(held[0].id)] == ids  # (an enqueue's id is known once it returned)
    # the late push added nothing: no second lease to hand out
    again = [t for t in worker.claim(queue, max=5) if t.payload == "once"]
    assert again == [], "a task was leased twice"
    members = [m for m in leases_of(valkey, queue) if m.startswith(f"{held[0].id}|")]
    if ack_first:
        assert members == [] and str(held[0].id) not in ready_of(valkey, queue)
    else:
        assert members == [f"{held[0].id}|{held[0].lease_token}"]
        assert [str(i) for i in worker.ack(queue, held).acked] == [str(held[0].id)]
    assert str(held[0].id) not in ready_of(valkey, queue)


def release_within_the_grace_is_left_to_it(make_tq: Factory, valkey: Any) -> None:
    """A release stalled between taking its lease back and writing PostgreSQL: the row is
    older than the grace (it was enqueued long ago), yet the reconciler leaves the task to
    the release, whose mark is recent; once it goes on the task is in line once."""
    queue = "release-mark"
    writer = make_tq(reconcile_grace_seconds=GRACE)
    [out] = writer.enqueue(queue, [{"payload": "once"}])
    [task] = writer.claim(queue, lease_seconds=600)
    writer.ctx.clock.advance(100)  # the release comes long after the enqueue
    reaper_side = make_tq(reconcile_grace_seconds=GRACE)
    reaper_side.ctx.clock.advance(101)
    worker = make_tq()

    def action() -> None:
        writer.release(queue, [{"id": task.id, "lease_token": task.lease_token}])
    with stalled(writer.ctx.store, "release_leased", action):
        assert leases_of(valkey, queue) == []  # taken back, not yet in line again
        assert reaper_side.run_reaper().restored == 0
        assert worker.claim(queue, max=5) == []
    [again] = worker.claim(queue, max=5)
    assert again.id == out.id and again.attempt == 1
    assert worker.claim(queue, max=5) == []


def failover_loses_a_claim(tq: Tierq, valkey: Any) -> None:
    """Valkey replicates asynchronously: a replica promoted before it received a claim has
    the pair as it was before it. Played here with DUMP before the claim and RESTORE after:
    the task is handed out again (at-least-once), and the first worker's token is refused
    for everything (heartbeat, ack, nack, release) while the second's works."""
    queue = "failover"
    [out] = tq.enqueue(queue, [{"payload": "once"}])
    keys = [getattr(PairKeys.of(queue, "_"), name) for name in PairKeys.__dataclass_fields__]
    snapshot = {key: valkey.dump(key) for key in keys}
    [first] = tq.claim(queue)
    for key in keys:  # the promoted replica: the pair as it was before the claim
        valkey.delete(key)
        if snapshot[key] is not None:
            valkey.restore(key, 0, snapshot[key])
    [second] = tq.claim(queue)
    assert second.id == first.id == out.id and second.lease_token != first.lease_token
    old = {"id": first.id, "lease_token": first.lease_token}
    assert [r.reason for r in tq.heartbeat(queue, [old]).rejected] == ["not_owner"]
    assert [r.reason for r in tq.ack(queue, [old]).rejected] == ["not_owner"]
    assert [r.reason for r in tq.nack(queue, [old]).rejected] == ["not_owner"]
    assert [r.reason for r in tq.release(queue, [old]).rejected] == ["not_owner"]
    assert [str(i) for i in tq.ack(queue, [second]).acked] == [str(out.id)]
    assert leases_of(valkey, queue) == [] and tq.claim(queue) == []
