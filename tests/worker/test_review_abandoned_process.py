"""Review: a task left to its lease at shutdown must not run on another worker while the
stopping process still runs it. ``tierq worker`` returns from ``Worker.run()`` but the process
does not exit while a handler's non-daemon threads (a ThreadPoolExecutor's) still work: the
lease runs out meanwhile and another claimer gets the task — two executions at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.local_api import QueueNames
from tests.worker.test_worker import REPO, journal_lines
from tierq.client import Client
from tierq.models import ClaimedTask


def test_an_abandoned_task_is_not_claimed_while_the_stopping_process_still_runs_it(
        api: Client, api_url: str, names: QueueNames, tmp_path: Path) -> None:
    queue = names["pooled"]
    task_id = api.enqueue_one(queue, {"seconds": 25}).id
    journal = tmp_path / "journal"
    env = {**os.environ, "TIERQ_TEST_JOURNAL": str(journal)}
    command = [sys.executable, "-c", "from tierq.cli import app; app()", "worker", queue,
               "tests.worker.handlers:pooled", "--url", api_url, "--concurrency", "1",
               "--wait", "0.5", "--grace", "0.5", "--lease-seconds", "3", "--app-dir",
               str(REPO), "--name", "pooled-test"]
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not journal_lines(journal, "start") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert journal_lines(journal, "start") == [str(task_id)]
        process.send_signal(signal.SIGTERM)
        # another worker polls for the task, as a fleet's other members would
        deadline = time.monotonic() + 20
        taken: list[ClaimedTask] = []
        while not taken and time.monotonic() < deadline:
            taken = api.claim(queue, max=1, lease_seconds=60)
            time.sleep(0.2)
        assert taken, "the abandoned lease never ran out"
        # the first process must be gone by the time anyone else gets the task
        assert process.poll() is not None, (
            "the task was handed to another worker while the stopped worker's process was "
            "still running its handler")
    finally:
        process.kill()
        process.communicate(timeout=30)
