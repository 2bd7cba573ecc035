"""``Worker`` on the local stack: results acked, failures nacked and retried (or
dead-lettered), heartbeats keeping a long task's lease, and SIGTERM mid-task losing
nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.support.local_api import QueueNames
from tests.support.polling import eventually
from tests.support.stopping_worker import PausedAtAbandonment, reaped
from tierq.client import Client, NotFoundError
from tierq.client.worker import (
    PermanentError,
    RetryableError,
    Worker,
    WorkerStats,
    WorkerTask,
)
from tierq.client.worker.worker import HeldLease, describe
from tierq.models import ClaimedTask

REPO = Path(__file__).resolve().parents[2]


def unfinished(api: Client, queue: str) -> int:
    c = api.get_queue(queue).counts
    return c.warm + c.cold + c.delayed + c.leased


def all_finished(api: Client, queue: str, ids: Iterable[UUID]) -> bool:
    """Whether each task is done or dead, read task by task: the queue's counts can read 0
    for a moment while a retried task is between its row turning ready and its push."""
    return all(api.get_task(queue, task_id).state in ("done", "dead") for task_id in ids)


# The handlers and checks of the matrix the AsyncWorker passes too
# (tests/worker/test_async_worker.py, whose coroutine handlers call these functions).


def enqueue_doubles(api: Client, queue: str) -> tuple[list[Any], list[Any]]:
    """30 tasks whose results are kept, 5 whose handler returns None."""
    return (api.enqueue(queue, [{"payload": {"n": i}} for i in range(30)]),
            api.enqueue(queue, [{"payload": {"n": i, "discard": True}} for i in range(5)]))


def double(task: ClaimedTask) -> Any:
    if task.payload.get("discard"):
        return None  # nothing to keep: the task is deleted
    return {"double": task.payload["n"] * 2}


def check_doubles(api: Client, queue: str, kept: list[Any], dropped: list[Any],
                  stats: WorkerStats) -> None:
    assert (stats.claimed, stats.acked, stats.retried, stats.dead) == (35, 35, 0, 0)
    for outcome in kept:
        task = api.get_task(queue, outcome.id)
        assert task.state == "done"
        assert task.result == {"double": task.payload["n"] * 2}
        assert task.attempts == 1
    for outcome in dropped:
        with pytest.raises(NotFoundError):
            api.get_task(queue, outcome.id)
    assert unfinished(api, queue) == 0


def enqueue_flaky(api: Client, queue: str) -> dict[str, UUID]:
    """A task of each kind :func:`flaky` tells apart, on a queue of 3 attempts 0.2 s apart."""
    api.put_queue(queue, {"max_attempts": 3, "backoff": {
        "kind": "fixed", "base_seconds": 0.2, "cap_seconds": 0.2, "jitter": 0}})
    return {kind: api.enqueue_one(queue, {"kind": kind}).id
            for kind in ("fails_once", "retry_later", "permanent", "always_fails")}


def flaky(task: ClaimedTask) -> Any:
    kind = task.payload["kind"]
    if kind == "fails_once" and task.attempt == 1:
        raise ValueError("first attempt fails")
    if kind == "retry_later" and task.attempt == 1:
        raise RetryableError("not yet", retry_in_seconds=0.5)
    if kind == "permanent":
        raise PermanentError("bad payload")
    if kind == "always_fails":
        raise RuntimeError(f"still broken (attempt {task.attempt})")
    return {"ok": kind, "attempt": task.attempt}


def check_flaky(api: Client, queue: str, ids: dict[str, UUID], stats: WorkerStats) -> None:
    once = api.get_task(queue, ids["fails_once"])
    assert (once.state, once.attempts, once.result) == ("done", 2, {"ok": "fails_once",
                                                                     "attempt": 2})
    assert once.last_error is not None and once.last_error.startswith(
        "ValueError: first attempt fails")
    later = api.get_task(queue, ids["retry_later"])
    assert (later.state, later.attempts) == ("done", 2)
    permanent = api.get_task(queue, ids["permanent"])
    assert (permanent.state, permanent.attempts) == ("dead", 1)  # not retried
    assert permanent.last_error is not None
    assert permanent.last_error.startswith("PermanentError: bad payload")
    assert "Traceback" in permanent.last_error
    always = api.get_task(queue, ids["always_fails"])
    assert (always.state, always.attempts) == ("dead", 3)
    assert always.last_error is not None
    assert always.last_error.startswith("RuntimeError: still broken (attempt 3)")
    assert (stats.acked, stats.retried, stats.dead) == (2, 4, 2)
    assert {t.id for t in api.dlq_list(queue).tasks} == {ids["permanent"], ids["always_fails"]}


def enqueue_fan_in(api: Client, queue: str) -> UUID:
    """Five tasks, and one after them all (its id)."""
    parents = api.enqueue(queue, [{"payload": {"n": i}} for i in range(5)])
    [join] = api.enqueue(queue, [{"payload": "sum", "after": [p.id for p in parents]}])
    return join.id


def fan_in(task: ClaimedTask, sums: list[int]) -> Any:
    """Square a parent's n; the task after them sums their results from ``task.parents``."""
    if task.payload == "sum":
        sums.append(sum(p.result["square"] for p in task.parents or []))
        return None
    return {"square": task.payload["n"] ** 2}


def check_fan_in(api: Client, queue: str, join: UUID, sums: list[int],
                 stats: WorkerStats) -> None:
    assert (stats.claimed, stats.acked) == (6, 6)
    assert sums == [0 + 1 + 4 + 9 + 16]
    with pytest.raises(NotFoundError):
        api.get_task(queue, join)


def test_results_are_acked(api: Client, names: QueueNames) -> None:
    queue = names["work"]
    kept, dropped = enqueue_doubles(api, queue)
    stats = Worker(api, queue, double, concurrency=4, wait_seconds=0.5, burst=True,
                   install_signal_handlers=False).run()
    check_doubles(api, queue, kept, dropped, stats)


def test_exceptions_are_nacked_retried_and_dead_lettered(api: Client,
                                                         names: QueueNames) -> None:
    queue = names["flaky"]
    ids = enqueue_flaky(api, queue)
    worker = Worker(api, queue, flaky, concurrency=2, wait_seconds=0.5,
                    install_signal_handlers=False)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        eventually(lambda: all_finished(api, queue, ids.values()) and worker.held == 0,
                   timeout=30,
                   what="every task settled")
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()
    check_flaky(api, queue, ids, worker.stats)


def _outer(depth: int) -> None:
    if depth == 0:
        _innermost_failure()
    _inner(depth - 1)


def _inner(depth: int) -> None:
    _outer(depth)


def _innermost_failure() -> None:
    raise ValueError("é" * 3000)  # 6,000 bytes of UTF-8


def test_a_long_error_keeps_its_message_and_innermost_frames_in_2_kib(
        api: Client, names: QueueNames) -> None:
    """The server keeps the first 2 KiB of a nack's error: the Worker sends no more, and
    what it keeps of a long one is the start of the message and the frames where it was
    raised, not the outer frames the server would have kept."""
    queue = names["long-error"]
    api.put_queue(queue, {"max_attempts": 1})
    task_id = api.enqueue_one(queue, "x").id

    def handle(task: ClaimedTask) -> Any:
        _outer(80)

    stats = Worker(api, queue, handle, concurrency=1, wait_seconds=0.2, burst=True,
                   install_signal_handlers=False).run()
    assert stats.dead == 1
    error = api.get_task(queue, task_id).last_error
    assert error is not None
    assert len(error.encode()) <= 2048
    assert error.startswith("ValueError: éééé") and "…(truncated)" in error
    assert "Traceback (most recent call last):" in error and "parts left out" in error
    # it ends with the frame that raised (the message is not repeated there)
    last_frame = error[error.rindex('  File "'):]
    assert "in _innermost_failure" in last_frame
    assert 'raise ValueError("é" * 3000)' in last_frame


def _raised(call: Any) -> BaseException:
    try:
        call()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


def test_describe_keeps_a_short_error_whole() -> None:
    exc = _raised(lambda: int("nope"))
    text = describe(exc)
    assert text.startswith("ValueError: invalid literal for int() with base 10: 'nope'\n\n")
    assert text.endswith("ValueError: invalid literal for int() with base 10: 'nope'")
    assert "parts left out" not in text and "truncated" not in text
    # a long one without a traceback: the message, cut on a character boundary
    long = describe(RuntimeError("€" * 1000))
    assert long.startswith("RuntimeError: €€") and long.endswith("…(truncated)")
    assert len(long.encode()) <= 2048


def seen_over_http(api: Client, queue: str, task_id: UUID, progress: Any) -> bool:
    """Whether the task's view and its running lease show ``progress``, over HTTP."""
    view = api.get_task(queue, task_id)
    leases = [lease for lease in api.running(queue) if lease.id == task_id]
    return view.progress == progress and view.progress_at is not None and bool(leases) \
        and leases[0].progress == progress and leases[0].progress_at == view.progress_at


def check_progress(api: Client, queue: str, task_id: UUID, stats: WorkerStats) -> None:
    """After the handler reported {"step": 1}, then {"step": 2}, each seen while it ran,
    and returned: the task keeps the last one with its result."""
    assert (stats.acked, stats.leases_lost) == (1, 0)
    task = api.get_task(queue, task_id)
    assert (task.state, task.result, task.progress) == ("done", "finished", {"step": 2})
    assert task.progress_at is not None


def test_progress_rides_the_next_heartbeat_and_stays_with_the_task(
        api: Client, names: QueueNames) -> None:
    """A 60-second lease is heartbeated every 20 s: progress is sent within about a second
    of being set, without waiting for it."""
    queue = names["progress"]
    task_id = api.enqueue_one(queue, "work").id
    seen: list[Any] = []

    def reporting(task: WorkerTask) -> Any:
        with pytest.raises(ValueError, match="4096"):
            task.set_progress("x" * 5000)
        for step in (1, 2):
            task.set_progress({"step": step})
            seen.append(eventually(lambda s=step: seen_over_http(api, queue, task.id,
                                                            {"step": s}), timeout=10,
                                   what=f"step {step} over HTTP"))
        return "finished"

    stats = Worker(api, queue, reporting, concurrency=1, lease_seconds=60, wait_seconds=0.5,
                   burst=True, install_signal_handlers=False).run()
    assert seen == [True, True]
    check_progress(api, queue, task_id, stats)


def test_heartbeats_keep_a_long_tasks_lease(api: Client, names: QueueNames) -> None:
    queue = names["long"]
    # Without heartbeats a 1-second lease is lost while the task runs: the reaper gives the
    # task to the next claimer and the late ack is refused.
    control = api.enqueue_one(queue, "control").id
    [held] = api.claim(queue, lease_seconds=1)
    eventually(lambda: api.get_task(queue, control).state != "leased"
               and not api.running(queue), timeout=30,
               what="the reaper expired the lease")
    refused = api.ack(queue, [{"id": held.id, "lease_token": held.lease_token}])
    assert [r.reason for r in refused.rejected] == ["not_owner"]
    api.delete_task(queue, control)

    task_id = api.enqueue_one(queue, {"seconds": 4}).id

    def long_task(task: ClaimedTask) -> Any:
        time.sleep(task.payload["seconds"])
        return "finished"

    stats = Worker(api, queue, long_task, concurrency=1, lease_seconds=1, wait_seconds=0.5,
                   burst=True, install_signal_handlers=False).run()
    assert (stats.acked, stats.rejected, stats.leases_lost) == (1, 0, 0)
    assert stats.heartbeats >= 4  # every third of a second for four seconds, at least
    task = api.get_task(queue, task_id)
    assert (task.state, task.attempts, task.result) == ("done", 1, "finished")


def start_worker_process(api_url: str, queue: str, journal: Path, *, grace: float,
                         concurrency: int, handler: str = "slow",
                         extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TIERQ_TEST_JOURNAL": str(journal)}
    command = [sys.executable, "-c", "from tierq.cli import app; app()", "worker", queue,
               f"tests.worker.handlers:{handler}", "--url", api_url, "--concurrency",
               str(concurrency), "--wait", "0.5", "--grace", str(grace), "--app-dir",
               str(REPO), "--name", "sigterm-test", *extra]
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def journal_lines(path: Path, event: str) -> list[str]:
    if not path.exists():
        return []
    return [line.split()[1] for line in path.read_text().splitlines()
            if line.startswith(event + " ")]


def test_sigterm_lets_running_tasks_finish_and_claims_nothing_more(
        api: Client, api_url: str, names: QueueNames, tmp_path: Path) -> None:
    queue = names["graceful"]
    ids = [o.id for o in api.enqueue(queue, [{"payload": {"seconds": 2}} for _ in range(6)])]
    journal = tmp_path / "journal"
    process = start_worker_process(api_url, queue, journal, grace=30, concurrency=2)
    try:
        eventually(lambda: len(journal_lines(journal, "start")) == 2, timeout=30,
                   what="two tasks running")
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output.decode(errors="replace")
    started = journal_lines(journal, "start")
    assert sorted(journal_lines(journal, "finish")) == sorted(started)
    assert len(started) == 2  # nothing claimed after the signal
    states = {str(i): api.get_task(queue, i) for i in ids}
    assert {states[s].state for s in started} == {"done"}
    waiting = [t for t in states.values() if str(t.id) not in started]
    assert len(waiting) == 4
    assert {(t.state, t.attempts) for t in waiting} == {("warm", 0)}
    assert api.running(queue) == []


def check_left_to_leases(api: Client, queue: str, ids: list[UUID],
                         journal: Path) -> tuple[list[UUID], list[ClaimedTask]]:
    """After a stop past the grace of a ``tierq worker`` process: the tasks it ran are
    still leased by it, not nacked; another worker gets only the others. Returns the ids it
    ran and what the other worker claimed."""
    assert journal_lines(journal, "finish") == []
    started = set(journal_lines(journal, "start"))
    running = [i for i in ids if str(i) in started]
    # not nacked: still leased by the stopped worker, no attempt recorded yet
    leases = {lease.id: lease for lease in api.running(queue)}
    assert set(leases) == set(running)
    assert {lease.worker for lease in leases.values()} == {"sigterm-test"}
    for task_id in running:
        task = api.get_task(queue, task_id)
        assert (task.state, task.last_error) == ("leased", None)
    # another worker gets only what was never started, not what may still be running
    others = api.claim(queue, max=5, lease_seconds=60)
    assert sorted(str(t.id) for t in others) == sorted(str(i) for i in ids if i not in running)
    return running, others


def test_sigterm_past_the_grace_leaves_running_tasks_to_their_leases(
        api: Client, api_url: str, names: QueueNames, tmp_path: Path) -> None:
    """Past the grace the worker exits without nacking the tasks still running: nobody else
    gets them while the process may still run them; once their leases run out the reaper
    counts the attempt and they run again. The tasks not started are released at once."""
    queue = names["interrupted"]
    api.put_queue(queue, {"lease_seconds": 8})  # what the worker leases with
    ids = [o.id for o in api.enqueue(queue, [{"payload": {"seconds": 60}} for _ in range(5)])]
    journal = tmp_path / "journal"
    process = start_worker_process(api_url, queue, journal, grace=0.5, concurrency=2)
    try:
        eventually(lambda: len(journal_lines(journal, "start")) == 2, timeout=30,
                   what="two tasks running")
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output.decode(errors="replace")
    running, others = check_left_to_leases(api, queue, ids, journal)
    assert all(t.attempt == 1 for t in others)  # released: no attempt counted
    assert {lease.id for lease in api.running(queue)} >= set(running)
    api.release(queue, [{"id": t.id, "lease_token": t.lease_token} for t in others])

    # the leases run out (8 s after the last heartbeat); the reaper counts the attempt
    for task_id in running:
        task = reaped(api, queue, task_id)
        assert task.attempts == 1
        assert task.last_error == "lease expired (attempt 1)"

    # nothing was lost: another worker finishes all five, the two abandoned ones on their
    # second attempt
    finished: dict[str, int] = {}

    def quick(task: ClaimedTask) -> Any:
        finished[str(task.id)] = task.attempt
        return "done"

    stats = Worker(api, queue, quick, concurrency=2, wait_seconds=0.5, burst=True,
                   install_signal_handlers=False).run()
    assert stats.acked == 5
    assert sorted(finished) == sorted(str(i) for i in ids)
    assert {finished[str(i)] for i in running} == {2}
    assert unfinished(api, queue) == 0


def test_an_abandoned_task_is_not_claimed_while_the_stopping_process_still_runs_it(
        api: Client, api_url: str, names: QueueNames, tmp_path: Path) -> None:
    """A handler whose work runs on a ThreadPoolExecutor (parallel downloads, boto3
    transfers: the pool's threads are not daemons, and a normal exit waits for them): once
    the grace is over ``tierq worker`` ends its process at once, so by the time the 3-second
    lease runs out and another worker gets the task, nothing of the first run is left."""
    queue = names["pooled"]
    task_id = api.enqueue_one(queue, {"seconds": 25}).id
    journal = tmp_path / "journal"
    process = start_worker_process(api_url, queue, journal, grace=0.5, concurrency=1,
                                   handler="pooled", extra=("--lease-seconds", "3"))
    try:
        eventually(lambda: bool(journal_lines(journal, "start")), timeout=30,
                   what="the task running")
        assert journal_lines(journal, "start") == [str(task_id)]
        process.send_signal(signal.SIGTERM)
        # another worker polls for the task, as a fleet's other members would
        deadline = time.monotonic() + 20
        taken: list[ClaimedTask] = []
        while not taken and time.monotonic() < deadline:
            taken = api.claim(queue, max=1, lease_seconds=60)
            time.sleep(0.2)
        assert [t.id for t in taken] == [task_id], "the abandoned lease never ran out"
        # the first process was gone by the time anyone else got the task
        assert process.poll() is not None, (
            "the task was handed to another worker while the stopped worker's process was "
            "still running its handler")
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    assert "abandoned" in text and "left to their leases" in text  # logs and stats written
    assert journal_lines(journal, "finish") == []


def check_let_go(api: Client, queue: str, made: list[UUID], not_started: ClaimedTask,
                 running: ClaimedTask, stats: WorkerStats) -> None:
    """After a worker let go of ``not_started`` and ``running`` (of ``made``, three tasks):
    the first released, the second abandoned to its lease."""
    assert (stats.released, stats.abandoned, stats.dead, stats.retried) == (1, 1, 0, 0)
    released = api.get_task(queue, not_started.id)
    assert (released.state, released.attempts) == ("warm", 0)
    kept = api.get_task(queue, running.id)
    assert (kept.state, kept.last_error) == ("leased", None)
    # while the lease holds, a claim gets the released task and the next one, not it
    again = api.claim(queue, max=5)
    assert [(t.id, t.attempt) for t in again] == [(not_started.id, 1), (made[2], 1)]


def test_let_go_releases_tasks_not_started_and_leaves_running_ones_to_their_leases(
        api: Client, names: QueueNames) -> None:
    """At shutdown a task whose handler never started goes back to its place in line
    without counting an attempt (so a last attempt is not dead-lettered); a task whose
    handler was still running is not nacked: its lease runs out, the reaper counts the
    attempt (here the last one: dead-lettered)."""
    queue = names["giveback"]
    api.put_queue(queue, {"max_attempts": 1})
    made = api.enqueue(queue, [{"payload": i} for i in range(3)])
    worker = Worker(api, queue, lambda task: None, concurrency=2, name="giveback-test",
                    install_signal_handlers=False)
    not_started, running = api.claim(queue, max=2, lease_seconds=10)
    now = time.monotonic()
    leases = [HeldLease(not_started, extended_at=now, let_go=True),
              HeldLease(running, extended_at=now, started_at=now, let_go=True)]
    worker._let_go(leases)
    assert worker.held == 0
    check_let_go(api, queue, [o.id for o in made], not_started, running, worker.stats)
    eventually(lambda: api.get_task(queue, running.id).state == "dead", timeout=30,
               what="the reaper expired the lease of the last attempt")
    dead = api.get_task(queue, running.id)
    assert (dead.attempts, dead.last_error) == (1, "lease expired (attempt 1)")


def test_a_handler_running_past_the_grace_is_not_nacked_and_its_outcome_is_dropped(
        api: Client, names: QueueNames) -> None:
    """In process: past the grace the Worker sends no nack; the handler returns while the
    stop is still under way (its reporter running), and its outcome is dropped, never
    reported; nobody else gets the task while its lease holds, and once the lease runs out
    the reaper counts the attempt. (What goes over the wire meanwhile, heartbeats included:
    tests/client/test_worker_stop.py.)"""
    queue = names["abandoned"]
    task_id = api.enqueue_one(queue, "long").id
    entered, leave = threading.Event(), threading.Event()

    def blocked(task: ClaimedTask) -> Any:
        entered.set()
        leave.wait(60)
        return "too late"

    worker = PausedAtAbandonment(api, queue, blocked, concurrency=1, lease_seconds=8,
                                 wait_seconds=0.2, grace_seconds=0.3, heartbeat_fraction=0.25,
                                 install_signal_handlers=False, leave=leave)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert entered.wait(30)
        eventually(lambda: worker.stats.heartbeats >= 1, timeout=30, what="a heartbeat")
        worker.stop()
        thread.join(timeout=30)
        assert not thread.is_alive()
    finally:
        leave.set()
    assert worker.handed_over.is_set()  # it returned before the reporter was stopped
    stats = worker.stats
    assert (stats.abandoned, stats.acked, stats.retried, stats.released) == (1, 0, 0, 0)
    check_abandoned_lease(api, queue, task_id)


def check_abandoned_lease(api: Client, queue: str, task_id: UUID) -> None:
    """A task abandoned to its lease: nobody else gets it while the lease holds; once it
    runs out the reaper counts the attempt."""
    assert api.get_task(queue, task_id).state == "leased"
    assert api.claim(queue, max=1) == []
    task = reaped(api, queue, task_id)  # (not merely out of the view: counted)
    assert (task.attempts, task.last_error, task.result) == \
        (1, "lease expired (attempt 1)", None)


def test_a_fan_in_handler_sees_its_parents_results(api: Client, names: QueueNames) -> None:
    """A task that waits for others (``after``) runs once they are done, and its handler
    reads their results from ``task.parents``, without a request of its own."""
    queue = names["fan"]
    join = enqueue_fan_in(api, queue)
    sums: list[int] = []
    stats = Worker(api, queue, lambda task: fan_in(task, sums), concurrency=4,
                   wait_seconds=0.5, burst=True, install_signal_handlers=False).run()
    check_fan_in(api, queue, join, sums, stats)
