"""Waiting for a task's end: ``GET /v1/queues/{queue}/tasks/{id}?wait_seconds=N``.

A wait answers as soon as its task is done, dead, cancelled or deleted, or after ``N``
seconds with the task as it stands. It is woken by a message, not by polling PostgreSQL.
Each path that ends a task (ack, a nack or an expired lease that dead-letters it, a cancel,
a delete) calls :func:`finished` after its PostgreSQL commit; an ack or a failed attempt
sends :func:`marker_call` in the round trip of the pair's lease drop instead, after the
drop. Either runs ``lua/task_finished.lua`` in the pair's slot. It writes completion
markers in ``tq:{q|t}:finished``. For each task a wait registered for in
``tq:{q|t}:waiters`` it also sends an SPUBLISH on the task's own sharded channel
``tq:{q|t}:finished:<id>``. A call costs a fixed number of commands whatever its tasks
(one multi-field HSET; no publish at all when no one waits): the markers are on every
ack's path, waits are rare.
ElastiCache Serverless runs in cluster mode and has no keyspace notifications; a sharded
channel in the pair's hash tag stays on the pair's master.

The protocol of one wait (:func:`get_task`):

1. Read the row (PostgreSQL). Gone, or another tenant's: 404 at once (a tenant caller's own
   task acked without a result answers ``done`` from its marker). Done, dead or cancelled:
   answered.
2. SSUBSCRIBE to the task's channel, and wait for the server's confirmation.
3. Register the wait in ``tq:{q|t}:waiters`` and look for the task's marker, in one atomic
   call (``lua/task_wait.lua``). A finish before it left a marker (unless its tenant's
   share dropped it early, see below): read the row again and answer. A finish after it
   sees the registration and publishes to a subscription that is in place (both scripts
   run atomically in the pair's slot).
4. Wait for the message (it carries the task's marker), at most until ``N`` seconds after
   the start; then read the row once more (the answer; a row gone answers from the
   message's marker), whichever came first. Leaving, take the registration back
   (best-effort: a finish drops the registrations it published to, and a pair's hash
   expires ``WAITERS_TTL_MS`` after its last registration, so one left behind costs at
   most a useless publish).

So a wait runs two PostgreSQL reads (three when a marker is stale), whatever ``N``. A stale
marker is one left by an earlier end of a task that lives on (a dead letter replayed): when
the read of step 3 finds the task unfinished, the wait goes on for the message alone.

Markers are kept in two generations, ``tq:{q|t}:finished`` and ``tq:{q|t}:finished_prev``:
the current one is renamed over the previous (the oldest generation dropped whole) once it
is ``MARKER_TTL_MS`` old (five minutes) or would hold more than half ``MARKERS_PER_PAIR``,
and each generation expires twice the TTL after it began. So a marker is kept at least five
minutes (unless the cap pushed it out) and at most ten, a pair keeps at most
``MARKERS_PER_PAIR`` (about 124 bytes each, about 1.2 MB), made only by work the tenant's
requests (acks, nacks) and leases did, and an idle pair's keys are gone at most ten
minutes after it goes quiet. A lookup reads the current generation, then the previous.
Markers count against their tenant's share of the warm tier (logic/tenant_budget.py): under
a bound a pair's older generation goes early when the markers would pass the room its
allotment leaves beside its tasks (at least 64 are kept, and each call's own when it is
written), and the pair's markers give way to its tasks (lua/warm_usage.lua). So a tenant
finishing work in many queues holds little beyond its share. An early drop is noted in the
pair's meta: a wait that registers within 30 s of one and finds no marker reads its row
once more (``lua/task_wait.lua`` answers ``~dropped``) and answers at once, a row gone as
one past its TTL does (404), never after its whole time.

A task acked without a result and read after its row is gone answers a view from its
marker: id, queue, tenant, state ``done``, attempts, when it was created (from its UUIDv7)
and finished; what only the row held (payload, key, priority) is left at defaults,
``max_attempts`` at its attempts.

A marker and its message are best-effort: when Valkey cannot take them, the work is still
committed and a waiter answers at the end of its wait, as the task stands then. A
subscription that breaks while it waits answers at once, as the task stands (a client's
``wait`` reads again). A dead letter
purged, a queue purged, or a task dead-lettered because a task it waited for died (flows)
publish nothing: a waiter on it answers at the end of its wait.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING
from uuid import UUID

from tierq.core.lazy import lazy_module
from tierq.dal.lua_calls import TaskFinished
from tierq.dal.store.rows import TaskRow
from tierq.dal.warm_tier import FinishMark, PairKeys
from tierq.errors import NotFound, WarmTierUnavailable
from tierq.logic import tenant_budget
from tierq.logic.context import Context, from_ms

if TYPE_CHECKING:
    from tierq.logic import tasks
    from tierq.models import tasks as task_models
    from tierq.models.tasks import TaskView
else:  # (a task's view and models: by the first wait's answer, not every function's)
    tasks = lazy_module("tierq.logic.tasks")
    task_models = lazy_module("tierq.models.tasks")

log = logging.getLogger(__name__)

# The longest wait a request may ask for: a long poll's bound (the HTTP API answers within
# 30 s, and a wait holds one of its tenant's long-poll places).
MAX_WAIT_SECONDS = 20.0
# How long a completion marker is kept, and the most one pair keeps (see the module's doc).
MARKER_TTL_MS = 300_000
MARKERS_PER_PAIR = 10_000
# How long a pair's registrations of waits are kept after its last one: longer than a wait.
WAITERS_TTL_MS = int(MAX_WAIT_SECONDS * 1000) + 10_000
# States a task does not leave by itself: a wait for one answers at once.
ENDED = frozenset({"done", "dead", "cancelled"})


def finished(ctx: Context, queue: str, ended: Sequence[tuple[str, str, int]],
             state: str) -> None:
    """Tell the waiters of these tasks (tenant, id, attempt) of ``queue`` that they ended in
    ``state`` (``done``, ``dead`` or ``deleted``): a marker and a message per task, one
    script call per pair. Called after the PostgreSQL commit; never raises (a waiter then
    answers at the end of its wait)."""
    if not ended:
        return
    by_pair: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for tenant, task_id, attempt in ended:
        by_pair[tenant].append((task_id, state, attempt))
    for tenant, items in by_pair.items():
        try:
            ctx.warm.task_finished(queue, tenant, items, ttl_ms=MARKER_TTL_MS,
                                   cap=MARKERS_PER_PAIR,
                                   charge=tenant_budget.charge(ctx, queue, tenant))
        except Exception as exc:  # (best-effort: the outcome is committed already)
            log.warning("waits: %d task(s) of %r/%r ended %s, their waiters not told "
                        "(they answer at the end of their wait): %s: %s", len(items), queue,
                        tenant, state, type(exc).__name__, str(exc)[:200])


def marker_call(queue: str, tenant: str, items: Sequence[tuple[str, str, int]]
                ) -> TaskFinished | None:
    """The markers and messages of these tasks (id, state, attempt) of one pair as one
    script call, for the pipeline of the pair's lease drop (logic/leases.py): one round trip
    fewer per pair an ack ends. None when they need more than one call (then
    :func:`finished` sends them). It does not look at the pair's room in its tenant's share
    (charge 0: about 13 µs of Valkey a call fewer): the markers take less than the leases
    the drop ends, 128 bytes against 640 each (lua/task_finished.lua)."""
    if not items or len(items) > TaskFinished.items_per_call():
        return None
    return TaskFinished(PairKeys.of(queue, tenant), MARKER_TTL_MS, MARKERS_PER_PAIR, 0, items)


def check_wait(wait_seconds: float) -> None:
    """``ValueError`` naming ``wait_seconds`` unless 0 ≤ it ≤ ``MAX_WAIT_SECONDS``."""
    if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
        raise ValueError(f"wait_seconds must be between 0 and {MAX_WAIT_SECONDS:g}, got "
                         f"{wait_seconds:g}")


def get_task(ctx: Context, queue: str, task_id: UUID, *, wait_seconds: float = 0,
             tenant: str | None = None) -> TaskView:
    """The task; with ``wait_seconds`` > 0, once it is done, dead or deleted, or after that
    long as it stands (the protocol in the module's doc). ``tenant``: the caller's (None: an
    admin); another tenant's task is ``NotFound`` at once."""
    check_wait(wait_seconds)
    started = time.monotonic()
    row = ctx.store.task_by_id(queue, task_id, tenant)
    if row is not None and tenant is not None and row.tenant != tenant:
        row = None
    if row is None:
        mark = None
        if wait_seconds > 0 and tenant is not None:
            mark = ctx.warm.finished_of(queue, tenant, str(task_id))
        if mark is not None and mark.state == "done":
            return marker_view(queue, tenant or "", task_id, mark)
        raise NotFound(f"no task {task_id} in queue {queue!r}")
    if wait_seconds <= 0 or row.state in ENDED:
        return tasks.row_view(ctx, row, tenant)
    with ctx.warm.finished_channel(queue, row.tenant, str(task_id)) as receive:
        mark = ctx.warm.wait_begin(queue, row.tenant, str(task_id), ttl_ms=WAITERS_TTL_MS)
        # a message means the publish took the task's registrations (task_finished.lua):
        # taking this one back then could take a later wait's, registered since
        told: str | None = None
        try:
            if mark is not None:  # (a marker, or MARKERS_DROPPED: the row says)
                now = ctx.store.task_by_id(queue, task_id, tenant)
                if now is None or now.state in ENDED:
                    return answer(ctx, queue, row, now, mark, tenant)
                # a marker of an earlier end (a dead letter replayed): the message alone now
            left = wait_seconds - (time.monotonic() - started)
            if left > 0:
                try:
                    told = receive(left)
                except WarmTierUnavailable as exc:  # (the subscription broke: answer now)
                    log.warning("waits: the subscription of %s broke, the wait answers "
                                "early: %s", task_id, exc)
        finally:
            if told is None:
                leave(ctx, queue, row.tenant, str(task_id))
    now = ctx.store.task_by_id(queue, task_id, tenant)
    mark = None
    if now is None:  # (the message carries the marker: no lookup, which may come too late)
        mark = message_mark(told) or ctx.warm.finished_of(queue, row.tenant, str(task_id))
    return answer(ctx, queue, row, now, mark, tenant)


def message_mark(message: str | None) -> FinishMark | None:
    """The marker a finish's message carries ('<state>|<attempt>|<ms>'); None for no
    message, or one naming the state alone (a publisher of an earlier release)."""
    if message is None or "|" not in message:
        return None
    return FinishMark.of(message)


def leave(ctx: Context, queue: str, tenant: str, task_id: str) -> None:
    """Take the wait's registration back; best-effort (a registration left costs at most
    a useless publish, and expires with the pair's waiters hash)."""
    try:
        ctx.warm.wait_end(queue, tenant, task_id)
    except Exception as exc:  # (best-effort: the wait's answer stands)
        log.warning("waits: the registration of %s was not taken back: %s: %s", task_id,
                    type(exc).__name__, str(exc)[:200])


def answer(ctx: Context, queue: str, first: TaskRow, now: TaskRow | None,
           mark: FinishMark | None, tenant: str | None = None) -> TaskView:
    """What a wait answers: the row as it is now; for a row gone with a ``done`` marker (acked
    without a result), its first read as done; gone otherwise (deleted), ``NotFound``."""
    if now is not None:
        return tasks.row_view(ctx, now, tenant)
    if mark is None or mark.state != "done":
        raise NotFound(f"no task {first.id} in queue {queue!r}")
    view = tasks.view(first)
    return view.model_copy(update={"state": "done", "attempts": max(mark.attempt,
                                                                     first.attempts),
                                   "finished_at": from_ms(mark.at_ms), "result": None})


def marker_view(queue: str, tenant: str, task_id: UUID, mark: FinishMark) -> TaskView:
    """A task acked without a result, from its marker alone (its row is gone): what only
    the row held is left at defaults (the module's doc)."""
    created = from_ms(task_id.int >> 80)  # (a UUIDv7's first 48 bits: its creation, ms)
    return task_models.TaskView(id=task_id, queue=queue, tenant=tenant, key=None, priority=0,
                    payload=None, state="done", run_at=created, run_at_initially=created,
                    attempts=mark.attempt, max_attempts=max(mark.attempt, 1),
                    created_at=created, finished_at=from_ms(mark.at_ms))
