"""Which queues have CloudWatch series of their own: those an admin configured, at most 500.

A queue's metrics and the alarms on them (template.yaml: ``OldestReadyAgeAlarm``,
``DeadLetteredAlarm``) are grouped by a dimension ``queue``. Were it any name a tenant used,
each invented name would be a new billed metric and could page the operator. So a queue's
own name is the dimension only when the queue has a row in the queue settings
(``tierq_queues``, written by ``PUT /v1/queues/{queue}``, an admin route), and only for the
first :data:`MAX_QUEUE_SERIES` such queues by when their settings were first stored: a
CloudWatch Metrics Insights alarm query returns at most 500 series. Every other queue's
metrics are summed under the one value :data:`OTHER` (``~other``: no queue name starts with
``~``), which the alarms leave out.

The list is read from PostgreSQL at most once a :data:`CACHE_SECONDS` per process, so a
queue configured now has its own series within a minute.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tierq.dal.task_store import TaskStore

OTHER = "~other"
MAX_QUEUE_SERIES = 500  # a Metrics Insights alarm query's series limit
CACHE_SECONDS = 60.0


class MetricQueues:
    """The configured queues of one database, cached for :data:`CACHE_SECONDS`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._read: tuple[float, frozenset[str]] | None = None

    def configured(self, store: TaskStore) -> frozenset[str]:
        """The queues with series of their own (at most :data:`MAX_QUEUE_SERIES`)."""
        now = self._clock()
        with self._lock:
            hit = self._read
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
        queues = frozenset(store.metric_queues(MAX_QUEUE_SERIES))
        with self._lock:
            self._read = (now, queues)
        return queues

    def series(self, store: TaskStore, queue: str) -> str:
        """The ``queue`` dimension's value for ``queue``: its name, or :data:`OTHER`."""
        return queue if queue in self.configured(store) else OTHER

    def forget(self) -> None:
        """Read the list again at the next call (a queue's settings were just stored)."""
        with self._lock:
            self._read = None
