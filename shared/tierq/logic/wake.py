"""Waking the dispatcher when a task of a queue with a consumer becomes ready while no
dispatcher is running — once, not once per task.

A dispatcher that is taking batches holds the flag ``tq:dispatch:awake`` (a key of its own,
its own cluster slot) with its token and a time-to-live a little past the moment it stops
taking batches. Whatever makes a task ready goes through the warm tier's push
(``logic.admission.push``: enqueue, the delayed mover, a retry due now, a release, the
reaper's re-queue and restore, promotion by the cold -> warm mover, the feeder's refill),
which calls :func:`task_ready` for each queue it pushed to. For a queue with a consumer
that costs one ``SET tq:dispatch:awake … NX PX``, and nothing for other queues. The caller
that sets the flag is the one that wakes the dispatcher, through the installed
:data:`Waker`: an asynchronous Lambda invoke on AWS, a signal to the local stack's
scheduler. Every other caller finds the flag set and does nothing. The flag set by a
waker expires after ``WAKE_PENDING_MS`` should the woken dispatcher never start (the next
ready task, or the schedule, tries again).

A process that found the flag set skips the ``SET`` for the next ``SEEN_AWAKE_MS``. So that
no task slips between a dispatcher going idle and such a skipped check, a dispatcher that
releases the flag waits ``RELEASE_SETTLE_MS`` (longer) before its last look for work, which
finds every task pushed while the flag was still seen (see
:meth:`tierq.logic.dispatch.loop.Dispatcher.run`).

The flag is the one key tierq sets with a time-to-live on purpose (a cache at its maximum
evicts such keys first): losing it early costs one extra wake, never a task.

A dispatcher never wakes a dispatcher: its own retries and releases find the flag it holds,
and a dispatcher process installs no waker (so no chain of invocations exists for Lambda's
recursion detection to stop; docs/architecture.md §5).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

import redis

from tierq.dal.task_store import Conn
from tierq.logic.context import Context

log = logging.getLogger(__name__)

FLAG_KEY = "tq:dispatch:awake"
# how long the flag a waker sets lasts if the dispatcher it woke never takes it over
WAKE_PENDING_MS = 30_000
# a process that saw the flag set trusts that for this long without asking again
SEEN_AWAKE_MS = 100
# a dispatcher that released the flag looks for work once more after this long (> SEEN)
RELEASE_SETTLE_MS = 250

Waker = Callable[[], None]

_waker: Waker | None = None
_seen_awake_until = 0.0  # time.monotonic() until which the flag counts as set
_lock = threading.Lock()

# compare-and-delete: release the flag only if it is still this dispatcher's
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def install(waker: Waker | None) -> Waker | None:
    """Make ``waker`` this process's way to wake the dispatcher (None: no waking, as in a
    dispatcher's own process); returns the one it replaces."""
    global _waker, _seen_awake_until
    with _lock:
        previous, _waker = _waker, waker
        _seen_awake_until = 0.0
    return previous


def installed() -> Waker | None:
    return _waker


def task_ready(ctx: Context, queue: str, *, conn: Conn | None = None) -> bool:
    """Tasks of ``queue`` became ready (pushed to the warm tier): wake the dispatcher if the
    queue has a consumer and none is running. Returns whether this call woke it. Never
    raises: a failed wake leaves the task to the schedule (at most a minute). ``conn``: a
    connection the caller holds, where the queue's settings are read on a cache miss."""
    global _seen_awake_until
    waker = _waker
    if waker is None:
        return False
    try:
        if getattr(ctx.queue_settings.get(queue, conn=conn), "consumer", None) is None:
            return False
        if time.monotonic() < _seen_awake_until:
            return False
        token = f"wake-{uuid.uuid4().hex}"
        if not ctx.warm.client.set(FLAG_KEY, token, nx=True, px=WAKE_PENDING_MS):
            _seen_awake_until = time.monotonic() + SEEN_AWAKE_MS / 1000
            return False
        waker()
        return True
    except Exception:
        log.warning("waking the dispatcher for %r failed; the schedule will run it", queue,
                    exc_info=True)
        return False


def hold(ctx: Context, token: str, ttl_ms: int) -> None:
    """Set the flag to this dispatcher's token (taking over a waker's), for ``ttl_ms``."""
    ctx.warm.client.set(FLAG_KEY, token, px=max(1, int(ttl_ms)))


def release(ctx: Context, token: str) -> bool:
    """Drop the flag if it is still this dispatcher's; whether it was."""
    try:
        return bool(ctx.warm.client.eval(_RELEASE, 1, FLAG_KEY, token))
    except redis.exceptions.RedisError:
        log.warning("releasing the dispatcher's flag failed; it expires on its own",
                    exc_info=True)
        return False


def holder(ctx: Context) -> str | None:
    """The flag's token (a dispatcher's, or ``wake-…`` while a wake is pending), or None."""
    raw = ctx.warm.client.get(FLAG_KEY)
    return None if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)
