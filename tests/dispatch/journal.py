"""What the test consumers saw, shared by every execution environment of a consumer (each
loads its own copy of tests/dispatch/consumers.py; this module is imported once)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Journal:
    lock: threading.Lock = field(default_factory=threading.Lock)
    runs: Counter[str] = field(default_factory=Counter)  # task id -> times run
    attempts: dict[str, list[int]] = field(default_factory=dict)  # ApproximateReceiveCount
    running_ids: set[str] = field(default_factory=set)
    overlaps: list[str] = field(default_factory=list)  # an id handed out while it ran
    running: dict[str, int] = field(default_factory=dict)  # queue -> invocations now
    max_running: dict[str, int] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    keep_events: bool = False
    # where tests/dispatch/consumers.py's meet and hold wait (set by a test)
    barrier: threading.Barrier | None = None
    gate: threading.Event = field(default_factory=threading.Event)

    @contextmanager
    def invocation(self, event: dict[str, Any]) -> Iterator[None]:
        records = event.get("Records", [])
        queue = records[0]["messageAttributes"]["queue"]["stringValue"] if records else "?"
        ids = [r["messageId"] for r in records]
        with self.lock:
            if self.keep_events:
                self.events.append(event)
            for task_id in ids:
                if task_id in self.running_ids:
                    self.overlaps.append(task_id)
                self.running_ids.add(task_id)
            self.running[queue] = self.running.get(queue, 0) + 1
            self.max_running[queue] = max(self.max_running.get(queue, 0),
                                          self.running[queue])
        try:
            yield
        finally:
            with self.lock:
                self.running[queue] -= 1
                self.running_ids.difference_update(ids)

    def ran(self, task_id: str, attempt: int) -> int:
        with self.lock:
            self.runs[task_id] += 1
            self.attempts.setdefault(task_id, []).append(attempt)
            return self.runs[task_id]

    def reset(self) -> None:
        with self.lock:
            self.runs.clear()
            self.attempts.clear()
            self.running_ids.clear()
            self.overlaps.clear()
            self.running.clear()
            self.max_running.clear()
            self.events.clear()
            self.keep_events = False
            self.barrier = None
            self.gate.set()  # (nothing left waiting)
            self.gate = threading.Event()


JOURNAL = Journal()
