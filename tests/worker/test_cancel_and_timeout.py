"""The Worker and the AsyncWorker on the local stack: a running task cancelled over HTTP
(its handler sees ``task.cancelled`` within one heartbeat interval, nothing is retried), and
a hung handler past its ``timeout_seconds`` (its attempt fails as ``timeout`` at the limit,
whatever its heartbeats), with thread and process isolation."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.support.local_api import QueueNames
from tests.support.polling import eventually
from tests.worker import handlers
from tests.worker.test_async_worker import Background
from tierq.client import Client
from tierq.client.worker import Worker, WorkerStats
from tierq.models import ClaimedTask, TaskView

LEASE = 3  # heartbeats every second (a third of it)
# a queue whose failed attempts wait long before their retry: a test sees one attempt only
SLOW_RETRY = {"lease_seconds": LEASE, "max_attempts": 3, "backoff": {
    "kind": "fixed", "base_seconds": 60, "cap_seconds": 60, "jitter": 0}}


class Threaded:
    """A Worker run on a thread of its own, stopped by the test."""

    def __init__(self, api: Client, queue: str, handler: Any, **options: Any) -> None:
        self.worker = Worker(api, queue, handler, install_signal_handlers=False,
                             wait_seconds=0.2, **options)
        self.stats: WorkerStats | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        self.stats = self.worker.run()

    def stop(self) -> WorkerStats:
        self.worker.stop()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive() and self.stats is not None
        return self.stats


def timed_out(api: Client, queue: str, task_id: UUID) -> TaskView | None:
    task = api.get_task(queue, task_id)
    return task if task.attempts == 1 and (task.last_error or "").startswith("timeout") \
        else None


def journal_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


# -- cancel ---------------------------------------------------------------------------------


def test_a_running_task_cancelled_sees_its_signal_within_a_heartbeat(
        api: Client, names: QueueNames) -> None:
    queue = names["cancel"]
    api.put_queue(queue, SLOW_RETRY)
    started = threading.Event()
    seen: dict[str, float] = {}
    runs: list[int] = []

    def handler(task: ClaimedTask) -> str:
        runs.append(task.attempt)
        started.set()
        signal = task.cancelled
        assert isinstance(signal, threading.Event)
        if signal.wait(20):
            seen["at"] = time.monotonic()
            seen["reason"] = 1.0 if task.stop_reason == "cancelled" else 0.0
        return "stopped"

    worker = Threaded(api, queue, handler, concurrency=1)
    try:
        task_id = api.enqueue_one(queue, "work").id
        assert started.wait(20)
        time.sleep(0.2)
        cancelled_at = time.monotonic()
        assert api.cancel(queue, task_id).state == "cancelled"
        eventually(lambda: "at" in seen, timeout=LEASE + 2, what="the handler saw the cancel")
        # within one heartbeat interval (a third of the lease), plus a request's time
        assert seen["at"] - cancelled_at <= LEASE / 3 + 0.5
        assert seen["reason"] == 1.0
        time.sleep(1.5)  # nothing runs again
    finally:
        stats = worker.stop()
    assert runs == [1]
    assert (stats.cancelled, stats.acked, stats.retried, stats.rejected) == (1, 0, 0, 0)
    task = api.get_task(queue, task_id)
    assert (task.state, task.attempts) == ("cancelled", 0)
    assert not api.running(queue)


def test_a_handler_given_a_big_payload_sees_its_cancel_too(
        api: Client, api_url: str, names: QueueNames) -> None:
    """The payload fetched for the handler goes on the task its lease signals (a copy of the
    task would never see ``task.cancelled`` set)."""
    queue = names["cancel_big"]
    api.put_queue(queue, SLOW_RETRY)
    seen: list[str | None] = []
    started = threading.Event()

    def handler(task: ClaimedTask) -> None:
        assert task.payload == "y" * 200
        started.set()
        if task.cancelled.wait(LEASE + 5):
            seen.append(task.stop_reason)

    with Client(api_url, offload_over=100) as eager:
        task_id = eager.enqueue_one(queue, "y" * 200).id
    worker = Threaded(api, queue, handler, concurrency=1)
    try:
        assert started.wait(20)
        api.cancel(queue, task_id)
        eventually(lambda: seen, timeout=LEASE + 2, what="the handler saw the cancel")
    finally:
        stats = worker.stop()
    assert seen == ["cancelled"]
    assert (stats.cancelled, stats.acked, stats.retried) == (1, 0, 0)


def test_a_cancelled_task_is_counted_when_its_ack_says_so(api: Client,
                                                         names: QueueNames) -> None:
    """A handler that finishes before any heartbeat: its ack is refused as cancelled."""
    queue = names["cancel_ack"]
    api.put_queue(queue, {"lease_seconds": 30})
    task_id = api.enqueue_one(queue, "work").id

    def handler(task: ClaimedTask) -> str:
        api.cancel(queue, task.id)
        return "done anyway"

    stats = Worker(api, queue, handler, concurrency=1, wait_seconds=0.2, burst=True,
                   install_signal_handlers=False).run()
    assert (stats.cancelled, stats.acked, stats.rejected) == (1, 0, 1)
    assert api.get_task(queue, task_id).state == "cancelled"


def test_a_cancelled_process_handler_stops_or_is_killed(
        api: Client, names: QueueNames, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = names["cancel_proc"]
    api.put_queue(queue, SLOW_RETRY)
    journal = tmp_path / "journal"
    monkeypatch.setenv("TIERQ_TEST_JOURNAL", str(journal))
    polite = api.enqueue_one(queue, {"seconds": 60}).id
    worker = Threaded(api, queue, handlers.until_cancelled, concurrency=1,
                      isolation="process", cancel_grace_seconds=1.0)
    try:
        eventually(lambda: f"start {polite} 1" in journal_lines(journal), timeout=30,
                   what="the handler started in its process")
        api.cancel(queue, polite)
        eventually(lambda: f"stopped {polite} 1" in journal_lines(journal), timeout=LEASE + 2,
                   what="the handler in its process saw the cancel")
    finally:
        stats = worker.stop()
    assert (stats.cancelled, stats.killed, stats.acked) == (1, 0, 0)
    assert api.get_task(queue, polite).state == "cancelled"


# -- time limits ----------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_hung_handler_fails_its_attempt_at_its_time_limit(
        api: Client, names: QueueNames, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        isolation: str) -> None:
    queue = names[f"hung_{isolation}"]
    api.put_queue(queue, SLOW_RETRY)
    journal = tmp_path / "journal"
    monkeypatch.setenv("TIERQ_TEST_JOURNAL", str(journal))
    # hangs 5 s (thread: its slot is lost until then), heartbeated every second meanwhile
    hung = api.enqueue_one(queue, {"seconds": 5}, timeout_seconds=2).id
    worker = Threaded(api, queue, handlers.hangs, concurrency=1, isolation=isolation)
    try:
        eventually(lambda: f"start {hung} 1" in journal_lines(journal), timeout=30,
                   what="the handler started")
        [lease] = api.running(queue)
        after = api.enqueue_one(queue, {"seconds": 0}).id  # waits for the only slot
        task = eventually(lambda: timed_out(api, queue, hung), timeout=10,
                          what="the attempt failed at its time limit")
        failed_after = time.time() - lease.started_at.timestamp()  # (from its claim)
        # at the limit (the reaper runs every 0.5 s here), whatever the heartbeats
        assert 1.5 <= failed_after <= 3.5, failed_after
        assert task.state == "delayed"  # retried after the queue's backoff (60 s)
        eventually(lambda: f"finish {after} 1" in journal_lines(journal), timeout=30,
                   what="the next task ran")
    finally:
        stats = worker.stop()
    lines = journal_lines(journal)
    next_start = lines.index(f"start {after} 1")
    if isolation == "thread":
        # the hung handler kept its slot until it returned
        assert lines.index(f"finish {hung} 1") < next_start
        assert stats.killed == 0
    else:
        assert f"finish {hung} 1" not in lines  # killed at its limit
        assert stats.killed == 1
    assert (stats.timed_out, stats.acked, stats.retried) == (1, 1, 0)
    assert api.get_task(queue, hung).attempts == 1


def test_a_handler_that_is_not_picklable_is_refused_for_process_isolation(
        api: Client) -> None:
    with pytest.raises(ValueError, match="isolation='process'"):
        Worker(api, "q", lambda task: None, isolation="process")
    with pytest.raises(ValueError, match="isolation"):
        Worker(api, "q", handlers.hangs, isolation="fiber")


# -- the AsyncWorker ------------------------------------------------------------------------


def test_the_async_worker_signals_a_cancel_and_stops_a_hung_coroutine_at_its_limit(
        api: Client, api_url: str, names: QueueNames) -> None:
    queue = names["async"]
    api.put_queue(queue, SLOW_RETRY)
    events: dict[str, float] = {}

    async def handler(task: ClaimedTask) -> str:
        events[f"start {task.payload}"] = time.monotonic()
        if task.payload == "cancel me":
            signal = task.cancelled
            assert isinstance(signal, asyncio.Event)
            await asyncio.wait_for(signal.wait(), 20)
            events["cancel seen"] = time.monotonic()
            return "stopped"
        try:
            await asyncio.sleep(30)  # hung past its limit
        except asyncio.CancelledError:
            events["hung cancelled"] = time.monotonic()
            raise
        return "finished"

    worker = Background(api_url, queue, handler, concurrency=2, wait_seconds=0.2)
    try:
        polite = api.enqueue_one(queue, "cancel me").id
        hung = api.enqueue_one(queue, "hangs", timeout_seconds=2).id
        eventually(lambda: "start cancel me" in events and "start hangs" in events,
                   timeout=20, what="both handlers started")
        cancelled_at = time.monotonic()
        api.cancel(queue, polite)
        eventually(lambda: "cancel seen" in events, timeout=LEASE + 2,
                   what="the coroutine saw the cancel")
        assert events["cancel seen"] - cancelled_at <= LEASE / 3 + 0.5
        task = eventually(lambda: timed_out(api, queue, hung), timeout=10,
                          what="the attempt failed at its time limit")
        assert task.state == "delayed"
        assert 1.5 <= events["hung cancelled"] - events["start hangs"] <= 2.6
    finally:
        stats = worker.stop()
    assert (stats.cancelled, stats.timed_out, stats.killed) == (1, 1, 1)
    assert (stats.acked, stats.retried) == (0, 0)
    assert api.get_task(queue, polite).state == "cancelled"
