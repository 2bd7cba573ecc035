"""What a stopping ``Worker`` sends, seen on the wire: a recording proxy in front of the real
local API. Past the grace it releases the tasks not started and sends nothing more about the
ones still running — no nack (which would hand them to another worker at once while their
handlers run on), no heartbeat (so their leases run out and the reaper counts the attempt),
no late outcome. Tasks a long poll brings back after the stop began are released, never
started."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.client.scripted_server import DroppingProxy
from tests.support.local_api import QueueNames
from tests.support.polling import eventually
from tests.support.stopping_worker import PausedAtAbandonment, reaped
from tierq.client import Client
from tierq.client.worker import Worker
from tierq.models import ClaimedTask

ONE_CLIENT = True  # the Worker takes a blocking Client (the AsyncWorker: tests/worker)


@pytest.fixture
def recorded(api_url: str, clean_stores: None) -> Iterator[DroppingProxy]:
    proxy = DroppingProxy(api_url, drop=False)
    try:
        yield proxy
    finally:
        proxy.close()


def posts(proxy: DroppingProxy, route: str, since: float = 0.0) -> int:
    return sum(1 for r in proxy.requests
               if r.method == "POST" and r.path.endswith("/" + route) and r.at >= since)


class OneHandlerThread(PausedAtAbandonment):
    """A Worker that claims for two but runs its handler on one thread: the second task it
    holds stays prefetched, never started."""

    def _execute_loop(self) -> None:
        if threading.current_thread().name == "tierq-worker-0":
            super()._execute_loop()


def test_a_stop_past_the_grace_releases_the_waiting_and_leaves_the_running_alone(
        recorded: DroppingProxy, api: Client, names: QueueNames) -> None:
    """Looked at while the stop lets the tasks go, with the heartbeat and report threads still
    running: for 4.5 s heartbeats fall due every 2 s, yet none is sent for the abandoned
    lease; then its handler returns, and its outcome is not reported."""
    queue = names["stop-on-the-wire"]
    ids = [o.id for o in api.enqueue(queue, [{"payload": i} for i in range(2)])]
    entered, leave = threading.Event(), threading.Event()

    def blocked(task: ClaimedTask) -> Any:
        entered.set()
        leave.wait(60)
        return "late"

    with Client(recorded.url) as through_proxy:
        worker = OneHandlerThread(through_proxy, queue, blocked, concurrency=2,
                                  lease_seconds=8, wait_seconds=0.2, grace_seconds=0.3,
                                  heartbeat_fraction=0.25, install_signal_handlers=False,
                                  leave=leave, hold=4.5)
        thread = threading.Thread(target=worker.run)
        try:
            thread.start()
            assert entered.wait(30)
            eventually(lambda: worker.held == 2, timeout=30, what="both tasks claimed")
            eventually(lambda: posts(recorded, "heartbeats") >= 1, timeout=30,
                       what="a heartbeat while the handler runs")
            worker.stop()
            thread.join(timeout=60)
            assert not thread.is_alive()
        finally:
            leave.set()
    assert worker.handed_over.is_set()  # the handler returned while the reporter ran
    stats = worker.stats
    assert (stats.released, stats.abandoned, stats.acked) == (1, 1, 0)
    assert posts(recorded, "releases") == 1
    assert posts(recorded, "acks") == 0 and posts(recorded, "nacks") == 0
    # (a heartbeat already under way when the leases were let go may still arrive)
    assert worker.abandoned_at is not None
    assert posts(recorded, "heartbeats", since=worker.abandoned_at + 0.5) == 0
    running = [i for i in ids if api.get_task(queue, i).state == "leased"]
    [waiting_id] = [i for i in ids if i not in running]
    assert (api.get_task(queue, waiting_id).state,
            api.get_task(queue, waiting_id).attempts) == ("warm", 0)
    [running_id] = running
    task = reaped(api, queue, running_id)  # (the abandoned lease ran out, its attempt counted)
    assert (task.attempts, task.last_error) == (1, "lease expired (attempt 1)")


class ClaimWatched(Client):
    """A client that says when the Worker starts a claim."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.claiming = threading.Event()

    def claim(self, queue: str, *args: Any, **kwargs: Any) -> list[ClaimedTask]:
        self.claiming.set()
        return super().claim(queue, *args, **kwargs)


def test_tasks_a_long_poll_brings_back_after_the_stop_are_released_not_started(
        recorded: DroppingProxy, api: Client, names: QueueNames) -> None:
    queue = names["late-claim"]
    ran: list[ClaimedTask] = []
    with ClaimWatched(recorded.url) as watched:
        worker = Worker(watched, queue, ran.append, concurrency=2, lease_seconds=60,
                        wait_seconds=10, grace_seconds=5, install_signal_handlers=False)
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            assert watched.claiming.wait(30)  # a long poll on an empty queue
            worker.stop()
            task_id = api.enqueue_one(queue, "late").id  # it brings this back
            thread.join(timeout=30)
            assert not thread.is_alive()
        finally:
            worker.stop(abort=True)
    assert ran == []
    stats = worker.stats
    assert (stats.claimed, stats.released, stats.acked) == (1, 1, 0)
    assert posts(recorded, "releases") == 1 and posts(recorded, "acks") == 0
    task = api.get_task(queue, task_id)
    assert (task.state, task.attempts) == ("warm", 0)
