"""A ``Worker`` whose stop pauses where abandoned tasks could still be reported: at the moment
it lets them go, while its reporter and heartbeat threads still run.

A test of what a stopping Worker sends about a task it abandoned must look in that window:
after :meth:`Worker.run` returned, those threads are joined and nothing could be sent,
whatever the Worker did wrong."""

from __future__ import annotations

import threading
import time
from typing import Any

from tierq.client.worker import Worker
from tierq.client.worker.worker import Ack, HeldLease, Nack


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
