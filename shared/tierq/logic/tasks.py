"""One task: its status, cancelling it (kept as ``cancelled``) and deleting it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

import orjson

from tierq.config import MAX_INVOCATION_SECONDS, Settings
from tierq.core.ids import attempt_of_token
from tierq.core.lazy import lazy_module
from tierq.core.ordering import place
from tierq.dal.store.rows import TaskRow
from tierq.dal.warm_tier import RemovedLease
from tierq.errors import NotFound, TaskFinished
from tierq.logic import waits
from tierq.logic.context import Context, from_ms, to_ms

if TYPE_CHECKING:
    from tierq.logic import flows, groups
    from tierq.models import tasks as task_models
    from tierq.models.tasks import TaskState, TaskView
else:
    # (the task models: by the first task viewed, not every function's; flows and groups:
    # by the first cancel)
    task_models = lazy_module("tierq.models.tasks")
    flows = lazy_module("tierq.logic.flows")
    groups = lazy_module("tierq.logic.groups")


def _json(value: str | None) -> Any:
    return None if value is None else orjson.loads(value)


def view(row: TaskRow, *, leased_by: str | None = None,
         lease_deadline_ms: int | None = None, state: str | None = None,
         progress: tuple[int, str] | None = None) -> TaskView:
    """The task of ``row``; ``progress`` (ms, JSON text): its running lease's, in place of
    the row's (the last attempt's)."""
    return task_models.TaskView(
        id=row.id, queue=row.queue, tenant=row.tenant, key=row.key,
        priority=row.priority, payload=_json(row.payload),
        state=cast("TaskState", state or row.state), run_at=row.run_at,
        run_at_initially=row.run_at_initially, attempts=row.attempts,
        max_attempts=row.max_attempts, created_at=row.created_at,
        ready_since=row.ready_since, finished_at=row.finished_at,
        last_error=row.last_error, result=_json(row.result),
        worker=leased_by,
        lease_expires_at=None if lease_deadline_ms is None else from_ms(lease_deadline_ms),
        group=row.grp, trace=_json(row.trace), timeout_seconds=row.timeout_seconds,
        progress=_json(row.progress if progress is None else progress[1]),
        progress_at=row.progress_at if progress is None else from_ms(progress[0]),
    )


def get_task(ctx: Context, queue: str, task_id: UUID) -> TaskView:
    row = ctx.store.task_by_id(queue, task_id)
    if row is None:
        raise NotFound(f"no task {task_id} in queue {queue!r}")
    return row_view(ctx, row)


def row_view(ctx: Context, row: TaskRow, tenant: str | None = None) -> TaskView:
    """The task of ``row`` as GET shows it: with its lease when it holds one, and its
    parents (read as ``tenant``'s, the caller's, when given)."""
    if row.state == "warm":
        lease = ctx.warm.lease_of(row.queue, row.tenant, str(row.id))
        if lease is not None:
            # (the running lease's progress, when it has some; else the last attempt's)
            progress = ctx.warm.progress_of(row.queue, row.tenant,
                                            [(str(row.id), lease.token)]).get(str(row.id))
            return with_parents(ctx, row, view(row, leased_by=lease.worker,
                                               lease_deadline_ms=lease.deadline_ms,
                                               state="leased", progress=progress), tenant)
    return with_parents(ctx, row, view(row), tenant)


def with_parents(ctx: Context, row: TaskRow, task: TaskView,
                 tenant: str | None = None) -> TaskView:
    """The task with what it waits for (a waiting task, or one dead-lettered for a parent:
    its edges) or waited for (a released one: the parents its claims hand out). ``tenant``:
    the caller's, when it has one; the statements read nothing of another tenant's task."""
    if row.state in ("waiting", "dead"):
        waits = flows.parents_of(ctx, row.queue, [str(row.id)], tenant).get(str(row.id))
        if waits:
            task.parents = waits
            return task
    released = ctx.store.parents_of_task(row.queue, row.id, tenant)
    if released is not None:
        task.parents = [task_models.ParentView.model_validate(p) for p in orjson.loads(released)]
    return task


def cancel(ctx: Context, queue: str, task_id: UUID, *, tenant: str | None = None) -> TaskView:
    """Mark an unfinished task ``cancelled`` (POST …/tasks/{id}/cancel): its row is kept
    until its queue's retention ends, as a finished task's. Of ``tenant`` only when given:
    another tenant's task is ``NotFound``, as one that does not exist. A task not leased
    leaves its line at once (warm: out of the ready set; cold, delayed, held or waiting: its
    state is its line). A leased task's lease is dropped at once, which frees its place
    under the queue's limits: the worker's next heartbeat, ack or nack is refused and names
    it in its answer's ``cancelled`` list (logic/leases.py), and nothing is retried. What
    waits on it settles it as ``cancelled`` (logic/flows.py); the next task of its group
    goes on (logic/groups.py); a wait for it answers at once (logic/waits.py). Cancelling
    a task already cancelled answers it as it is; a done or dead one is ``TaskFinished``
    (409), nothing changed.

    A waiting task leaves the warm tier first, then PostgreSQL changes, then a lease ends
    (:func:`leave_line`): Valkey failing first fails the cancel with nothing marked, and its
    retry runs it whole; a worker's lease is ended only once the cancel is committed."""
    before = ctx.store.task_by_id(queue, task_id, tenant)
    if before is None or (tenant is not None and before.tenant != tenant):
        raise NotFound(f"no task {task_id} in queue {queue!r}")
    waited = leave_line(ctx, queue, before) if before.state == "warm" else False
    ended: list[RemovedLease] = []
    row = flows.cancel_mark(ctx, queue, task_id, tenant)
    if row is None:
        now = ctx.store.task_by_id(queue, task_id, tenant)
        if now is None or (tenant is not None and now.tenant != tenant):
            raise NotFound(f"no task {task_id} in queue {queue!r}")
        if now.state == "cancelled":
            # (a retry, or a cancel that raced this one: leaving is idempotent)
            progress = keep_progress(ctx, queue, take_out(ctx, queue, now))
            waits.finished(ctx, queue, [(now.tenant, str(task_id), now.attempts)], "cancelled")
            return view(now, progress=progress)
        raise TaskFinished(f"task {task_id} is {now.state} already: only an unfinished task "
                           "can be cancelled")
    if row.grp is not None:  # its group's next task goes on (logic/groups.py)
        mine = [(row.tenant, row.grp)]
        groups.after_finish(ctx, queue, mine, held_gone=mine if row.state == "held" else ())
    if row.state == "warm" and (not waited or _moved(before, row)):
        # its lease ends, or it went warm (or moved) since it was read
        ended = take_out(ctx, queue, row)
    progress = keep_progress(ctx, queue, ended)
    waits.finished(ctx, queue, [(row.tenant, str(task_id), row.attempts)], "cancelled")
    now_row = row._replace(state="cancelled")
    return view(now_row, progress=progress)


def gone_ttl_ms(settings: Settings) -> int:
    """How long a cancelled or deleted task's tombstone is kept in the warm tier (ms): longer
    than any push can lag behind its read of the task's row.

    A push reads its rows (an enqueue's insert, the mover's promotion, a claim's refill, a
    retry, a release, the reconciler's take-over) and pushes them right after that commit,
    in the same invocation. The Lambda runtime ends any invocation within
    MAX_INVOCATION_SECONDS (900 s; the HTTP functions within 29 s, a maintenance pass
    within its budget, at most 600 s, plus one statement). A statement in between ends
    within the statement timeout. The engine already counts an admission still unpushed
    after ``admission_stale_seconds`` as a crashed one, and the reconciler leaves a row to
    its writer for ``reconcile_grace_seconds``. Twice the longest of these (30 min by
    default) leaves a margin for a process outside Lambda, which no runtime ends."""
    longest = max(MAX_INVOCATION_SECONDS, settings.statement_timeout_ms / 1000,
                  settings.admission_stale_seconds, settings.reconcile_grace_seconds)
    return int(2 * longest * 1000)


def _moved(before: TaskRow, after: TaskRow) -> bool:
    """Whether the row's place in the warm tier differs from the one read before (its state
    or its place in line): the removal made with ``before`` may have missed it."""
    return (before.state != "warm"
            or (before.priority, before.seq) != (after.priority, after.seq))


def leave_line(ctx: Context, queue: str, row: TaskRow) -> bool:
    """Take the task of ``row`` out of the ready set if it waits there, and leave a
    tombstone of its id (a push that read it as ready before its cancel or delete committed
    leaves it out: lua/remove.lua, lua/push_ready.lua); whether it was waiting. A task a
    worker holds keeps its lease: :func:`take_out` ends it after the change.

    A cancel or delete calls it before its PostgreSQL change:

    ====================================  ==============================================
    what fails                            what follows
    ====================================  ==============================================
    this call (Valkey)                    nothing changed; the retry does it all (after
                                          the change, a delete's retry would find no row
                                          while the task could still be claimed once)
    the PostgreSQL change, after it       the task is out of line, its row live: a retry
                                          finishes; without one, the reconciler puts it
                                          back once its tombstone lapses (``gone_ttl_ms``);
                                          a worker holding it keeps its lease and its ack
    the lease's end, after the change     the worker's ack is refused (the row is
                                          cancelled or gone); the lease lapses
    ====================================  ==============================================

    The removal drops the data by id, so a ready-set member at an older place is skipped by
    a claim (lua/claim.lua). A row read as not warm (or at another place) that went warm
    before the change is taken out after it, as a push that reads it then is refused by the
    tombstone."""
    waiting, _ = ctx.warm.remove_leased(queue, row.tenant,
                                        [place(row.priority, row.seq, str(row.id))],
                                        gone_ms=to_ms(ctx.now()),
                                        gone_ttl_ms=gone_ttl_ms(ctx.settings),
                                        with_leases=False)
    return waiting > 0


def take_out(ctx: Context, queue: str, row: TaskRow) -> list[RemovedLease]:
    """Take the task of ``row`` out of the warm tier (its place in line, or its lease) and
    give back the queue-wide reservations (max_leased) of the leases that took (whatever
    claimed it meanwhile: named by the removal itself); the leases it ended. Leaves a
    tombstone of its id (:func:`leave_line`)."""
    _, ended = ctx.warm.remove_leased(queue, row.tenant,
                                      [place(row.priority, row.seq, str(row.id))],
                                      gone_ms=to_ms(ctx.now()),
                                      gone_ttl_ms=gone_ttl_ms(ctx.settings))
    if ended:
        # (imported here: the enqueue and cron functions load this module, not leases)
        from tierq.logic.leases import free_reservations
        free_reservations(ctx, queue, [lease.token for lease in ended])
    return ended


def keep_progress(ctx: Context, queue: str,
                  ended: list[RemovedLease]) -> tuple[int, str] | None:
    """Write the last progress of the leases a cancel ended to its cancelled row; returned
    when it was (ms, JSON text)."""
    written: tuple[int, str] | None = None
    for lease in ended:
        attempt = attempt_of_token(lease.token)
        if lease.progress is None or attempt is None:
            continue
        at_ms, text = lease.progress
        if ctx.store.cancelled_progress(queue, lease.id, attempt, text, from_ms(at_ms)):
            written = lease.progress
    return written


def cancel_task(ctx: Context, queue: str, task_id: UUID, *,
                tenant: str | None = None) -> TaskView:
    """Delete a task whatever its state (DELETE …/tasks/{id}): gone, a GET after it is
    404 (another ``tenant``'s is ``NotFound``, checked before anything changes and again
    in the statement that deletes); a worker holding its lease gets ``not_owner`` on ack
    (no ``cancelled`` list: the row that would say so is gone; :func:`cancel` keeps it).
    A waiting task leaves the warm tier first, then PostgreSQL changes, then a lease ends
    (:func:`leave_line`): a deleted task never runs, and a delete failed by Valkey first
    changed nothing, so its retry deletes. What waits on it settles it as cancelled, in
    the same transaction (logic/flows.py); the next task of its group is released
    (logic/groups.py)."""
    before = ctx.store.task_by_id(queue, task_id, tenant)
    if before is None or (tenant is not None and before.tenant != tenant):
        raise NotFound(f"no task {task_id} in queue {queue!r}")
    waited = leave_line(ctx, queue, before) if before.state == "warm" else False
    row = flows.cancel(ctx, queue, task_id, tenant)
    if row is None:
        raise NotFound(f"no task {task_id} in queue {queue!r}")
    if row.grp is not None:  # its group's next task goes on (logic/groups.py)
        mine = [(row.tenant, row.grp)]
        groups.after_finish(ctx, queue, mine, held_gone=mine if row.state == "held" else ())
    if row.state == "warm" and (not waited or _moved(before, row)):
        take_out(ctx, queue, row)  # its lease ends, or it went warm (or moved) since read
    waits.finished(ctx, queue, [(row.tenant, str(task_id), row.attempts)], "deleted")
    return view(row)
