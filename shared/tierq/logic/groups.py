"""Groups: ordered work per key, at most ``group_max_leased`` of a group's tasks at once.

A task enqueued with a ``group`` is *active* (delayed, cold or warm, as any task) while its
group has room, and ``held`` otherwise: held in PostgreSQL in enqueue order (its ``seq``),
invisible to every tier (docs/design-groups.md). Only active tasks are ever ready, so a
claim, the cold line and the warm tier work as for tasks without a group, and a group
blocked behind a leased head keeps nothing of its line in the warm tier.

Each group with work has a row in ``tierq_groups``: the lock that orders an enqueue (or a
replay) against a release. Whatever takes a task of a group out of the active set (an ack,
a nack or an expired lease that dead-letters it, a cancel, a purge) calls
:func:`after_finish` with its groups once its own change is committed: one short
transaction locks them, counts their active tasks, releases the first held ones by ``seq``
(:func:`release`) and makes those due ready; they are pushed after its commit. The count
is taken under the lock, so an enqueue that held a task because a finished task was still
counted is released by that finish's own call. A crash between a
finishing commit and its release leaves a group held with nothing active: the reaper's
sweep (:func:`sweep`) finds such groups and releases them.

A retried task (nack, expired lease) stays active, delayed by its backoff: its group waits
for it. A dead letter replayed joins its group's back (:func:`on_replay`).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import field
from typing import TYPE_CHECKING

from tierq.core import ordering
from tierq.core.lazy import lazy_dataclass
from tierq.dal.store.rows import GroupReleasedRow
from tierq.dal.task_store import Conn
from tierq.logic import admission
from tierq.logic.admission import Target
from tierq.logic.context import Context, to_datetime

if TYPE_CHECKING:
    from tierq.logic.enqueue import Prepared

log = logging.getLogger(__name__)

# groups locked and released per statement
RELEASE_SLICE = 500
# groups the reaper's sweep reads per statement
SWEEP_SLICE = 500

Group = tuple[str, str]  # (tenant, group name) within a queue


@lazy_dataclass
class Released:
    """Held tasks a release made active, to make ready after its commit."""

    queue: str
    rows: list[GroupReleasedRow] = field(default_factory=list)


def _split(groups: Iterable[Group]) -> tuple[list[str], list[str]]:
    ordered = sorted(set(groups))
    return [t for t, _ in ordered], [g for _, g in ordered]


def place(ctx: Context, conn: Conn, queue: str, batch: Sequence[Prepared]) -> None:
    """In the transaction that inserts ``batch``, before its insert: lock the groups of
    its grouped tasks and hold (state ``held``) each task past its group's room, in batch
    order. Count them with :func:`count_placed` once the insert is done."""
    grouped = [p for p in batch if p.group is not None]
    if not grouped:
        return
    tenants, grps = _split((p.tenant, p.group) for p in grouped if p.group is not None)
    # (on a miss, read on this transaction's connection: not a second pooled one)
    limit = ctx.queue_settings.get(queue, conn=conn).group_max_leased
    room = {(r.tenant, r.grp): limit - r.active
            for r in ctx.store.lock_groups(conn, queue, tenants, grps)}
    for p in grouped:
        key = (p.tenant, p.group or "")
        if room[key] > 0:
            room[key] -= 1
        else:
            p.state = "held"


def count_placed(ctx: Context, conn: Conn, queue: str, batch: Sequence[Prepared],
                 created: set[str] | dict[str, int]) -> Released:
    """After the insert of :func:`place`, in its transaction: the tasks created counted on
    their groups. A grouped task not created (it met a live task's key) leaves room that
    a held task of the batch may need, so its groups are released here."""
    active: Counter[Group] = Counter()
    held: Counter[Group] = Counter()
    missed: set[Group] = set()
    for p in batch:
        if p.group is None:
            continue
        key = (p.tenant, p.group)
        if p.id not in created:
            missed.add(key)
        elif p.state == "held":
            held[key] += 1
        else:
            active[key] += 1
    keys = sorted(set(active) | set(held))
    if keys:
        ctx.store.count_group_tasks(conn, queue, to_datetime(ctx.now()),
                                    [t for t, _ in keys], [g for _, g in keys],
                                    [active[k] for k in keys], [held[k] for k in keys])
    released = Released(queue)
    if missed:
        released.rows.extend(release(ctx, conn, queue, missed))
    return released


def release(ctx: Context, conn: Conn, queue: str, groups: Iterable[Group],
            ticket: admission.Ticket | None = None) -> list[GroupReleasedRow]:
    """In the caller's transaction: lock the groups (name order), then release each one's
    first held tasks up to ``group_max_leased`` active, a slice of groups per statement;
    the tasks released. With an admission ``ticket`` (begun for the groups' pairs), those
    due are made ready in the same statement (push them after the commit); without one,
    they are delayed (call :func:`finish` after the commit)."""
    tenants, grps = _split(groups)
    limit = ctx.queue_settings.get(queue, conn=conn).group_max_leased
    now = to_datetime(ctx.now())
    states = ["delayed" if ticket is None else ticket.state_for((queue, t)) for t in tenants]
    out: list[GroupReleasedRow] = []
    for start in range(0, len(grps), RELEASE_SLICE):
        part = slice(start, start + RELEASE_SLICE)
        ctx.store.lock_groups_quietly(conn, queue, tenants[part], grps[part])
        # (a statement of its own: it sees every task committed before the locks)
        out.extend(ctx.store.release_group_heads(conn, queue, now, limit, tenants[part],
                                                 grps[part], states[part]))
    return out


def finish(ctx: Context, released: Released) -> dict[str, str]:
    """After the commit of a release: make the released tasks whose run_at has come
    ready (warm or cold); the state each ended in, by id. Should this fail, they are
    delayed and due: the delayed mover makes them ready."""
    states = {str(r.id): "delayed" for r in released.rows}
    now = ctx.now()
    due = [Target(str(r.id), released.queue, r.tenant) for r in released.rows
           if r.run_at.timestamp() <= now]
    for start in range(0, len(due), RELEASE_SLICE):
        for row in admission.ready_now(ctx, due[start:start + RELEASE_SLICE]):
            states[str(row.id)] = row.state
    return states


def after_finish(ctx: Context, queue: str, groups: Iterable[Group],
                 held_gone: Iterable[Group] = ()) -> dict[str, str]:
    """Tasks of these groups left the active set (acked, dead, cancelled, deleted) and were
    committed: release what that frees, in one short transaction, then make it ready.
    ``held_gone``: one entry per held task that went without running (its group's count
    comes down). The states of the tasks released, by id.

    Never raises: the caller's own work is committed, so a failure here must not answer
    it with an error (a retried ack would find its task gone). It is logged, and the
    reaper's sweep (:func:`sweep`) releases a group left with held tasks and none active."""
    return push_released(ctx, release_after_finish(ctx, queue, groups, held_gone))


@lazy_dataclass
class Freed:
    """A release committed (:func:`release_after_finish`) whose tasks are still to push
    (:func:`push_released`); ``pending``'s pushes may be sent along another round trip
    of their pair first (``admission.push_along``)."""

    queue: str
    groups: list[Group]
    rows: list[GroupReleasedRow]
    pending: admission.Pending


def release_after_finish(ctx: Context, queue: str, groups: Iterable[Group],
                         held_gone: Iterable[Group] = ()) -> Freed | None:
    """The first half of :func:`after_finish`: its transaction, committed; None when there
    was nothing to release or it failed (logged: the sweep repairs). Never raises. Call
    :func:`push_released` with what it returns, whatever happens in between."""
    groups, held_gone = list(groups), list(held_gone)
    try:
        return _release(ctx, queue, groups, held_gone)
    except Exception:
        log.warning("groups not released after a commit (the reaper's sweep will): %s",
                    sorted({g for _, g in groups + held_gone}), exc_info=True)
        return None


def push_released(ctx: Context, freed: Freed | None) -> dict[str, str]:
    """The second half of :func:`after_finish`: the tasks released pushed (or the outcome
    of those pushed along read); the state of each, by id. Never raises: should the push
    fail, the rows stay warm and the reconciler puts them back in line (logged)."""
    if freed is None:
        return {}
    try:
        refused = admission.finish(ctx, freed.pending)
    except Exception:
        log.warning("tasks released from groups not pushed (the reconciler will): %s",
                    sorted({g for _, g in freed.groups}), exc_info=True)
        return {}
    return {r.id: "cold" if r.id in refused else r.state for r in freed.rows}


def _release(ctx: Context, queue: str, groups: list[Group],
             held_gone: list[Group]) -> Freed | None:
    gone = Counter(held_gone)
    wanted = set(groups) | set(gone)
    if not wanted:
        return None
    # (those due go ready in the release's own statement: one commit, one row write)
    ticket = admission.begin(ctx, {(queue, tenant) for tenant, _ in wanted})
    try:
        tenants, grps = _split(wanted)
        states = [ticket.state_for((queue, t)) for t in tenants]
        keys = sorted(gone)
        # (the whole transaction in one round trip: the locks, the release, the commit)
        rows = ctx.store.release_groups(
            queue, to_datetime(ctx.now()), ctx.queue_settings.get(queue).group_max_leased,
            [(tenants[i:i + RELEASE_SLICE], grps[i:i + RELEASE_SLICE],
              states[i:i + RELEASE_SLICE]) for i in range(0, len(grps), RELEASE_SLICE)],
            ([t for t, _ in keys], [g for _, g in keys], [gone[k] for k in keys])
            if gone else None)
    except BaseException:
        admission.close(ctx, ticket)
        raise
    return Freed(queue, groups + held_gone, rows,
                 admission.Pending(ticket, [], _push_items(queue, rows)))


def _push_items(queue: str, rows: Sequence[GroupReleasedRow],
                ) -> dict[tuple[str, str], list[admission.PushItem]]:
    """The push of the released tasks admitted warm, per pair (their blobs built by the
    release statement)."""
    items: dict[tuple[str, str], list[admission.PushItem]] = defaultdict(list)
    for r in rows:
        if r.state == "warm":
            items[(queue, r.tenant)].append(
                (r.id, ordering.place(r.priority, r.seq, r.id), r.blob))
    return items


def after_finish_ids(ctx: Context, queue: str, tasks: Sequence[tuple[str, str]]) -> None:
    """:func:`after_finish` for finished tasks whose rows are kept (acked done, dead) and
    whose groups the caller did not read: ``(tenant, id)`` each, read here by id (a row of
    another tenant than the one given is not read)."""
    if tasks:
        rows = ctx.store.groups_of_tasks(queue, [i for _, i in tasks], [t for t, _ in tasks])
        if rows:
            after_finish(ctx, queue, [(r.tenant, r.grp) for r in rows])


def on_replay(ctx: Context, conn: Conn, queue: str, targets: Sequence[Target]) -> set[str]:
    """In the transaction that replays dead letters (reset to delayed, not yet made
    ready): those of groups take their group's lock; each joins its group as active while
    the group has room, and held at its back (a new seq) otherwise. The ids held (the
    caller makes only the others ready)."""
    grouped = ctx.store.grouped_of_ids(conn, [t.id for t in targets])
    if not grouped:
        return set()
    by_id = {r.id: r for r in grouped}
    tenants, grps = _split((r.tenant, r.grp) for r in grouped)
    # (on a miss, read on this transaction's connection: not a second pooled one)
    limit = ctx.queue_settings.get(queue, conn=conn).group_max_leased
    room = {(r.tenant, r.grp): limit - r.active
            for r in ctx.store.lock_groups(conn, queue, tenants, grps)}
    active: Counter[Group] = Counter()
    held: Counter[Group] = Counter()
    held_ids: list[str] = []
    for t in targets:  # (in the order given: the order they join their lines)
        row = by_id.get(t.id)
        if row is None:
            continue
        key = (row.tenant, row.grp)
        if room[key] > 0:
            room[key] -= 1
            active[key] += 1
        else:
            held[key] += 1
            held_ids.append(t.id)
    keys = sorted(set(active) | set(held))
    ctx.store.count_group_tasks(conn, queue, to_datetime(ctx.now()), [t for t, _ in keys],
                                [g for _, g in keys], [active[k] for k in keys],
                                [held[k] for k in keys])
    if held_ids:
        ctx.store.replay_into_groups(conn, held_ids)
    return set(held_ids)


def on_queue_purged(ctx: Context, queue: str) -> None:
    """A queue's tasks were purged: its groups go too."""
    ctx.store.forget_queue_groups(queue)


@lazy_dataclass
class Swept:
    """One slice of the reaper's sweep (:func:`sweep`): the tasks released, the cursor for
    the next slice (None: the walk is done), and the stalled groups passed over
    (``"queue|tenant|group"``: a row another transaction holds, or a release that failed),
    tried again when the walk comes round."""

    released: int = 0
    after: tuple[str, str, str] | None = None
    failed: list[str] = field(default_factory=list)


def sweep(ctx: Context, after: tuple[str, str, str] = ("", "", ""),
          limit: int = SWEEP_SLICE) -> Swept:
    """One slice of the reaper's sweep: groups with held tasks after ``after`` (queue,
    tenant, group); those with nothing active are released, a queue's in one transaction.
    A group whose row another transaction holds is passed over, not waited for (its
    holder, an enqueue or a release, is at work on it), and a queue whose release fails
    is logged: either way its groups are listed in ``failed`` and the other queues' are
    released."""
    rows = ctx.store.walk_held_groups(after, limit)
    stalled: dict[str, list[Group]] = {}
    for r in rows:
        if r.stalled:
            stalled.setdefault(r.queue, []).append((r.tenant, r.grp))
    out = Swept()
    for queue, groups in stalled.items():
        try:
            freed, passed = _release_stalled(ctx, queue, groups)
        except Exception:  # (a statement timeout, a held task row: the other queues go on)
            log.warning("stalled groups of queue %r not released; tried again when the "
                        "sweep comes round: %s", queue, sorted(f"{t}|{g}" for t, g in groups),
                        exc_info=True, extra={"queue": queue})
            out.failed.extend(f"{queue}|{t}|{g}" for t, g in groups)
            continue
        if passed:
            log.warning("stalled groups of queue %r passed over, their rows held by another "
                        "transaction; tried again when the sweep comes round: %s", queue,
                        sorted(f"{t}|{g}" for t, g in passed), extra={"queue": queue})
            out.failed.extend(f"{queue}|{t}|{g}" for t, g in passed)
        out.released += len(push_released(ctx, freed))
    if len(rows) >= limit:
        last = rows[-1]
        out.after = (last.queue, last.tenant, last.grp)
    return out


def _release_stalled(ctx: Context, queue: str,
                     groups: list[Group]) -> tuple[Freed | None, list[Group]]:
    """The sweep's release of a queue's stalled groups (as :func:`release_after_finish`'s,
    but passing over a group whose row another transaction holds): what to push, and the
    groups passed over."""
    ticket = admission.begin(ctx, {(queue, tenant) for tenant, _ in groups})
    try:
        tenants, grps = _split(groups)
        states = [ticket.state_for((queue, t)) for t in tenants]
        rows, passed = ctx.store.release_free_groups(
            queue, to_datetime(ctx.now()), ctx.queue_settings.get(queue).group_max_leased,
            tenants, grps, states, RELEASE_SLICE)
    except BaseException:
        admission.close(ctx, ticket)
        raise
    return Freed(queue, groups, rows,
                 admission.Pending(ticket, [], _push_items(queue, rows))), passed


def sweep_all(ctx: Context, limit: int = SWEEP_SLICE) -> int:
    """The whole sweep, slice after slice; how many tasks it released."""
    after: tuple[str, str, str] | None = ("", "", "")
    total = 0
    while after is not None:
        swept = sweep(ctx, after, limit)
        total, after = total + swept.released, swept.after
    return total
