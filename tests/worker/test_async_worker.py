"""``AsyncWorker`` on the local stack, through the Worker's own matrix: results acked,
failures retried or dead-lettered, heartbeats keeping a lease, the concurrency limit, a stop
past the grace leaving running tasks to their leases and releasing the unstarted ones,
parents reaching a fan-in handler, a handler cancelled on its own (a failure, not a stop),
and ``tierq worker`` running a coroutine handler."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.client.scripted_server import DroppingProxy
from tests.client.test_worker_claims_with_acks import acks_with_claims
from tests.client.test_worker_stop import posts
from tests.support.local_api import QueueNames
from tests.support.polling import eventually
from tests.worker.test_worker import (
    all_finished,
    check_abandoned_lease,
    check_doubles,
    check_fan_in,
    check_flaky,
    check_left_to_leases,
    check_let_go,
    check_progress,
    double,
    enqueue_doubles,
    enqueue_fan_in,
    enqueue_flaky,
    fan_in,
    flaky,
    journal_lines,
    seen_over_http,
    start_worker_process,
    unfinished,
)
from tierq.client import AsyncClient, Client
from tierq.client.worker import AsyncWorker, WorkerStats, WorkerTask
from tierq.client.worker.worker import HeldLease
from tierq.models import ClaimedTask


def run_worker(url: str, queue: str, handler: Any, **options: Any) -> WorkerStats:
    """Run an AsyncWorker to its end (``burst`` or a stop), on a loop of its own."""

    async def main() -> WorkerStats:
        async with AsyncClient(url) as client:
            return await AsyncWorker(client, queue, handler, install_signal_handlers=False,
                                     **options).run()

    return asyncio.run(main())


class Background:
    """An AsyncWorker run by ``asyncio.run`` on a thread of its own (``worker_class`` and its
    arguments), so that the test can look at the stack while it works and stop it."""

    def __init__(self, url: str, queue: str, handler: Any,
                 worker_class: type[AsyncWorker] = AsyncWorker, **options: Any) -> None:
        self.made = threading.Event()
        self.worker: AsyncWorker | None = None
        self.stats: WorkerStats | None = None

        async def main() -> None:
            async with AsyncClient(url) as client:
                self.worker = worker_class(client, queue, handler,
                                           install_signal_handlers=False, **options)
                self.made.set()
                self.stats = await self.worker.run()

        self.thread = threading.Thread(target=asyncio.run, args=(main(),))
        self.thread.start()
        assert self.made.wait(30)

    @property
    def running(self) -> AsyncWorker:
        assert self.worker is not None
        return self.worker

    def stop(self) -> WorkerStats:
        self.running.stop()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        assert self.stats is not None
        return self.stats


def test_a_function_that_is_not_a_coroutine_function_is_refused() -> None:
    with pytest.raises(TypeError, match="not a coroutine function"):
        AsyncWorker(AsyncClient("http://127.0.0.1:9"), "q", lambda task: None)


def test_results_are_acked(api: Client, api_url: str, names: QueueNames) -> None:
    queue = names["work"]
    kept, dropped = enqueue_doubles(api, queue)

    async def handle(task: ClaimedTask) -> Any:
        await asyncio.sleep(0)
        return double(task)

    stats = run_worker(api_url, queue, handle, concurrency=4, wait_seconds=0.5, burst=True)
    check_doubles(api, queue, kept, dropped, stats)


def test_exceptions_are_nacked_retried_and_dead_lettered(api: Client, api_url: str,
                                                         names: QueueNames) -> None:
    queue = names["flaky"]
    ids = enqueue_flaky(api, queue)

    async def handle(task: ClaimedTask) -> Any:
        await asyncio.sleep(0)
        return flaky(task)

    background = Background(api_url, queue, handle, concurrency=2, wait_seconds=0.5)
    try:
        eventually(lambda: all_finished(api, queue, ids.values())
                   and background.running.held == 0, timeout=30, what="every task settled")
    finally:
        stats = background.stop()
    check_flaky(api, queue, ids, stats)


def test_a_handler_cancelled_on_its_own_has_failed_its_attempt(
        api: Client, api_url: str, names: QueueNames) -> None:
    """A CancelledError out of the handler (here: the task it awaited was cancelled), while
    the worker is not stopping, is a failure like any other: nacked, retried with the
    queue's backoff; the worker goes on."""
    queue = names["cancelled"]
    api.put_queue(queue, {"max_attempts": 2, "backoff": {
        "kind": "fixed", "base_seconds": 0.2, "cap_seconds": 0.2, "jitter": 0}})
    task_id = api.enqueue_one(queue, "x").id

    async def handle(task: ClaimedTask) -> Any:
        if task.attempt == 1:
            inner = asyncio.create_task(asyncio.sleep(60))
            asyncio.get_running_loop().call_later(0.05, inner.cancel)
            await inner
        return {"attempt": task.attempt}

    background = Background(api_url, queue, handle, concurrency=1, wait_seconds=0.3)
    try:
        eventually(lambda: api.get_task(queue, task_id).state == "done", timeout=30,
                   what="the second attempt done")
    finally:
        stats = background.stop()
    task = api.get_task(queue, task_id)
    assert (task.attempts, task.result) == (2, {"attempt": 2})
    assert task.last_error is not None and task.last_error.startswith("CancelledError")
    assert (stats.retried, stats.acked, stats.abandoned) == (1, 1, 0)


def test_heartbeats_keep_a_long_tasks_lease(api: Client, api_url: str,
                                            names: QueueNames) -> None:
    """Without heartbeats a 1-second lease would be lost while the 4-second task runs (the
    Worker's test shows the reaper taking it); the AsyncWorker keeps it."""
    queue = names["long"]
    task_id = api.enqueue_one(queue, {"seconds": 4}).id

    async def long_task(task: ClaimedTask) -> Any:
        await asyncio.sleep(task.payload["seconds"])
        return "finished"

    stats = run_worker(api_url, queue, long_task, concurrency=1, lease_seconds=1,
                       wait_seconds=0.5, burst=True)
    assert (stats.acked, stats.rejected, stats.leases_lost) == (1, 0, 0)
    assert stats.heartbeats >= 4  # every third of a second for four seconds, at least
    task = api.get_task(queue, task_id)
    assert (task.state, task.attempts, task.result) == ("done", 1, "finished")


def test_progress_rides_the_next_heartbeat_and_stays_with_the_task(
        api: Client, api_url: str, names: QueueNames) -> None:
    queue = names["progress"]
    task_id = api.enqueue_one(queue, "work").id
    seen: list[Any] = []

    async def reporting(task: WorkerTask) -> Any:
        with pytest.raises(ValueError, match="4096"):
            task.set_progress("x" * 5000)
        for step in (1, 2):
            task.set_progress({"step": step})
            seen.append(await asyncio.to_thread(
                eventually, lambda s=step: seen_over_http(api, queue, task.id, {"step": s}),
                timeout=10, what=f"step {step} over HTTP"))
        return "finished"

    stats = run_worker(api_url, queue, reporting, concurrency=1, lease_seconds=60,
                       wait_seconds=0.5, burst=True)
    assert seen == [True, True]
    check_progress(api, queue, task_id, stats)


def test_the_concurrency_limit_is_honoured(api: Client, api_url: str,
                                           names: QueueNames) -> None:
    queue = names["limited"]
    api.enqueue(queue, [{"payload": i} for i in range(24)])
    now = [0]
    most = [0]

    async def handle(task: ClaimedTask) -> Any:
        now[0] += 1
        most[0] = max(most[0], now[0])
        await asyncio.sleep(0.2)
        now[0] -= 1
        return task.payload

    stats = run_worker(api_url, queue, handle, concurrency=3, wait_seconds=0.5, burst=True)
    assert (stats.claimed, stats.acked) == (24, 24)
    assert most[0] == 3  # reached, never passed
    assert unfinished(api, queue) == 0


def test_a_busy_worker_s_acks_claim_the_slots_they_free(
        recorded: DroppingProxy, api: Client, names: QueueNames) -> None:
    """``claim_with_acks``: the acks' claims seen on the wire; never more leases held than
    ``concurrency`` (the claim loop and the reporter reserve their slots in the ledger)."""
    queue = names["acks-claim"]
    api.enqueue(queue, [{"payload": i} for i in range(40)])
    held: list[int] = []
    worker: list[AsyncWorker] = []

    async def handle(task: ClaimedTask) -> Any:
        held.append(worker[0].held)
        await asyncio.sleep(0)
        return None

    async def main() -> WorkerStats:
        async with AsyncClient(recorded.url) as client:
            worker.append(AsyncWorker(client, queue, handle, concurrency=4, burst=True,
                                      wait_seconds=1, install_signal_handlers=False))
            return await worker[0].run()

    stats = asyncio.run(main())
    assert (stats.claimed, stats.acked) == (40, 40)
    assert acks_with_claims(recorded) >= 1 and max(held) <= 4
    assert unfinished(api, queue) == 0


class HeldAtAbandonment(AsyncWorker):
    """At the end of the grace, with the unfinished leases marked let go: waits ``hold``
    seconds (heartbeats fall due meanwhile, the reporter and heartbeat tasks still running)
    before letting them go. ``abandoned_at`` (``time.monotonic()``) is when the pause began."""

    hold = 4.5
    abandoned_at: float | None = None

    async def _let_go(self, leases: list[HeldLease]) -> None:
        if any(lease.started_at is not None for lease in leases):
            self.abandoned_at = time.monotonic()
            await asyncio.sleep(self.hold)
        await super()._let_go(leases)


def test_a_stop_past_the_grace_leaves_the_running_task_to_its_lease(
        recorded: DroppingProxy, api: Client, names: QueueNames) -> None:
    """Past the grace: no nack, no heartbeat for the running task (for 4.5 s heartbeats fall
    due every 2 s), its handler cancelled and nothing reported for it; nobody else gets the
    task while its lease holds; once it runs out the reaper counts the attempt."""
    queue = names["stop-on-the-wire"]
    task_id = api.enqueue_one(queue, "long").id
    entered, cancelled = threading.Event(), threading.Event()

    async def blocked(task: ClaimedTask) -> Any:
        entered.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    background = Background(recorded.url, queue, blocked, worker_class=HeldAtAbandonment,
                            concurrency=1, lease_seconds=8, wait_seconds=0.2,
                            grace_seconds=0.3, heartbeat_fraction=0.25)
    try:
        assert entered.wait(30)
        eventually(lambda: posts(recorded, "heartbeats") >= 1, timeout=30,
                   what="a heartbeat while the handler runs")
    finally:
        stats = background.stop()
    assert cancelled.is_set()
    assert (stats.abandoned, stats.acked, stats.retried, stats.released) == (1, 0, 0, 0)
    assert posts(recorded, "acks") == 0 and posts(recorded, "nacks") == 0
    worker = background.running
    assert isinstance(worker, HeldAtAbandonment) and worker.abandoned_at is not None
    # (a heartbeat already under way when the lease was let go may still arrive)
    assert posts(recorded, "heartbeats", since=worker.abandoned_at + 0.5) == 0
    check_abandoned_lease(api, queue, task_id)


def test_let_go_releases_tasks_not_started_and_abandons_running_ones(
        api: Client, api_url: str, names: QueueNames) -> None:
    queue = names["giveback"]
    api.put_queue(queue, {"max_attempts": 1})
    made = [o.id for o in api.enqueue(queue, [{"payload": i} for i in range(3)])]
    not_started, running = api.claim(queue, max=2, lease_seconds=10)

    async def nothing(task: ClaimedTask) -> None:
        return None

    async def let_go() -> WorkerStats:
        async with AsyncClient(api_url) as client:
            worker = AsyncWorker(client, queue, nothing, install_signal_handlers=False)
            now = time.monotonic()
            await worker._let_go([HeldLease(not_started, extended_at=now, let_go=True),
                                  HeldLease(running, extended_at=now, started_at=now,
                                            let_go=True)])
            assert worker.held == 0
            return worker.stats

    check_let_go(api, queue, made, not_started, running, asyncio.run(let_go()))


def test_tasks_a_long_poll_brings_back_after_the_stop_are_released_not_started(
        recorded: DroppingProxy, api: Client, names: QueueNames) -> None:
    queue = names["late-claim"]
    ran: list[ClaimedTask] = []

    async def handle(task: ClaimedTask) -> None:
        ran.append(task)

    background = Background(recorded.url, queue, handle, concurrency=2, lease_seconds=60,
                            wait_seconds=10, grace_seconds=5)
    eventually(lambda: posts(recorded, "claims") >= 1, timeout=30,
               what="a long poll on the empty queue")
    time.sleep(0.3)  # the claim reached the API and waits there
    background.running.stop()
    task_id = api.enqueue_one(queue, "late").id  # the long poll brings this back
    stats = background.stop()
    assert ran == []
    assert (stats.claimed, stats.released, stats.acked) == (1, 1, 0)
    assert posts(recorded, "releases") == 1 and posts(recorded, "acks") == 0
    task = api.get_task(queue, task_id)
    assert (task.state, task.attempts) == ("warm", 0)


def test_a_fan_in_handler_sees_its_parents_results(api: Client, api_url: str,
                                                   names: QueueNames) -> None:
    queue = names["fan"]
    join = enqueue_fan_in(api, queue)
    sums: list[int] = []

    async def handle(task: ClaimedTask) -> Any:
        await asyncio.sleep(0)
        return fan_in(task, sums)

    stats = run_worker(api_url, queue, handle, concurrency=4, wait_seconds=0.5, burst=True)
    check_fan_in(api, queue, join, sums, stats)


def test_tierq_worker_runs_a_coroutine_handler_and_stops_past_the_grace(
        api: Client, api_url: str, names: QueueNames, tmp_path: Path) -> None:
    """``tierq worker`` with an ``async def`` handler runs the AsyncWorker: concurrency 2,
    then SIGTERM with a grace of 0.5 s: the two running tasks are left leased (no nack), the
    other three released, and the process exits 0 with its stats written."""
    queue = names["cli-async"]
    api.put_queue(queue, {"lease_seconds": 8})
    ids = [o.id for o in api.enqueue(queue, [{"payload": {"seconds": 60}} for _ in range(5)])]
    journal = tmp_path / "journal"
    process = start_worker_process(api_url, queue, journal, grace=0.5, concurrency=2,
                                   handler="slow_async")
    try:
        eventually(lambda: len(journal_lines(journal, "start")) == 2, timeout=30,
                   what="two tasks running")
        time.sleep(0.5)  # no third one starts
        assert len(journal_lines(journal, "start")) == 2
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    assert "abandoned" in text and "left to their leases" in text
    running, others = check_left_to_leases(api, queue, ids, journal)
    assert len(running) == 2 and all(t.attempt == 1 for t in others)


def test_a_cancelled_run_stops_without_a_grace(api: Client, api_url: str,
                                               names: QueueNames) -> None:
    """The task running ``run()`` cancelled (here by ``asyncio.wait_for``): a stop with no
    grace, whatever ``grace_seconds`` says; the running handler is cancelled and left to
    its lease (no nack), and the cancellation goes on up."""
    queue = names["cancelled-run"]
    task_id = api.enqueue_one(queue, "long").id
    cancelled = threading.Event()

    async def blocked(task: ClaimedTask) -> Any:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def main() -> tuple[float, WorkerStats]:
        async with AsyncClient(api_url) as client:
            worker = AsyncWorker(client, queue, blocked, concurrency=1, lease_seconds=30,
                                 wait_seconds=0.2, grace_seconds=60,
                                 install_signal_handlers=False)
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(worker.run(), 2)
            return time.monotonic() - started, worker.stats

    took, stats = asyncio.run(main())
    assert took < 10  # not the 60-second grace
    assert cancelled.is_set()
    assert (stats.claimed, stats.abandoned, stats.acked, stats.retried) == (1, 1, 0, 0)
    task = api.get_task(queue, task_id)
    assert (task.state, task.last_error) == ("leased", None)
