"""A ``Worker`` whose stop pauses where abandoned tasks could still be reported: at the moment
it lets them go, while its reporter and heartbeat threads still run.

A test of what a stopping Worker sends about a task it abandoned must look in that window:
after :meth:`Worker.run` returned, those threads are joined and nothing could be sent,
whatever the Worker did wrong. Once the abandoned lease runs out, :func:`reaped` waits for
the reaper to record its attempt."""

from __future__ import annotations

import threading
import time
from typing import Any
from uuid import UUID

from tests.support.polling import eventually
from tierq.client import Client
from tierq.client.worker import Worker
from tierq.client.worker.worker import Ack, HeldLease, Nack
from tierq.models import TaskView

FINISHED = ("done", "dead", "cancelled")


class PausedAtAbandonment(Worker):
    """At the end of the grace, with the unfinished leases marked let go but before they are
    released and dropped: waits ``hold`` seconds (the heartbeat thread sees them, long enough
    for heartbeats to fall due), lets them go, then sets ``leave`` (the test's handler
    returns on it) and waits until the handler's outcome was handed over — the reporter still
    running. ``abandoned_at`` (``time.monotonic()``) is when the pause began."""

    def __init__(self, *args: Any, leave: threading.Event, hold: float = 0.0,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.leave = leave
        self.hold = hold
        self.abandoned_at: float | None = None
        self.handed_over = threading.Event()

    def _let_go(self, leases: list[HeldLease]) -> None:
        self.abandoned_at = time.monotonic()
        time.sleep(self.hold)
        super()._let_go(leases)
        self.leave.set()
        if any(lease.started_at is not None for lease in leases):
            assert self.handed_over.wait(30), "the handler did not return"

    def _hand_over(self, lease: HeldLease, outcome: Ack | Nack) -> None:
        super()._hand_over(lease, outcome)
        self.handed_over.set()


def reaped(api: Client, queue: str, task_id: UUID | str, *,
           timeout: float = 30.0) -> TaskView:
    """The task once its lease has ended and its attempt is counted (or it finished): what
    the caller then asserts on.

    The lease leaving the task's view is not enough to wait for: the reaper first marks an
    expired lease as being reaped (tierq/dal/lua/lease_expired.lua), which takes it out of
    the view (``WarmTier.lease_of``), and only then records the attempt in PostgreSQL, so for
    a few milliseconds (longer on a loaded machine) the task shows ``warm`` with no attempt
    counted. A task whose outcome was reported after all (done) ends the wait too, for the
    caller's assertions to fail on; a lease dropped without its attempt counted times out
    here, naming the task as last seen."""
    last: list[TaskView] = []

    def settled() -> TaskView | None:
        task = api.get_task(queue, task_id)
        last[:] = [task]
        done = task.state != "leased" and (task.attempts > 0 or task.state in FINISHED)
        return task if done else None

    try:
        task = eventually(settled, timeout=timeout,
                          what="the reaper recorded the expired lease's attempt")
    except AssertionError as exc:
        seen = last[0] if last else None
        detail = "" if seen is None else \
            f" (last seen: {seen.state}, attempts {seen.attempts}, {seen.last_error!r})"
        raise AssertionError(f"{exc}{detail}") from None
    assert task is not None
    return task
