"""What a stopping ``Worker`` sends, seen on the wire: a recording proxy in front of the real
local API. Past the grace it releases the tasks not started and sends nothing more about the
ones still running — no nack (which would hand them to another worker at once while their
handlers run on) and no heartbeat (so their leases run out and the reaper counts the
attempt)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.client.scripted_server import DroppingProxy
from tests.support.local_api import QueueNames
from tests.support.polling import eventually
from tierq.client import Client
from tierq.client.worker import Worker
from tierq.models import ClaimedTask


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


class OneHandlerThread(Worker):
    """A Worker that claims for two but runs its handler on one thread: the second task it
    holds stays prefetched, never started."""

    def _execute_loop(self) -> None:
        if threading.current_thread().name == "tierq-worker-0":
            super()._execute_loop()


def test_a_stop_past_the_grace_releases_the_waiting_and_leaves_the_running_alone(
        recorded: DroppingProxy, api: Client, names: QueueNames) -> None:
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
                                  heartbeat_fraction=0.25, install_signal_handlers=False)
        thread = threading.Thread(target=worker.run)
        try:
            thread.start()
            assert entered.wait(30)
            eventually(lambda: worker.held == 2, timeout=30, what="both tasks claimed")
            eventually(lambda: posts(recorded, "heartbeats") >= 1, timeout=30,
                       what="a heartbeat while the handler runs")
            worker.stop()
            thread.join(timeout=30)
            assert not thread.is_alive()
            returned = time.monotonic()
            stats = worker.stats
            assert (stats.released, stats.abandoned) == (1, 1)
            assert posts(recorded, "releases") == 1
            assert posts(recorded, "nacks") == 0
            [running] = api.running(queue)
            [waiting_id] = [i for i in ids if i != running.id]
            assert api.get_task(queue, waiting_id).state == "warm"
            assert api.get_task(queue, waiting_id).attempts == 0
            eventually(lambda: api.get_task(queue, running.id).state != "leased", timeout=30,
                       what="the abandoned lease ran out")
        finally:
            leave.set()
        time.sleep(0.3)  # the handler has returned: nothing is reported for it
        assert posts(recorded, "heartbeats", since=returned) == 0
        assert posts(recorded, "acks") == 0 and posts(recorded, "nacks") == 0
    task = api.get_task(queue, running.id)
    assert (task.attempts, task.last_error) == (1, "lease expired (attempt 1)")
