"""Flows: tasks that wait for other tasks (``after``), and graphs of them made in one request.

A task enqueued with ``after`` is ``waiting`` (docs/architecture.md §2). Its edges and its
count of unfinished parents are written in the transaction that inserts it
(:func:`add_waits`), which also counts and locks each parent (``waiters``). Whatever
finishes a parent settles its edges in the same transaction (:func:`settle`): an ack of a
task others wait on (:func:`ack_waited`: the row is kept done, its result too, so the
children read it), a nack or an expiry that dead-letters one (:func:`record_waited`), a
cancel (:func:`cancel`). The settlement that brings a child's count to zero releases it
there, in slices of :data:`SETTLE_SLICE` edges (one statement each, far within the statement
timeout), so a child is released exactly once, in that transaction:

=====================================  ==================================================
its parents                            the waiting task
=====================================  ==================================================
each finished ``done``                 released: delayed until its run_at, made ready at
                                       once after the commit when it has passed
one ``dead`` or ``cancelled``,         dead-lettered at once, naming the parent; its edges
``on_parent_failure: dead``            stay, so replaying the parent re-arms it
                                       (:func:`on_replay`)
one ``dead`` or ``cancelled``,         released like the first row once every parent is
``on_parent_failure: run``             finished, told each parent's final state
waited past ``wait_timeout_seconds``   dead-lettered as ``waited_too_long`` (:func:`expire`)
=====================================  ==================================================

A released task's ``parents`` (each parent's id, queue, final state and result; the results
left out past :data:`MAX_PARENT_RESULT_BYTES` in all) are set on its row and ride in its warm
data (``admission.task_blob``'s ``pa``), since a claim does not read PostgreSQL. A task
dead-lettered here is itself a finished parent: its own waiters are settled in the same
transaction, down the graph.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from tierq.core.ids import uuid7_strings
from tierq.core.lazy import lazy_dataclass, lazy_module
from tierq.dal.shards import tag_ids, tag_of
from tierq.dal.store.rows import OutcomeRow, ReleasedRow, SettledRow, TaskRow
from tierq.dal.task_store import Conn
from tierq.errors import InvalidInput
from tierq.logic import admission
from tierq.logic.admission import Target
from tierq.logic.context import Context, to_datetime
from tierq.models.bounds import MAX_PARENTS
from tierq.models.names import DEFAULT_TENANT

if TYPE_CHECKING:
    from tierq.models import flows as flow_models
    from tierq.models import tasks as task_models
    from tierq.models.flows import FlowIn, FlowResult
    from tierq.models.tasks import ParentView
else:  # (the flow models: the flows route's and a replay's, not every function's)
    flow_models = lazy_module("tierq.models.flows")
    # (the task models: by a flow's first task or parents' view, not every function's)
    task_models = lazy_module("tierq.models.tasks")

# a parent's waiting children at most
MAX_WAITING_CHILDREN = 10_000
# parents' results copied into a released child's warm data at most, in all
MAX_PARENT_RESULT_BYTES = 256 * 1024
# edges settled (and children released) per statement
SETTLE_SLICE = 1_000
# released tasks made ready per statement
READY_SLICE = 1_000
# a replay re-arms the tasks below the replayed ones level by level, and starts no further
# level once this many are re-armed, nor past REARM_LEVELS levels
MAX_REARMED = 10_000
REARM_LEVELS = 100
WAITED_TOO_LONG = "waited_too_long"

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Wait:
    """A task about to wait: its id, tenant and parents (ids), its rules, and the field
    that names its ``after`` in errors."""

    child: str
    tenant: str
    parents: list[str]
    on_parent_failure: str
    wait_until: datetime | None
    where: str


@lazy_dataclass
class Released:
    """What a settlement released, to finish after its commit."""

    rows: list[ReleasedRow] = field(default_factory=list)

    def extend(self, rows: Sequence[ReleasedRow]) -> None:
        self.rows.extend(rows)


@contextmanager
def scans_by_key(ctx: Context, conn: Conn) -> Iterator[None]:
    """The flow statements run inside plan scans by key (``flow_plans``), and the caller's
    transaction gets its own setting back after them: the other statements of an enqueue,
    an ack or a replay are planned as they would be without flows. On an error the
    transaction is rolled back, and the setting with it."""
    before = ctx.store.flow_plans(conn)
    yield
    ctx.store.plans_back(conn, before)


def check_after(ctx: Context, where: str, parents: Sequence[str]) -> None:
    """Refuse (422, writing nothing) what a task's ``after`` cannot name: more than
    :data:`MAX_PARENTS`, an id twice, or a task on another shard of a sharded deployment
    (its id carries the shard's tag)."""
    if len(parents) > MAX_PARENTS:
        raise InvalidInput.field(f"{where}.after", f"at most {MAX_PARENTS} parents")
    seen: set[str] = set()
    for j, parent in enumerate(parents):
        if parent in seen:
            raise InvalidInput.field(f"{where}.after[{j}]", f"names {parent} twice")
        seen.add(parent)
        if ctx.id_tag is not None and tag_of(parent) != ctx.id_tag:
            raise InvalidInput.field(
                f"{where}.after[{j}]",
                f"task {parent} is on another shard than this task's (queue, tenant): a "
                "task waits only for tasks on its own shard")


def add_waits(ctx: Context, conn: Conn, waits: Sequence[Wait]) -> Released:
    """In the transaction that inserted the waiting tasks: their edges and counts, each
    parent counted and locked. A parent that is not a task of the child's tenant, or that
    has :data:`MAX_WAITING_CHILDREN` waiting already, is 422 naming the field (the caller's
    transaction rolls back: nothing is written). A parent finished and still kept counts as
    finished; a task whose parents are all finished (or one failed, with
    ``on_parent_failure: dead``) leaves its wait at once."""
    if not waits:
        return Released()
    with scans_by_key(ctx, conn):
        return _add_waits(ctx, conn, waits)


def _add_waits(ctx: Context, conn: Conn, waits: Sequence[Wait]) -> Released:
    flat_parents = [p for w in waits for p in w.parents]
    flat_tenants = [w.tenant for w in waits for _ in w.parents]
    held = {str(r.id): r for r in ctx.store.hold_parents(conn, flat_parents, flat_tenants)}
    parents, children, queues, positions, states = [], [], [], [], []
    pending: list[int] = []
    failed: list[str | None] = []
    for w in waits:
        left = 0
        failed_parent: str | None = None
        for j, parent in enumerate(w.parents):
            row = held.get(parent)
            if row is None or row.tenant != w.tenant:
                raise InvalidInput.field(
                    f"{w.where}.after[{j}]",
                    f"no task {parent} of tenant {w.tenant!r} (finished tasks count only "
                    "while they are kept)")
            if row.waiters > MAX_WAITING_CHILDREN:
                raise InvalidInput.field(
                    f"{w.where}.after[{j}]",
                    f"task {parent} has {MAX_WAITING_CHILDREN} waiting tasks already")
            state = row.state if row.state in ("done", "dead") else None
            if state is None:
                left += 1
            elif state == "dead" and failed_parent is None:
                failed_parent = parent
            parents.append(parent)
            children.append(w.child)
            queues.append(row.queue)
            positions.append(j)
            states.append(state)
        pending.append(left)
        failed.append(failed_parent)
    ctx.store.insert_edges(conn, parents, children, queues, positions, states)
    ctx.store.insert_waits(conn, [w.child for w in waits], pending,
                           [w.on_parent_failure for w in waits],
                           [w.wait_until for w in waits], failed)
    ids: list[str] = []
    outcomes: list[str] = []
    errors: list[str | None] = []
    for w, left, failed_parent in zip(waits, pending, failed, strict=True):
        if failed_parent is not None and w.on_parent_failure == "dead":
            ids.append(w.child)
            outcomes.append("dead")
            errors.append(f"parent {failed_parent} ended dead")
        elif left == 0:
            ids.append(w.child)
            outcomes.append("ready")
            errors.append(None)
    released = Released()
    if ids:
        released.extend(_release(ctx, conn, ids, outcomes, errors))
    return released


def _release(ctx: Context, conn: Conn, ids: Sequence[str], outcomes: Sequence[str],
             errors: Sequence[str | None],
             settled: dict[str, str] | None = None) -> list[ReleasedRow]:
    """Tasks leave their wait (only those still waiting), in slices; those dead-lettered
    here are settled as parents in turn, down the graph. ``settled``: the final state of
    each parent whose settlement freed them, by id (their edges carry none)."""
    out: list[ReleasedRow] = []
    now = to_datetime(ctx.now())
    for start in range(0, len(ids), SETTLE_SLICE):
        out.extend(ctx.store.release_waiting(
            conn, ids[start:start + SETTLE_SLICE], outcomes[start:start + SETTLE_SLICE],
            errors[start:start + SETTLE_SLICE], now, MAX_PARENT_RESULT_BYTES,
            settled or {}))
    dead = [str(r.id) for r in out if r.state == "dead"]
    if dead:
        out.extend(_settle(ctx, conn, dead, ["dead"] * len(dead)))
    return out


def _settle(ctx: Context, conn: Conn, ids: Sequence[str],
            states: Sequence[str]) -> list[ReleasedRow]:
    """Settle the edges of finished parents (``states``: done, dead or cancelled) and
    release the children that settles, a slice of edges per statement."""
    released: list[ReleasedRow] = []
    by_id = dict(zip(ids, states, strict=True))
    while True:
        rows = ctx.store.settle_parents(conn, ids, states, SETTLE_SLICE)
        released.extend(_release_settled(ctx, conn, rows, by_id))
        if sum(r.settled for r in rows) < SETTLE_SLICE:
            return released


def _release_settled(ctx: Context, conn: Conn, rows: Sequence[SettledRow],
                     settled: dict[str, str]) -> list[ReleasedRow]:
    """Release what a slice of settlement freed or failed; each of them at once, in the
    same transaction: settle_parents leaves the edges of a freed child to this release."""
    ids: list[str] = []
    outcomes: list[str] = []
    errors: list[str | None] = []
    for r in rows:
        if r.failed_parent is not None and r.on_parent_failure == "dead":
            if r.failed_state is None:  # a parent failed before: dead-lettered then
                continue
            ids.append(str(r.child))
            outcomes.append("dead")
            errors.append(f"parent {r.failed_parent} ended {r.failed_state}")
        elif r.pending == 0:
            ids.append(str(r.child))
            outcomes.append("ready")
            errors.append(None)
    return _release(ctx, conn, ids, outcomes, errors, settled) if ids else []


def settle(ctx: Context, conn: Conn, ids: Sequence[str], state: str) -> Released:
    """In the transaction that finished these parents (all in ``state``): settle their
    edges and release what that frees (run by :func:`finishing`, which makes the released
    tasks ready in that transaction too)."""
    released = Released()
    if ids:
        with scans_by_key(ctx, conn):
            released.extend(_settle(ctx, conn, ids, [state] * len(ids)))
    return released


def _due(ctx: Context, released: Released) -> list[Target]:
    now = ctx.now()
    return [Target(str(r.id), r.queue, r.tenant) for r in released.rows
            if r.state == "delayed" and r.run_at.timestamp() <= now]


def finish(ctx: Context, released: Released) -> dict[str, str]:
    """After the commit of an enqueue that released tasks: make those whose run_at has come
    ready (warm or cold), in slices; the state each ended in, by id. A failure here is
    logged, not raised (the enqueue has committed): the tasks are delayed and due, and the
    delayed mover makes them ready."""
    states: dict[str, str] = {str(r.id): r.state for r in released.rows}
    due = _due(ctx, released)
    try:
        for start in range(0, len(due), READY_SLICE):
            for row in admission.ready_now(ctx, due[start:start + READY_SLICE]):
                states[str(row.id)] = row.state
    except Exception:
        log.warning("released tasks not made ready after the commit (the delayed mover "
                    "will)", exc_info=True)
    return states


def _abandon(ctx: Context, pending: list[admission.Pending]) -> None:
    for p in pending:
        admission.abandon(ctx, p)
    pending.clear()


def finishing(ctx: Context, what: str,
              body: Callable[[Conn], tuple[T, Released]]) -> tuple[T, dict[str, str]]:
    """``body`` (what finishes parents, and their settlement) in one transaction, which
    also makes the released tasks whose run_at has come ready; run again when PostgreSQL
    aborts it as a deadlock's victim (``Database.run_transaction``: a release locks rows
    in an order an enqueue, a cancel or an expiry may meet in the other). After the commit
    only the pushes to the warm tier: should one fail, it is logged, and the reconciler
    pushes those warm rows (the caller is answered by the commit, never 5xx after it).
    Returns body's value and the state each released task ended in, by id."""
    pending: list[admission.Pending] = []

    def run(conn: Conn) -> tuple[T, Released]:
        _abandon(ctx, pending)  # (what a run rolled back registered)
        value, released = body(conn)
        due = _due(ctx, released)
        for start in range(0, len(due), READY_SLICE):
            pending.append(admission.make_ready(ctx, conn, due[start:start + READY_SLICE]))
        return value, released

    try:
        value, released = ctx.db.run_transaction(run, what=what)
    except BaseException:
        _abandon(ctx, pending)
        raise
    states: dict[str, str] = {str(r.id): r.state for r in released.rows}
    for p in pending:
        try:
            refused = admission.finish(ctx, p)
        except Exception:
            log.warning("%s: %d released task(s) not pushed after the commit (the "
                        "reconciler will)", what, len(p.rows), exc_info=True)
            refused = set()
        states.update((str(r.id), "cold" if str(r.id) in refused else r.state)
                      for r in p.rows)
    return value, states


# -- the paths that finish parents -------------------------------------------------------------

def ack_waited(ctx: Context, queue: str, ids: Sequence[str], tenants: Sequence[str],
               results: Sequence[Any], attempts: Sequence[int]) -> list[str]:
    """Acks of tasks that others wait on (the plain ack statements leave them): kept done
    with their result (or none), settled, and the children that frees made ready, in one
    transaction (:func:`finishing`); the ids acked. Each task only when it is of the tenant
    given with it (its lease's)."""
    if not ids:
        return []
    values = [None if r is None else orjson.dumps(r).decode() for r in results]

    def body(conn: Conn) -> tuple[list[str], Released]:
        kept = ctx.store.ack_keep_waited(conn, queue, to_datetime(ctx.now()), ids, tenants,
                                         values, attempts)
        return kept, settle(ctx, conn, kept, "done")

    kept, _ = finishing(ctx, "the ack of awaited tasks", body)
    return kept


def record_waited(ctx: Context, queue: str, ids: Sequence[str], tenants: Sequence[str],
                  attempts: Sequence[int], errors: Sequence[str],
                  retry_ats: Sequence[datetime], deads: Sequence[bool]) -> list[OutcomeRow]:
    """Failed attempts of tasks that others wait on (the plain statement leaves them): the
    outcome recorded and, for those dead-lettered, their edges settled, in one
    transaction; the outcome rows. Each task only when it is of the tenant given with it."""
    if not ids:
        return []

    def body(conn: Conn) -> tuple[list[OutcomeRow], Released]:
        rows = ctx.store.lease_outcomes(queue, to_datetime(ctx.now()), ids, tenants, attempts,
                                        errors, retry_ats, deads, waited=True, conn=conn)
        return rows, settle(ctx, conn, [str(r.id) for r in rows if r.state == "dead"], "dead")

    rows, _ = finishing(ctx, "the failed attempts of awaited tasks", body)
    return rows


def cancel(ctx: Context, queue: str, task_id: uuid.UUID,
           tenant: str | None = None) -> TaskRow | None:
    """Cancel a task (of ``tenant`` when given): its row deleted; when it waited, its wait
    is dropped; when others wait on it, they settle it as ``cancelled``; one transaction
    (:func:`finishing`). The row, or None."""
    def body(conn: Conn) -> tuple[TaskRow | None, Released]:
        row = ctx.store.cancel_task(queue, task_id, tenant, conn=conn)
        if row is None:
            return None, Released()
        with scans_by_key(ctx, conn):
            ctx.store.forget_waits(conn, [str(task_id)])
        return row, settle(ctx, conn, [str(task_id)], "cancelled")

    row, _ = finishing(ctx, "a cancel", body)
    return row


def cancel_mark(ctx: Context, queue: str, task_id: uuid.UUID,
                tenant: str | None) -> TaskRow | None:
    """Mark an unfinished task ``cancelled`` (of ``tenant`` when given), its row kept: when
    it waited, its wait is dropped; when others wait on it, they settle it as
    ``cancelled`` (their own ``on_parent_failure`` then applies: dead-lettered, or run); one
    transaction (:func:`finishing`). The row with the state it had before, or None."""
    def body(conn: Conn) -> tuple[TaskRow | None, Released]:
        row = ctx.store.cancel_mark(queue, task_id, tenant, to_datetime(ctx.now()), conn=conn)
        if row is None:
            return None, Released()
        if row.state == "waiting":
            with scans_by_key(ctx, conn):
                ctx.store.forget_waits(conn, [str(task_id)])
        return row, settle(ctx, conn, [str(task_id)], "cancelled")

    row, _ = finishing(ctx, "a cancel", body)
    return row


def forget(ctx: Context, ids: Sequence[str]) -> None:
    """Deleted tasks (dead letters purged) wait for nothing any more: their edges and counts
    go, their parents' ``waiters`` down, in one short transaction."""
    if ids:
        def body(conn: Conn) -> None:
            with scans_by_key(ctx, conn):
                ctx.store.forget_waits(conn, ids)

        ctx.db.run_transaction(body, what="the waits of purged dead letters")


def forget_deleted(ctx: Context) -> int:
    """Waits of tasks deleted while they waited (a queue purged, dead letters past their
    retention) go, a slice per transaction, and their parents' ``waiters`` come down (so
    those parents are deleted in turn); how many."""
    forgotten = 0

    def body(conn: Conn) -> list[str]:
        with scans_by_key(ctx, conn):
            ids = ctx.store.waits_of_deleted(conn, SETTLE_SLICE)
            if ids:
                ctx.store.forget_waits(conn, ids)
        return ids

    while True:
        ids = ctx.db.run_transaction(body, what="the waits of deleted tasks")
        forgotten += len(ids)
        if len(ids) < SETTLE_SLICE:
            return forgotten


def forget_deleted_unless_held(ctx: Context) -> tuple[int, int]:
    """:func:`forget_deleted` for the reaper's retention: a wait whose parent another
    transaction holds is passed over, not waited for (logged; forgotten after a later purge
    of dead letters), so one held parent costs its own children's waits alone, not every
    tenant's in its slice. How many waits were forgotten, and how many passed over."""
    forgotten = 0

    def body(conn: Conn) -> tuple[list[str], list[str]]:
        with scans_by_key(ctx, conn):
            ids = ctx.store.waits_of_deleted(conn, SETTLE_SLICE)
            free = ctx.store.waits_with_free_parents(conn, ids)
            if free:
                ctx.store.forget_waits(conn, free)
        return ids, free

    while True:
        ids, free = ctx.db.run_transaction(body, what="the waits of deleted tasks")
        forgotten += len(free)
        if len(free) < len(ids):  # (the next slice would begin with those again: stop)
            log.warning("waits of %d deleted tasks kept, a parent's row held by another "
                        "transaction; forgotten after a later purge of dead letters",
                        len(ids) - len(free))
            return forgotten, len(ids) - len(free)
        if len(ids) < SETTLE_SLICE:
            return forgotten, 0


def on_queue_purged(ctx: Context, queue: str) -> None:
    """After a queue's tasks were purged: what waits on them (in other queues) settles them
    as cancelled, a slice of parents per transaction; and what waited in the queue itself
    waits no more (:func:`forget_deleted`)."""
    forget_deleted(ctx)

    def body(conn: Conn) -> tuple[list[str], Released]:
        with scans_by_key(ctx, conn):
            ids = ctx.store.unsettled_parents_of_queue(conn, queue, SETTLE_SLICE)
        return ids, settle(ctx, conn, ids, "cancelled")

    while True:
        ids, _ = finishing(ctx, "the waiters of a purged queue", body)
        if len(ids) < SETTLE_SLICE:
            return


def on_replay(ctx: Context, conn: Conn, ids: Sequence[str]) -> list[str]:
    """In the transaction that replays dead letters: a replayed task's own wait ends (it
    runs), and what waited for it and was dead-lettered for it waits again (re-armed), down
    the graph: a task re-armed is unfinished again, so what was dead-lettered for it waits
    again too, level by level. No further level is started once :data:`MAX_REARMED` tasks
    are re-armed or past :data:`REARM_LEVELS` levels (logged): below, tasks stay
    dead-lettered, and each one's own replay runs it. The ids re-armed."""
    if not ids:
        return []
    rearmed: list[str] = []
    with scans_by_key(ctx, conn):
        ctx.store.forget_waits(conn, ids)
        now = to_datetime(ctx.now())
        level = list(ids)
        for _ in range(REARM_LEVELS):
            below: list[str] = []
            for start in range(0, len(level), SETTLE_SLICE):
                below.extend(ctx.store.rearm_children(conn, level[start:start + SETTLE_SLICE],
                                                      now))
            rearmed.extend(below)
            level = below
            if not level or len(rearmed) >= MAX_REARMED:
                break
        if level:
            log.warning("a replay re-armed %d task(s) and stopped there: the tasks below "
                        "%d of them stay dead-lettered", len(rearmed), len(level))
    return rearmed


def expire(ctx: Context, limit: int = SETTLE_SLICE) -> int:
    """Dead-letter (``waited_too_long``) up to ``limit`` waiting tasks past their
    ``wait_timeout_seconds``, and settle them as parents, in one transaction
    (:func:`finishing`); how many."""
    def body(conn: Conn) -> tuple[set[str], Released]:
        with scans_by_key(ctx, conn):
            ids = ctx.store.expired_waits(conn, to_datetime(ctx.now()), limit)
            if not ids:
                return set(), Released()
            return set(ids), Released(_release(ctx, conn, ids, ["timeout"] * len(ids),
                                               [WAITED_TOO_LONG] * len(ids)))

    expired, states = finishing(ctx, "the expiry of waits", body)
    return sum(1 for task_id in states if task_id in expired)


def parents_of(ctx: Context, queue: str, task_ids: Sequence[str],
               tenant: str | None = None) -> dict[str, list[ParentView]]:
    """What these tasks of ``queue`` (of ``tenant`` only, when given) wait for (each
    parent, its state so far), by task id."""
    out: dict[str, list[ParentView]] = defaultdict(list)
    for r in ctx.store.waits_of_tasks(queue, task_ids, tenant):
        out[str(r.child)].append(task_models.ParentView(id=r.parent, queue=r.parent_queue,
                                            state=r.parent_state))  # type: ignore[arg-type]
    return dict(out)


# -- POST /v1/flows --------------------------------------------------------------------------

def _order(flow: FlowIn) -> list[int]:
    """The tasks in an order where each comes after the refs it names; a cycle, a ref
    named twice or a ref named but not in the request is 422 naming the field."""
    refs: dict[str, int] = {}
    for i, task in enumerate(flow.tasks):
        if task.ref in refs:
            raise InvalidInput.field(f"tasks[{i}].ref", f"{task.ref!r} names two tasks")
        refs[task.ref] = i
    needs: dict[int, set[int]] = {}
    for i, task in enumerate(flow.tasks):
        needs[i] = set()
        for j, name in enumerate(task.after):
            if name in refs:
                needs[i].add(refs[name])
                continue
            try:
                uuid.UUID(name)
            except ValueError:
                raise InvalidInput.field(
                    f"tasks[{i}].after[{j}]",
                    f"{name!r} is neither a ref of this request nor a task id") from None
    order: list[int] = []
    state: dict[int, int] = {}  # 1: on the path, 2: placed
    for start in range(len(flow.tasks)):
        stack: list[tuple[int, list[int]]] = []
        if state.get(start) == 2:
            continue
        state[start] = 1
        stack.append((start, sorted(needs[start])))
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                state[node] = 2
                order.append(node)
                continue
            nxt = todo.pop()
            if state.get(nxt) == 2:
                continue
            if state.get(nxt) == 1:
                j = flow.tasks[node].after.index(flow.tasks[nxt].ref)
                cycle = [flow.tasks[n].ref for n, _ in stack]
                raise InvalidInput.field(
                    f"tasks[{node}].after[{j}]",
                    f"a cycle: {' -> '.join(cycle[cycle.index(flow.tasks[nxt].ref):])} -> "
                    f"{flow.tasks[nxt].ref}")
            state[nxt] = 1
            stack.append((nxt, sorted(needs[nxt])))
    return order


FlowRecorder = Callable[[Conn, "FlowResult"], None]


def create_flow(ctx: Context, flow: FlowIn, tenant: str | None = None, *,
                record: FlowRecorder | None = None) -> FlowResult:
    """Create a flow's tasks, all or nothing, in one transaction: each task inserted in its
    queue (ready, delayed or waiting), then every edge. ``tenant``: the caller's (a tenant
    token's) or the flow's; ``record(conn, result)``, when given, is called in that
    transaction with the answer (an idempotency record)."""
    from tierq.logic import enqueue as enqueue_logic  # (enqueue imports this module)

    who = tenant or flow.tenant or DEFAULT_TENANT
    order = _order(flow)
    ids = uuid7_strings(len(flow.tasks))
    if ctx.id_tag is not None:
        ids = tag_ids(ids, ctx.id_tag)
    by_ref = {t.ref: ids[i] for i, t in enumerate(flow.tasks)}
    now = ctx.now()
    by_queue: dict[str, list[int]] = defaultdict(list)
    for i in order:
        by_queue[flow.tasks[i].queue].append(i)
    prepared: dict[int, Any] = {}
    for queue, indexes in by_queue.items():
        models = []
        for i in indexes:
            t = flow.tasks[i]
            after = [uuid.UUID(by_ref.get(name, name)) for name in t.after] or None
            models.append(task_models.TaskIn(
                payload=t.payload, priority=t.priority, delay_seconds=t.delay_seconds,
                run_at=t.run_at, max_attempts=t.max_attempts, tenant=who, after=after,
                on_parent_failure=t.on_parent_failure,
                wait_timeout_seconds=t.wait_timeout_seconds, trace=t.trace))
        batch = enqueue_logic.prepare(ctx, queue, models, now, who,
                                      fields=[f"tasks[{i}]" for i in indexes])
        for i, p in zip(indexes, batch, strict=True):
            p.id = ids[i]
            prepared[i] = p

    def answer(states: dict[str, str]) -> FlowResult:
        return flow_models.FlowResult.model_validate({"tenant": who, "tasks": {
            t.ref: {"id": ids[i], "queue": t.queue, "state": states[ids[i]]}
            for i, t in enumerate(flow.tasks)}})

    keep: Callable[[Conn, dict[str, str]], None] | None = None
    if record is not None:
        recorder = record

        def keep(conn: Conn, states: dict[str, str]) -> None:
            recorder(conn, answer(states))

    states = enqueue_logic.insert_flow(
        ctx, {q: [prepared[i] for i in ix] for q, ix in by_queue.items()},
        [prepared[i] for i in order], now, keep)
    return answer(states)
