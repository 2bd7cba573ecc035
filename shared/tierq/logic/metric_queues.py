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

The list is read from PostgreSQL (the default shard's) at most once a :data:`CACHE_SECONDS`
per process, off the request path: metrics are counted after a request's work is done
(an enqueue committed, an ack applied, tasks leased), so a read that is slow or fails must
neither fail nor hold that request.

| the list | a request that counts |
| --- | --- |
| read less than a minute ago | uses it |
| older | uses it, and starts a read in a thread (one at a time) |
| none yet, or ``forget()`` called | starts a read, waits for it 1 s at most |
| its read failed (logged) | uses the last list read (none: all count as ``~other``) |

After a failed read the next one waits :data:`RETRY_SECONDS`, doubled after each failure in a
row up to :data:`CACHE_SECONDS`, and no caller waits for it.

A queue configured now has its own series within a minute (at once in the process that
stored its settings). Time is the wall clock: a Lambda environment frozen between
invocations reads the list again once it is thawed a minute later, whatever ran meanwhile.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from tierq.dal.postgres import scoped_timeouts
from tierq.dal.task_store import TaskStore

log = logging.getLogger(__name__)

OTHER = "~other"
MAX_QUEUE_SERIES = 500  # a Metrics Insights alarm query's series limit
CACHE_SECONDS = 60.0
# How long a request without any list waits for the first read (then counts as ~other).
WAIT_SECONDS = 1.0
# The first wait after a failed read; doubled after each failure in a row.
RETRY_SECONDS = 5.0
# The read's own timeouts (it holds a pooled connection in its thread meanwhile).
READ_STATEMENT_TIMEOUT_MS = 5_000
READ_LOCK_TIMEOUT_MS = 1_000


class MetricQueues:
    """The configured queues of one database, read again every :data:`CACHE_SECONDS` in a
    thread of its own (see the module's table); :meth:`configured` never raises."""

    def __init__(self, clock: Callable[[], float] = time.time,
                 wait_seconds: float = WAIT_SECONDS) -> None:
        self._clock = clock
        self._wait_seconds = wait_seconds
        self._lock = threading.Lock()
        self._queues: frozenset[str] = frozenset()
        self._due_at = -math.inf  # when the next read is due (the clock's time)
        self._attempted_at = -math.inf  # when the last read began
        self._failures = 0  # reads failed in a row
        self._must_wait = True  # a caller waits for the read under way: no list yet
        self._generation = 0  # forget() calls: a read begun before the last one is stale
        self._reading: threading.Thread | None = None

    def configured(self, store: TaskStore) -> frozenset[str]:
        """The queues with series of their own (at most :data:`MAX_QUEUE_SERIES`)."""
        give_up_at = time.monotonic() + self._wait_seconds
        while True:
            now = self._clock()
            with self._lock:
                # (a clock set back since the last read: read again)
                if now < self._due_at and now >= self._attempted_at:
                    return self._queues
                reader = self._reading
                if reader is None:
                    reader = self._start(store, now)
                if not self._must_wait:
                    return self._queues
            left = give_up_at - time.monotonic()
            if left <= 0:
                with self._lock:
                    return self._queues
            reader.join(left)
            if reader.is_alive():
                with self._lock:
                    return self._queues
            # done: fresh, or begun before a forget() (then read again), or failed

    def series(self, store: TaskStore, queue: str) -> str:
        """The ``queue`` dimension's value for ``queue``: its name, or :data:`OTHER`."""
        return queue if queue in self.configured(store) else OTHER

    def forget(self) -> None:
        """Read the list again at the next call, and wait for it there (a queue's settings
        were just stored in this process)."""
        with self._lock:
            self._generation += 1
            self._due_at = -math.inf
            self._must_wait = True

    def join(self, timeout: float | None = None) -> None:
        """Wait for the read under way, if any, to end (``timeout`` seconds at most)."""
        with self._lock:
            reader = self._reading
        if reader is not None:
            reader.join(timeout)

    def _start(self, store: TaskStore, now: float) -> threading.Thread:
        """Start a read (the lock held)."""
        self._attempted_at = now
        reader = threading.Thread(target=self._read, args=(store, self._generation),
                                  name="tierq-metric-queues", daemon=True)
        self._reading = reader
        reader.start()
        return reader

    def _read(self, store: TaskStore, generation: int) -> None:
        try:
            with scoped_timeouts(READ_STATEMENT_TIMEOUT_MS, READ_LOCK_TIMEOUT_MS):
                queues = frozenset(store.metric_queues(MAX_QUEUE_SERIES))
        except Exception as exc:  # (anything: counting must not fail the work it counts)
            with self._lock:
                self._failures += 1
                pause = min(CACHE_SECONDS, RETRY_SECONDS * 2 ** (self._failures - 1))
                self._due_at = self._clock() + pause
                self._must_wait = False  # no caller waits on a failing database
                self._reading = None
            log.warning("metric queues: reading the configured queues failed (%s: %s); "
                        "the last list read is used, read again in %gs", type(exc).__name__,
                        str(exc)[:200], pause)
            return
        with self._lock:
            self._queues = queues
            self._failures = 0
            if generation == self._generation:
                self._due_at = self._clock() + CACHE_SECONDS
                self._must_wait = False
            self._reading = None
