"""Handlers in child processes: ``Worker(..., isolation="process")``.

A thread cannot be stopped from outside, so under the default ``isolation="thread"`` a
handler past its time limit (or cancelled) is only told to stop (``task.cancelled``) and
keeps its slot until it returns. With ``isolation="process"`` each of the Worker's
``concurrency`` slots runs its handlers, one task at a time, in a child process of its own
(:class:`HandlerProcess`), which can be killed:

=====================================  ===================================================
the task                               what happens to the child running it
=====================================  ===================================================
reaches its time limit                 killed at once (SIGKILL); the slot gets a new child
                                       for its next task
cancelled                              its handler sees ``task.cancelled`` set (a
                                       ``multiprocessing`` event: ``is_set()``, ``wait()``)
                                       and has ``cancel_grace_seconds`` to return, then it
                                       is killed
the child dies by itself (a crash,     the attempt fails (nacked for a retry) naming the
``os._exit``)                          exit code
the Worker's grace ends at a stop      killed, as the thread's handler is abandoned
=====================================  ===================================================

The task a child's handler gets is a :class:`~tierq.client.worker.WorkerTask` as under
threads: a big payload is fetched by the Worker before the task is sent, and
``task.set_progress`` (checked in the child: JSON, at most 4 KiB) sends each value to the
Worker over the child's pipe, where it rides the lease's next heartbeat. The handler's span
(the Worker's ``tracer``) is started in the Worker's process around the child's run: it
continues the task's trace and lasts as long as the handler, but the child has no current
span of its own (a tracer's context does not cross processes); a handler that starts spans
of its own continues ``task.trace`` itself.

What it takes: the handler and what it returns or raises travel between processes by
pickle, so the handler must be importable by name (a function defined at a module's top
level, or an instance of such a class), and its result JSON-able (what an ack keeps
anyway). Children are started with the ``spawn`` method (a fresh interpreter: safe beside
the Worker's threads, where ``fork`` is not), which imports the handler's module anew in
each child: a script that starts a Worker must do so under ``if __name__ == "__main__":``.
Each child costs an interpreter (tens of MB) and its start (a fraction of a second, then
reused task after task); a handler killed mid-way may leave what it held (files, locks,
connections) as a killed process does."""

from __future__ import annotations

import functools
import logging
import multiprocessing
import pickle
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess
from multiprocessing.synchronize import Event as ProcessEvent
from typing import Any

from tierq.client.worker.ledger import Ack, Nack, failed, succeeded
from tierq.client.worker.task import WorkerTask
from tierq.models import ClaimedTask

log = logging.getLogger("tierq.client.worker")

Isolation = str  # "thread" or "process"
ISOLATIONS = ("thread", "process")
# How often a slot's thread looks at its child's answer and at the task's stop signal.
POLL_SECONDS = 0.05
_SPAWN = multiprocessing.get_context("spawn")


def check_picklable(handler: Callable[..., Any]) -> None:
    """``ValueError`` unless ``handler`` can reach a child process (pickled by name)."""
    try:
        pickle.dumps(handler)
    except Exception as exc:
        raise ValueError(
            f"isolation='process' runs the handler in child processes, which get it by "
            f"pickle: {handler!r} cannot be ({type(exc).__name__}: {exc}). Use a function "
            f"defined at a module's top level (not a lambda or a nested function)") from exc


def _child(handler: Callable[[ClaimedTask], Any], conn: Connection,
           stop: ProcessEvent) -> None:
    """A child's loop: run the handler for each task sent (its fields), answer
    ``("outcome", Ack | Nack)``; None or a closed pipe ends it. What the handler reports
    with ``task.set_progress`` goes up the pipe meanwhile as ``("progress", id, value)``."""
    lock = threading.Lock()  # (a handler's own threads may report progress too)

    def send(message: tuple[Any, ...]) -> None:
        with lock:
            conn.send(message)

    def relay(task_id: Any, value: Any) -> None:
        send(("progress", task_id, value))

    while True:
        try:
            fields = conn.recv()
        except (EOFError, OSError):
            return
        if fields is None:
            return
        claimed = ClaimedTask.model_validate(fields)
        task = WorkerTask.of(claimed, functools.partial(relay, claimed.id))
        task.with_signal(stop)
        outcome: Ack | Nack
        try:
            outcome = succeeded(handler(task))
        except BaseException as exc:  # a handler's failure, whatever it is, is the task's
            outcome = failed(exc, task)
        try:
            send(("outcome", outcome))
        except Exception as exc:  # (a result pickle cannot carry)
            send(("outcome", Nack(f"the handler's outcome could not reach the worker: "
                                  f"{type(exc).__name__}: {exc}")))


class HandlerProcess:
    """One slot's child process: started on first use, killed when a task must stop, and
    started again for the next task."""

    def __init__(self, handler: Callable[[ClaimedTask], Any], name: str) -> None:
        self.handler = handler
        self.name = name
        self.process: SpawnProcess | None = None
        self.conn: Connection | None = None
        self.stop = _SPAWN.Event()

    def _start(self) -> tuple[SpawnProcess, Connection]:
        if self.process is None or self.conn is None or not self.process.is_alive():
            mine, theirs = _SPAWN.Pipe()
            self.process = _SPAWN.Process(target=_child, args=(self.handler, theirs, self.stop),
                                          name=self.name, daemon=True)
            self.process.start()
            theirs.close()
            self.conn = mine
        return self.process, self.conn

    def warm_up(self) -> None:
        """Start the child now (it imports the handler's module while tasks are claimed)."""
        self._start()

    def run(self, task: ClaimedTask, *, cancel_grace_seconds: float,
            aborted: Callable[[], bool],
            progress: Callable[[Any], None] | None = None) -> Ack | Nack | None:
        """Run ``task``'s handler in the child (``task`` as the handler gets it: its payload
        fetched); its outcome, or None when the child was killed (the task reached its time
        limit, was cancelled and did not return within ``cancel_grace_seconds``, or
        ``aborted()`` became true: the Worker's grace ended). ``progress`` takes each value
        the handler reports, as it comes."""
        process, conn = self._start()
        self.stop.clear()
        conn.send(task.model_dump(mode="python"))
        told_at: float | None = None
        while True:
            if conn.poll(POLL_SECONDS):
                try:
                    kind, *message = conn.recv()
                except (EOFError, OSError):
                    return self._died(process)
                if kind == "outcome":
                    answer: Ack | Nack = message[0]
                    return answer
                task_id, value = message
                # (a value a handler's thread reported after its task's outcome is dropped)
                if task_id == task.id and progress is not None:
                    progress(value)
            elif not process.is_alive():
                return self._died(process)
            reason = task.stop_reason
            if aborted():
                self.kill()
                return None
            if reason is None:
                continue
            if told_at is None:
                told_at = time.monotonic()
                self.stop.set()
            if reason == "timeout" or time.monotonic() - told_at >= cancel_grace_seconds:
                self.kill()
                return None

    def _died(self, process: SpawnProcess) -> Nack:
        process.join(1)
        self.process, self.conn = None, None
        return Nack(f"the handler's process ended while it ran (exit code "
                    f"{process.exitcode})")

    def kill(self) -> None:
        """Kill the child at once (SIGKILL); the next task starts another."""
        process, self.process, conn, self.conn = self.process, None, self.conn, None
        if process is not None:
            process.kill()
            process.join(5)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """End an idle child (asked first, then killed)."""
        process, conn = self.process, self.conn
        if process is None or conn is None:
            return
        try:
            conn.send(None)
            process.join(1)
        except OSError:
            pass
        self.kill()
