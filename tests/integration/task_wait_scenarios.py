"""Waits for a task's end (logic/waits.py), as scenarios run on a single Valkey
(tests/integration/test_task_wait.py) and on a cluster (tests/cluster/test_task_wait_on_cluster.py):
woken by the message of whatever ends the task, never by polling PostgreSQL."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from tierq.contract import QueueEngine
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.errors import NotFound
from tierq.logic import waits
from tierq.models import TaskView

TENANT = "_"


def channel(queue: str, task_id: Any, tenant: str = TENANT) -> str:
    return f"{PairKeys.of(queue, tenant).finished}:{task_id}"


def subscribers(valkey: redis.Redis | RedisCluster, name: str) -> int:
    """How many clients are subscribed to the sharded channel ``name`` (on its master)."""
    if isinstance(valkey, RedisCluster):
        reply = valkey.execute_command("PUBSUB", "SHARDNUMSUB", name,
                                       target_nodes=valkey.get_node_from_key(name))
    else:
        reply = valkey.execute_command("PUBSUB", "SHARDNUMSUB", name)
    return int(reply[1]) if reply else 0


class Waiter:
    """A wait run in a thread: its answer (or error) and when it came (monotonic)."""

    def __init__(self, tq: QueueEngine, queue: str, task_id: Any, seconds: float,
                 tenant: str | None = None) -> None:
        self.answer: TaskView | None = None
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self.ended = 0.0

        def run() -> None:
            try:
                self.answer = tq.get_task(queue, task_id, wait_seconds=seconds, tenant=tenant)
            except BaseException as exc:  # (handed to the test)
                self.error = exc
            self.ended = time.monotonic()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def result(self, timeout: float = 30) -> TaskView:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the wait did not end"
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer


def subscribed(valkey: Any, queue: str, task_id: Any, waiter: Waiter) -> None:
    """Until the waiter's subscription is in place (or it ended)."""
    deadline = time.monotonic() + 10
    while subscribers(valkey, channel(queue, task_id)) < 1:
        assert waiter.thread.is_alive() or waiter.error is None, waiter.error
        assert time.monotonic() < deadline, "the waiter never subscribed"
        time.sleep(0.005)


def registered(valkey: Any, queue: str, task_id: Any, waiter: Waiter) -> None:
    """Until the waiter has registered for its task's message (after its subscription)."""
    deadline = time.monotonic() + 10
    while not valkey.hexists(PairKeys.of(queue, TENANT).waiters, str(task_id)):
        assert waiter.thread.is_alive() or waiter.error is None, waiter.error
        assert time.monotonic() < deadline, "the waiter never registered"
        time.sleep(0.005)


def markers(valkey: Any, queue: str, tenant: str = TENANT) -> tuple[set[str], set[str]]:
    """The ids with a marker in the pair's current generation, and in its previous one."""
    k = PairKeys.of(queue, tenant)

    def ids(key: str) -> set[str]:
        return {v.decode() for v in valkey.hkeys(key)} - {"@started", "~encoding"}

    return ids(k.finished), ids(k.finished_prev)


def wakes_within_ms_of_the_ack(tq: Tierq, valkey: Any, rounds: int = 20) -> float:
    """The median of ``rounds`` waits' answers after the ack that ends their task (ms)."""
    late: list[float] = []
    for _ in range(rounds):
        tq.enqueue("q", [{"payload": 1}])
        [task] = tq.claim("q")
        waiter = Waiter(tq, "q", task.id, 10)
        subscribed(valkey, "q", task.id, waiter)
        acked = time.monotonic()
        assert tq.ack("q", [task]).acked == [task.id]
        answer = waiter.result()
        late.append((waiter.ended - acked) * 1000)
        assert answer.state == "done" and answer.id == task.id  # (deleted on ack)
        assert subscribers(valkey, channel("q", task.id)) == 0  # (its connection closed)
    median = statistics.median(late)
    print(f"wait answered after the ack: median {median:.1f} ms, max {max(late):.1f} ms "
          f"of {rounds}")
    return median


def a_woken_wait_answers_from_its_message(tq: Tierq, valkey: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The message carries the task's marker: a woken wait whose task's row is gone
    answers ``done`` from it, with no lookup (the marker may be gone by then: its tenant's
    share took its room, lua/task_finished.lua)."""
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    monkeypatch.setattr(tq.ctx.warm, "finished_of", lambda *args, **kwargs: None)
    waiter = Waiter(tq, "q", task.id, 10, tenant=TENANT)
    registered(valkey, "q", task.id, waiter)
    assert tq.ack("q", [task]).acked == [task.id]
    answer = waiter.result()
    assert (answer.state, answer.id, answer.attempts) == ("done", task.id, task.attempt)
    assert waiter.ended - waiter.started < 5


def a_kept_result_answers_with_it(tq: Tierq, valkey: Any) -> None:
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    waiter = Waiter(tq, "q", task.id, 10)
    subscribed(valkey, "q", task.id, waiter)
    tq.ack("q", [{"id": task.id, "lease_token": task.lease_token, "result": {"n": 7}}])
    answer = waiter.result()
    assert answer.state == "done" and answer.result == {"n": 7}
    assert waiter.ended - waiter.started < 5


def nothing_happens_for_n_seconds(tq: Tierq) -> None:
    [made] = tq.enqueue("q", [{"payload": 1}])
    waiter = Waiter(tq, "q", made.id, 1)
    answer = waiter.result()
    assert 0.95 <= waiter.ended - waiter.started < 2.5
    assert answer.state == "warm"  # as it stands: still waiting in line
    [task] = tq.claim("q")
    waiter = Waiter(tq, "q", task.id, 0.5)
    assert waiter.result().state == "leased"


def acked_before_the_wait_answers_done(tq: Tierq) -> None:
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    tq.ack("q", [task])
    started = time.monotonic()
    answer = tq.get_task("q", task.id, wait_seconds=10, tenant=TENANT)
    assert time.monotonic() - started < 2  # at once, from the marker
    assert (answer.state, answer.id, answer.tenant, answer.attempts) == (
        "done", task.id, TENANT, task.attempt)
    with pytest.raises(NotFound):  # a read that does not wait: the row is gone
        tq.get_task("q", task.id)
    with pytest.raises(NotFound):  # an admin's wait: the tenant, and so the marker, unknown
        tq.get_task("q", task.id, wait_seconds=1)


def the_other_ends_wake_it(tq: Tierq, valkey: Any) -> None:
    """A nack at the last attempt, an expired lease at the last attempt, a delete."""
    tq.put_queue("q", {"max_attempts": 1})
    tq.enqueue("q", [{"payload": 1}, {"payload": 2}, {"payload": 3}])
    nacked, expired, deleted = tq.claim("q", max=3)
    waiters = {t.id: Waiter(tq, "q", t.id, 15) for t in (nacked, expired, deleted)}
    for task_id, waiter in waiters.items():
        subscribed(valkey, "q", task_id, waiter)
    tq.nack("q", [{"id": nacked.id, "lease_token": nacked.lease_token, "error": "no"}])
    assert waiters[nacked.id].result(5).state == "dead"
    tq.cancel_task("q", deleted.id)
    with pytest.raises(NotFound):
        waiters[deleted.id].result(5)
    tq.ctx.clock.advance(tq.settings.lease_seconds + 1)
    assert tq.run_reaper().dead == 1
    answer = waiters[expired.id].result(5)
    assert answer.state == "dead" and answer.last_error
    for waiter in waiters.values():
        assert waiter.ended - waiter.started < 10


def another_tenants_task_is_404_at_once(tq: Tierq) -> None:
    [made] = tq.enqueue("q", [{"payload": 1}], tenant="acme")
    started = time.monotonic()
    with pytest.raises(NotFound):
        tq.get_task("q", made.id, wait_seconds=10, tenant="globex")
    assert time.monotonic() - started < 1
    assert tq.get_task("q", made.id, wait_seconds=0.2, tenant="acme").tenant == "acme"


def a_finish_before_the_subscription_is_not_missed(tq: Tierq,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The task is acked after the wait's first read and before its subscription: the
    message goes to no one, and the marker found once subscribed answers."""
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    channel_of = tq.ctx.warm.finished_channel

    @contextmanager
    def late(queue: str, tenant: str, task_id: str) -> Iterator[Callable[[float], str | None]]:
        tq.ack("q", [task])  # (before the subscription)
        with channel_of(queue, tenant, task_id) as receive:
            yield receive

    monkeypatch.setattr(tq.ctx.warm, "finished_channel", late)
    waiter = Waiter(tq, "q", task.id, 10)
    assert waiter.result().state == "done"
    assert waiter.ended - waiter.started < 2


def a_stale_marker_does_not_end_the_wait(tq: Tierq) -> None:
    """A dead letter replayed keeps its marker for a while: a wait on it waits on."""
    tq.put_queue("q", {"max_attempts": 1})
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    tq.nack("q", [{"id": task.id, "lease_token": task.lease_token, "error": "no"}])
    tq.dlq_replay("q", ids=[task.id])
    waiter = Waiter(tq, "q", task.id, 1)
    assert waiter.result().state != "dead"
    assert waiter.ended - waiter.started >= 0.95


class Statements:
    """Every PostgreSQL connection the engine takes, with when (monotonic): a statement
    needs one (``Database.connection``, the store's own path to the server)."""

    def __init__(self, tq: Tierq, monkeypatch: pytest.MonkeyPatch) -> None:
        self.at: list[float] = []
        original = tq.db.connection

        def counted(*args: Any, **kwargs: Any) -> AbstractContextManager[Any]:
            self.at.append(time.monotonic())
            return original(*args, **kwargs)

        monkeypatch.setattr(tq.db, "connection", counted)


def a_broken_subscription_answers_early(tq: Tierq, valkey: Any) -> None:
    """The wait's connection is killed on the server: it answers as the task stands."""
    [made] = tq.enqueue("q", [{"payload": 1}])
    waiter = Waiter(tq, "q", made.id, 15)
    subscribed(valkey, "q", made.id, waiter)
    clients = [c for c in valkey.client_list() if "ssubscribe" in c.get("cmd", "")
               or int(c.get("ssub", 0) or 0) > 0]
    assert clients, valkey.client_list()
    for client in clients:
        valkey.client_kill_filter(_id=client["id"])
    assert waiter.result().state == "warm"
    assert waiter.ended - waiter.started < 10


def no_statement_while_it_waits(tq: Tierq, valkey: Any,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    statements = Statements(tq, monkeypatch)
    waiter = Waiter(tq, "q", task.id, 10)
    subscribed(valkey, "q", task.id, waiter)
    subscribed_at = time.monotonic()
    time.sleep(2)
    quiet = list(statements.at)
    acked_at = time.monotonic()
    tq.ack("q", [task])
    assert waiter.result().state == "done"
    during = [t for t in quiet if t > subscribed_at]
    assert during == [], f"{len(during)} statement(s) while the wait waited"
    before = [t for t in statements.at if t <= subscribed_at]
    assert 1 <= len(before) <= 3  # the first read (and the task's parents)
    # a wait that times out reads as it starts and as it ends, whatever its length
    [made] = tq.enqueue("q", [{"payload": 2}])
    counts = []
    for seconds in (0.5, 1.5):
        statements.at.clear()
        Waiter(tq, "q", made.id, seconds).result()
        counts.append(len(statements.at))
    assert counts[0] == counts[1] <= 3, counts
    assert acked_at > subscribed_at


def only_a_registered_wait_is_told(tq: Tierq, valkey: Any) -> None:
    """An ack publishes to the tasks a wait registered for, and to no other: a bare
    subscriber of another task's channel gets nothing, though its marker is made."""
    tq.enqueue("q", [{"payload": 1}, {"payload": 2}])
    lone, waited = tq.claim("q", max=2)
    waiter = Waiter(tq, "q", waited.id, 10)
    registered(valkey, "q", waited.id, waiter)
    with tq.ctx.warm.finished_channel("q", TENANT, str(lone.id)) as receive:
        acked = time.monotonic()
        assert sorted(tq.ack("q", [lone, waited]).acked) == sorted([lone.id, waited.id])
        assert waiter.result().state == "done" and waiter.ended - acked < 5
        assert receive(0.5) is None
    mark = tq.ctx.warm.finished_of("q", TENANT, str(lone.id))
    assert mark is not None and mark.state == "done"
    assert valkey.exists(PairKeys.of("q", TENANT).waiters) == 0  # (told, taken back)
    [made] = tq.enqueue("q", [{"payload": 3}])
    Waiter(tq, "q", made.id, 0.3).result()  # a wait that times out takes its own back
    assert valkey.exists(PairKeys.of("q", TENANT).waiters) == 0


def a_finish_before_the_registration_is_not_missed(tq: Tierq,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The task is acked once the wait is subscribed but before it registers: no message
    (no one registered), and the marker the registration's call finds answers."""
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    begin = tq.ctx.warm.wait_begin

    def late(queue: str, tenant: str, task_id: str, **kwargs: Any) -> Any:
        tq.ack("q", [task])  # (subscribed, not registered)
        return begin(queue, tenant, task_id, **kwargs)

    monkeypatch.setattr(tq.ctx.warm, "wait_begin", late)
    waiter = Waiter(tq, "q", task.id, 10)
    assert waiter.result().state == "done"
    assert waiter.ended - waiter.started < 2


def markers_gone_by_cancels_do_not_leave_a_wait_asleep(
        tq: Tierq, valkey: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a tenant's bound (``tq``'s), with the pair's allotment taken back (as a reclaim
    for the tenant's other queues does), cancels of delayed tasks have no room for their
    markers and push the ack's out of the pair (the floor: lua/task_finished.lua) between
    the wait's first read and its registration: the drop is noted, and the wait reads the
    row again and answers at once (gone: 404), not after its time."""
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    later = tq.enqueue("q", [{"payload": i, "delay_seconds": 3600} for i in range(80)])
    begin = tq.ctx.warm.wait_begin
    registering: list[float] = []

    def late(queue: str, tenant: str, task_id: str, **kwargs: Any) -> Any:
        tq.ack("q", [task])
        valkey.hset(PairKeys.of("q", TENANT).meta, "allot", 0)
        for made in later:
            tq.cancel("q", made.id, tenant=TENANT)
        registering.append(time.monotonic())
        return begin(queue, tenant, task_id, **kwargs)

    monkeypatch.setattr(tq.ctx.warm, "wait_begin", late)
    waiter = Waiter(tq, "q", task.id, 20, tenant=TENANT)
    with pytest.raises(NotFound):
        waiter.result(timeout=60)
    assert waiter.ended - registering[0] < 5  # (at once, not after its 20 s)


def a_marker_outlives_a_rotation_by_its_ttl(tq: Tierq, valkey: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A marker moved to the previous generation still answers a TTL after its ack, and is
    gone 2 TTL after its generation began."""
    monkeypatch.setattr(waits, "MARKER_TTL_MS", 2_000)
    tq.enqueue("q", [{"payload": 1}, {"payload": 2}])
    first, second = tq.claim("q", max=2)
    tq.ack("q", [first])
    acked = time.monotonic()
    time.sleep(2.2)
    tq.ack("q", [second])  # (its generation is a TTL old: renamed the previous one)
    assert markers(valkey, "q") == ({str(second.id)}, {str(first.id)})
    answer = tq.get_task("q", first.id, wait_seconds=5, tenant=TENANT)
    assert answer.state == "done" and time.monotonic() - acked >= 2.0
    time.sleep(max(0.0, acked + 4.3 - time.monotonic()))
    with pytest.raises(NotFound):
        tq.get_task("q", first.id, wait_seconds=1, tenant=TENANT)
    assert valkey.exists(PairKeys.of("q", TENANT).finished_prev) == 0


def markers_are_capped_per_pair(tq: Tierq, valkey: Any,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Two generations of at most half the cap each: the newest markers are kept."""
    monkeypatch.setattr(waits, "MARKERS_PER_PAIR", 6)
    tq.enqueue("q", [{"payload": i} for i in range(8)])
    got = tq.claim("q", max=8)
    for task in got:
        tq.ack("q", [task])
    current, previous = markers(valkey, "q")
    assert (current, previous) == ({str(t.id) for t in got[6:]},
                                   {str(t.id) for t in got[3:6]})
    tq.enqueue("q", [{"payload": i} for i in range(8)])
    tq.ack("q", tq.claim("q", max=8))  # (one call past half the cap keeps its last half)
    current, previous = markers(valkey, "q")
    assert len(current) == 3 and previous == {str(t.id) for t in got[6:]}
    k = PairKeys.of("q", TENANT)
    for key in (k.finished, k.finished_prev):
        assert 0 < valkey.pttl(key) <= 2 * waits.MARKER_TTL_MS
