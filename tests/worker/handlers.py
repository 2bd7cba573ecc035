"""Handlers that ``tierq worker`` runs in the worker tests (as ``tests.worker.handlers:…``).

``slow`` (and ``slow_async``, its coroutine twin) sleeps ``payload["seconds"]`` and records
each start and finish as a line in the file named by ``TIERQ_TEST_JOURNAL`` ("start <id>" /
"finish <id>"), so a test can tell what ran, what finished and what was interrupted."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from tierq.models import ClaimedTask

_lock = threading.Lock()


def journal(event: str, task: ClaimedTask) -> None:
    path = os.environ["TIERQ_TEST_JOURNAL"]
    with _lock, open(path, "a") as out:
        out.write(f"{event} {task.id} {task.attempt}\n")


def slow(task: ClaimedTask) -> dict[str, Any]:
    journal("start", task)
    time.sleep(float(task.payload["seconds"]))
    journal("finish", task)
    return {"slept": task.payload["seconds"]}


def pooled(task: ClaimedTask) -> dict[str, Any]:
    """``slow``, its work done on a ``ThreadPoolExecutor`` (as many handlers do: parallel
    downloads, boto3 transfers): the pool's threads are not daemons, and the interpreter
    joins them at exit."""
    from concurrent.futures import ThreadPoolExecutor

    journal("start", task)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(time.sleep, float(task.payload["seconds"])).result()
    journal("finish", task)
    return {"slept": task.payload["seconds"]}


async def slow_async(task: ClaimedTask) -> dict[str, Any]:
    """``slow`` as a coroutine function: ``tierq worker`` runs it with the AsyncWorker."""
    import asyncio

    journal("start", task)
    await asyncio.sleep(float(task.payload["seconds"]))
    journal("finish", task)
    return {"slept": task.payload["seconds"]}


def hangs(task: ClaimedTask) -> str:
    """Hangs past any time limit, deaf to ``task.cancelled`` (only a kill stops it)."""
    journal("start", task)
    time.sleep(float(task.payload.get("seconds", 60)))
    journal("finish", task)
    return "finished"


def until_cancelled(task: ClaimedTask) -> str:
    """Works until ``task.cancelled`` is set, then stops by itself ("stopped <id>")."""
    journal("start", task)
    if task.cancelled.wait(float(task.payload.get("seconds", 60))):
        journal("stopped", task)
        return "stopped"
    journal("finish", task)
    return "finished"


def describes_payload(task: ClaimedTask) -> dict[str, Any]:
    """What a process's handler got: its payload's tag and size, and its trace."""
    payload = task.payload
    return {"tag": payload["tag"], "blob": len(payload["blob"]),
            "traceparent": task.trace.traceparent if task.trace is not None else None}


def reports_progress(task: Any) -> str:
    """Reports ``{"step": 1}``, then ``{"step": 2}`` once the file ``payload["go"]`` exists,
    and returns once ``payload["end"]`` exists (a test looks at each step meanwhile). A value
    over 4 KiB is refused in the process (it says so in its result otherwise)."""
    try:
        task.set_progress("x" * 5000)
    except ValueError:
        pass
    else:
        return "a progress over 4 KiB was taken"
    task.set_progress({"step": 1})
    _wait_for(task.payload["go"])
    task.set_progress({"step": 2})
    _wait_for(task.payload["end"])
    return "finished"


def _wait_for(path: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
