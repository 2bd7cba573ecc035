"""Dead letters: list, replay (back of the line with fresh attempts), purge."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import psycopg

from tierq.core.ordering import Place
from tierq.dal.store.rows import LIVE_KEY_INDEX, DeadKeyRow
from tierq.dal.task_store import Conn
from tierq.logic import admission, flows, groups
from tierq.logic.admission import Target
from tierq.logic.context import Context, to_datetime
from tierq.logic.tasks import view
from tierq.models.envelopes import SLICE_MAX_ITEMS as SLICE_MAX_ITEMS
from tierq.models.envelopes import SLICE_SECONDS as SLICE_SECONDS
from tierq.models.tasks import TaskView

REPLAY_BATCH = 1000
PURGE_BATCH = 1000
# What one request over every dead letter ("all") does at most before it answers with
# "more" (SLICE_MAX_ITEMS, SLICE_SECONDS): its ids stay far inside a Lambda response (about
# 41 bytes each as the runtime writes them: 410 KB), and it answers long before the
# function's timeout.

# How many times a replay's reset runs while tasks committed during it take keys of its
# batch (each run sees those committed before it).
RESET_ATTEMPTS = 3

log = logging.getLogger(__name__)

# The greatest id: with finished_at 'infinity', a position after every dead letter.
LAST_ID = UUID(int=2**128 - 1)


def list_dead(ctx: Context, queue: str, *, tenant: str | None = None, limit: int = 100,
              after: tuple[datetime, UUID] | None = None) -> list[TaskView]:
    """Dead letters of a queue (of one tenant if given, selected in SQL), most recently dead
    first, before the position ``after`` (finished_at, id) of the previous page's last."""
    start = after or ("infinity", LAST_ID)
    rows = ctx.store.dlq_page(queue, tenant, start[0], str(start[1]), limit)
    return [view(r) for r in rows]


@dataclass
class Slice:
    """What one bounded pass over dead letters did: the ids acted on, the ids asked for but
    not acted on, and whether an "all" pass left some for the next one."""

    done: list[UUID]
    skipped: list[UUID]
    more: bool


# Called in each transaction that replays dead letters, with what the pass has done so far
# (an idempotency record is written there).
SliceRecorder = Callable[[Conn, Slice], None]


def replay_slice(ctx: Context, queue: str, *, ids: Sequence[UUID] = (), all_dead: bool = False,
                 tenant: str | None = None, max_items: int | None = SLICE_MAX_ITEMS,
                 seconds: float | None = SLICE_SECONDS,
                 record: SliceRecorder | None = None) -> Slice:
    """Make dead tasks (of ``tenant`` only, when given) ready again with attempts reset, in
    transactions of at most REPLAY_BATCH. An "all" pass stops after ``max_items`` or
    ``seconds`` (None: no bound) with ``more`` set. A task is skipped when it is not dead
    (anymore), not the tenant's, or a live task (held in its group too) holds its key."""
    wanted = [str(i) for i in ids]
    replayed: list[UUID] = []
    started = time.monotonic()
    more = False
    while True:
        limit = REPLAY_BATCH if max_items is None else min(REPLAY_BATCH, max_items - len(replayed))
        made: list[admission.Pending] = []
        joined: list[UUID] = []

        def body(conn: Conn, limit: int = limit, made: list[admission.Pending] = made,
                 joined: list[UUID] = joined) -> list[DeadKeyRow]:
            for p in made:  # (a run before this one rolled back)
                admission.abandon(ctx, p)
            made.clear()
            joined.clear()
            locked = ctx.store.lock_dead(conn, queue, tenant, all_dead, wanted, limit)
            if not locked:
                return locked
            first = first_of_each_key(locked)
            targets = [Target(str(r.id), queue, r.tenant) for r in first]
            end_leases(ctx, queue, targets, conn)
            # (a row whose key a task enqueued meanwhile holds stays dead: skipped)
            reset = reset_dead(ctx, conn, first)
            targets = [t for t in targets if t.id in reset]
            # (a replayed task waits no more; what it failed waits for it again)
            flows.on_replay(ctx, conn, [t.id for t in targets])
            # (one of a group joins its group: active while it has room, else held)
            held = groups.on_replay(ctx, conn, queue, targets)
            joined.extend(UUID(i) for i in held)
            made.append(admission.make_ready(ctx, conn,
                                             [t for t in targets if t.id not in held]))
            if record is not None:
                so_far = replayed + joined + [UUID(str(r.id)) for r in made[0].rows]
                record(conn, Slice(so_far, _skipped(wanted, so_far), more=all_dead))
            return locked

        try:
            # (run again should it be a deadlock's victim: a re-arm locks what a release may)
            locked = ctx.db.run_transaction(body, what="a replay of dead letters")
        except BaseException:
            for p in made:
                admission.abandon(ctx, p)
            raise
        if not locked:
            break
        pending = made[0]
        admission.finish(ctx, pending)
        replayed.extend(joined)
        replayed.extend(UUID(str(r.id)) for r in pending.rows)
        if not all_dead or len(locked) < limit:
            break
        if _spent(len(replayed), max_items, started, seconds):
            more = True
            break
    return Slice(replayed, _skipped(wanted, replayed), more)


def end_leases(ctx: Context, queue: str, targets: Sequence[Target],
               conn: Conn | None = None) -> None:
    """End the leases that dead letters about to be replayed still hold in Valkey, giving
    back their queue-wide reservations.

    Such a lease is the one of the attempt that dead-lettered the task: its drop is still
    on its way (a nack or the reaper commits, then drops), or a Valkey failure after that
    commit left it. The replay resets the attempts to 0, below that lease's attempt, so the
    lease would pass the attempt checks against the replayed task: the reaper would list
    it again and dead-letter the task without it having run, and while it stays the
    replay's push leaves the task out (lua/push_ready.lua). Called with the dead rows
    locked, before the reset: only a reaper pass that listed such a lease just before can
    still record it (docs/architecture.md §2). ``conn``: the replay's transaction's, where
    the queue's settings are read on a cache miss."""
    by_tenant: dict[str, list[str]] = defaultdict(list)
    for t in targets:
        by_tenant[t.tenant].append(t.id)
    tokens: list[str] = []
    # (one round trip finds the few that have an entry; most dead letters have none)
    for tenant, ids in ctx.warm.lease_indexed(queue, by_tenant).items():
        # the member is the id: remove.lua finds a lease by its task's id, and a dead task
        # waits in no ready set
        _, ended = ctx.warm.remove_leased(queue, tenant, [Place(0, i) for i in ids])
        tokens += [lease.token for lease in ended]
    if tokens:
        from tierq.logic.leases import free_reservations  # (only when a lease was left)
        free_reservations(ctx, queue, tokens, conn=conn)


def reset_dead(ctx: Context, conn: Conn, rows: Sequence[DeadKeyRow]) -> set[str]:
    """Reset the locked dead ``rows`` to delayed with fresh attempts; the ids reset.

    A row whose key a task holds by then stays dead: the statement checks the keys again.
    A task of such a key whose transaction commits while the statement runs still fails
    it on tierq_tasks_live_key. The statement then runs again in a new savepoint, which
    sees that task, so the batch goes on without that row rather than rolling back. The
    rows share no key (:func:`first_of_each_key`), so only another transaction's task can
    fail it. A batch without keys needs no savepoint."""
    ids = [str(r.id) for r in rows]
    now = to_datetime(ctx.now())
    if all(r.key is None for r in rows):
        return {str(i) for i in ctx.store.reset_dead(conn, ids, now)}
    for attempt in range(1, RESET_ATTEMPTS + 1):
        try:
            with conn.transaction():  # a savepoint, inside the replay's transaction
                return {str(i) for i in ctx.store.reset_dead(conn, ids, now)}
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != LIVE_KEY_INDEX or attempt == RESET_ATTEMPTS:
                raise
            log.info("a replay's reset met a key taken meanwhile (attempt %d of %d): run "
                     "again", attempt, RESET_ATTEMPTS)
    raise AssertionError("unreachable")


def first_of_each_key(locked: Sequence[DeadKeyRow]) -> list[DeadKeyRow]:
    """The dead rows to replay: of rows sharing a key, only the first (one live task per
    key); the others are skipped, and a later replay finds their key live."""
    keys: set[tuple[str, str]] = set()
    out: list[DeadKeyRow] = []
    for row in locked:
        if row.key is not None:
            if (row.tenant, row.key) in keys:
                continue
            keys.add((row.tenant, row.key))
        out.append(row)
    return out


def replay(ctx: Context, queue: str, *, ids: Sequence[UUID] = (), all_dead: bool = False,
           ) -> tuple[list[UUID], list[UUID]]:
    """Replay every dead letter asked for, however many. Returns (replayed, skipped)."""
    done = replay_slice(ctx, queue, ids=ids, all_dead=all_dead, max_items=None, seconds=None)
    return done.done, done.skipped


def purge_slice(ctx: Context, queue: str, *, ids: Sequence[UUID] = (), all_dead: bool = False,
                tenant: str | None = None, max_items: int | None = SLICE_MAX_ITEMS,
                seconds: float | None = SLICE_SECONDS) -> Slice:
    """Delete dead tasks (of ``tenant`` only, when given), bounded like :func:`replay_slice`."""
    wanted = [str(i) for i in ids]
    purged: list[UUID] = []
    started = time.monotonic()
    more = False
    while True:
        limit = PURGE_BATCH if max_items is None else min(PURGE_BATCH, max_items - len(purged))
        rows = ctx.store.purge_dead(queue, tenant, all_dead, wanted, limit)
        flows.forget(ctx, [str(i) for i in rows])  # a purged task waits no more (flows)
        purged.extend(UUID(str(i)) for i in rows)
        if not all_dead or len(rows) < limit:
            break
        if _spent(len(purged), max_items, started, seconds):
            more = True
            break
    return Slice(purged, _skipped(wanted, purged), more)


def purge(ctx: Context, queue: str, *, ids: Sequence[UUID] = (),
          all_dead: bool = False) -> list[UUID]:
    """Delete every dead letter asked for, however many."""
    return purge_slice(ctx, queue, ids=ids, all_dead=all_dead, max_items=None,
                       seconds=None).done


def _skipped(wanted: Sequence[str], done: Sequence[UUID]) -> list[UUID]:
    acted = {str(i) for i in done}
    return [UUID(i) for i in wanted if i not in acted]


def _spent(count: int, max_items: int | None, started: float, seconds: float | None) -> bool:
    return ((max_items is not None and count >= max_items)
            or (seconds is not None and time.monotonic() - started >= seconds))
