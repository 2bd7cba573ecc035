"""`tierq dev` runs the dispatcher too: a queue whose consumer is a module:function on the
gateway's Python path is served in-process, and a task that becomes ready while no
dispatcher runs wakes one at once (here the schedule's period is two minutes, so only a
wake can explain a delivery within seconds)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from tests.dispatch.support import task_states
from tests.support.dev_server import REPO, start_dev_server
from tierq.client import Client
from tierq.client.errors import InvalidInputError
from tierq.logic.wake import FLAG_KEY

pytestmark = pytest.mark.usefixtures("clean_stores")


def wait_for(check: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, f"{what}: not within {timeout}s"
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.timeout(180)
def test_the_local_stack_dispatches_and_wakes_an_idle_dispatcher(
        database_url: str, valkey_url: str,
        pg: psycopg.Connection[Any], valkey: redis.Redis) -> None:
    log = Path(tempfile.mkdtemp(prefix="tierq-test-dispatch-")) / "tierq-dev.log"
    server = start_dev_server(
        database_url, valkey_url, log,
        extra_env={"PYTHONPATH": str(REPO), "TIERQ_SETTINGS_CACHE_SECONDS": "0",
                   "TIERQ_DISPATCHER_IDLE_SECONDS": "1"},
        args=("--schedule-period", "120"))
    try:
        assert "schedule DispatcherSchedule: dispatcher every 120s" in server.log()
        with Client(server.url) as client:
            with pytest.raises(InvalidInputError, match="cannot import no_such_module"):
                client.put_queue("orders", {"consumer": {"function": "no_such_module:f"}})
            client.put_queue("orders", {"consumer": {
                "function": "tests.dispatch.consumers:keep", "batch_size": 10}})
            # the first scheduled dispatcher finds nothing, goes idle and lets go of the flag
            wait_for(lambda: valkey.get(FLAG_KEY) is None, 30, "the dispatcher going idle")
            time.sleep(0.5)
            client.enqueue("orders", [{"payload": {"n": i}} for i in range(25)])
            took = wait_for(lambda: task_states(pg, "orders").total() == 0, 30,
                            "the tasks being acked")
            assert took < 20  # long before the schedule's next run
    finally:
        assert server.stop() == 0, server.log()[-3000:]
