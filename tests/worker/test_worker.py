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
from pathlib import Path
from typing import Any

import pytest

from tests.support.local_api import QueueNames
from tests.support.polling import eventually
from tierq.client import Client, NotFoundError
from tierq.client.worker import PermanentError, RetryableError, Worker
from tierq.client.worker.worker import HeldLease
from tierq.models import ClaimedTask

REPO = Path(__file__).resolve().parents[2]


def unfinished(api: Client, queue: str) -> int:
    c = api.get_queue(queue).counts
    return c.warm + c.cold + c.delayed + c.leased


def test_results_are_acked(api: Client, names: QueueNames) -> None:
    queue = names["work"]
    kept = api.enqueue(queue, [{"payload": {"n": i}} for i in range(30)])
    dropped = api.enqueue(queue, [{"payload": {"n": i, "discard": True}} for i in range(5)])

    def double(task: ClaimedTask) -> Any:
        if task.payload.get("discard"):
            return None  # nothing to keep: the task is deleted
        return {"double": task.payload["n"] * 2}

    stats = Worker(api, queue, double, concurrency=4, wait_seconds=0.5, burst=True,
                   install_signal_handlers=False).run()
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


def test_exceptions_are_nacked_retried_and_dead_lettered(api: Client,
                                                         names: QueueNames) -> None:
    queue = names["flaky"]
    api.put_queue(queue, {"max_attempts": 3, "backoff": {
        "kind": "fixed", "base_seconds": 0.2, "cap_seconds": 0.2, "jitter": 0}})
    ids = {kind: api.enqueue_one(queue, {"kind": kind}).id
           for kind in ("fails_once", "retry_later", "permanent", "always_fails")}

    def handle(task: ClaimedTask) -> Any:
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

    worker = Worker(api, queue, handle, concurrency=2, wait_seconds=0.5,
                    install_signal_handlers=False)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        eventually(lambda: unfinished(api, queue) == 0 and worker.held == 0, timeout=30,
                   what="every task settled")
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()

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
    stats = worker.stats
    assert (stats.acked, stats.retried, stats.dead) == (2, 4, 2)
    assert {t.id for t in api.dlq_list(queue).tasks} == {ids["permanent"], ids["always_fails"]}


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
    api.cancel_task(queue, control)

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
                         concurrency: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TIERQ_TEST_JOURNAL": str(journal)}
    command = [sys.executable, "-c", "from tierq.cli import app; app()", "worker", queue,
               "tests.worker.handlers:slow", "--url", api_url, "--concurrency",
               str(concurrency), "--wait", "0.5", "--grace", str(grace), "--app-dir",
               str(REPO), "--name", "sigterm-test"]
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


def test_sigterm_past_the_grace_gives_running_tasks_back_at_once(
        api: Client, api_url: str, names: QueueNames, tmp_path: Path) -> None:
    queue = names["interrupted"]
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
    assert journal_lines(journal, "finish") == []
    started = set(journal_lines(journal, "start"))
    # given back with a nack: ready again now, not after the 300-second lease
    assert api.running(queue) == []
    released = [api.get_task(queue, i) for i in ids if str(i) in started]
    assert [(t.state, t.attempts) for t in released] == [("warm", 1), ("warm", 1)]
    assert all("released: worker sigterm-test stopped" in (t.last_error or "")
               for t in released)

    # nothing was lost: another worker finishes all five
    finished: list[str] = []

    def quick(task: ClaimedTask) -> Any:
        finished.append(str(task.id))
        return "done"

    stats = Worker(api, queue, quick, concurrency=2, wait_seconds=0.5, burst=True,
                   install_signal_handlers=False).run()
    assert stats.acked == 5
    assert sorted(finished) == sorted(str(i) for i in ids)
    assert unfinished(api, queue) == 0


def test_give_back_releases_tasks_not_started_and_nacks_running_ones(
        api: Client, names: QueueNames) -> None:
    """At shutdown a task whose handler never started goes back to its place in line
    without counting an attempt (so a last attempt is not dead-lettered); a task whose
    handler was still running is nacked, and that attempt counts."""
    queue = names["giveback"]
    api.put_queue(queue, {"max_attempts": 1})
    made = api.enqueue(queue, [{"payload": i} for i in range(3)])
    worker = Worker(api, queue, lambda task: None, concurrency=2, name="giveback-test",
                    install_signal_handlers=False)
    not_started, running = api.claim(queue, max=2)
    now = time.monotonic()
    leases = [HeldLease(not_started, extended_at=now),
              HeldLease(running, extended_at=now, started_at=now)]
    worker._release(leases)
    assert worker.stats.released == 2 and worker.stats.dead == 1
    assert (api.get_task(queue, not_started.id).state,
            api.get_task(queue, not_started.id).attempts) == ("warm", 0)
    dead = api.get_task(queue, running.id)
    assert (dead.state, dead.attempts) == ("dead", 1)
    assert "released: worker giveback-test stopped" in (dead.last_error or "")
    again = api.claim(queue, max=5)
    assert [(t.id, t.attempt) for t in again] == [(not_started.id, 1), (made[2].id, 1)]
