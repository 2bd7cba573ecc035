"""Cold -> warm for one (queue, tenant): promotion with headroom, and the return to warm
mode once the cold line has drained (docs/architecture.md §3). Used by the scheduled
``cold_to_warm`` job and inline by a claim that finds the warm set empty.

A promotion brings in what fits, down to one task: within the pair's bounds, its tenant's
share (logic/tenant_budget.py) and the memory Valkey has left (``memory_room``); a batch
Valkey refuses for want of memory is tried again a quarter the size."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from operator import itemgetter

import psycopg

from tierq.core import hysteresis
from tierq.core.lazy import lazy_dataclass
from tierq.core.ordering import place
from tierq.dal.postgres import transaction
from tierq.dal.task_store import Conn
from tierq.logic import admission, tenant_budget
from tierq.logic.admission import PushItem
from tierq.logic.context import Context, to_datetime, to_ms

PROMOTE_BATCH = 2000
# bytes per task assumed for a promotion's first batch when the warm set is empty and this
# process has not promoted the pair's tasks before
BLOB_ESTIMATE = 1024
# the average task of each pair's last promotion batch, by (queue, tenant): sizes the first
# batch of the next promotion into an empty warm set (forgotten wholesale past this many)
_last_blob_sizes: dict[tuple[str, str], int] = {}
LAST_BLOB_SIZES_KEPT = 10_000
# How long one promotion batch waits for a row another writer holds (a task being replaced
# or cancelled) before it gives the batch up for the next pass; well under PostgreSQL's
# deadlock_timeout, so the other writer never meets a deadlock error.
PROMOTE_LOCK_TIMEOUT = "200ms"
# the share of Valkey's maxmemory a promotion leaves free (claims, leases and other tenants'
# enqueues need some; Valkey's own figures lag a little)
MEMORY_RESERVE = 0.05


class Busy(enum.Enum):
    """Why a promotion pass moved less than it could."""

    PAIR_LOCKED = "pair_locked"  # another mover holds the (queue, tenant) promotion lock
    ROW_HELD = "row_held"  # a batch met a cold row another writer holds (lock timeout)
    WARM_FULL = "warm_full"  # the warm set reached warm_max_bytes (push_ready refused rows)
    OUT_OF_MEMORY = "out_of_memory"  # Valkey refused the push: maxmemory reached
    BUDGET_SPENT = "budget_spent"  # the scheduled pass's time ran out between two batches


@lazy_dataclass
class RefillResult:
    promoted: int = 0
    returned_to_warm: bool = False
    skipped_busy: bool = False
    # Valkey has no room for one more task (its free memory, or a refused push of one
    # task): the cold line waits for memory to free (a claim that got nothing answers 503)
    out_of_memory: bool = False
    # the pair was left in cold mode: the scheduled mover keeps visiting it (even after its
    # cold line drains) until it returns to warm mode
    cold_mode: bool = True


def refill(ctx: Context, queue: str, tenant: str, *, limit: int | None = None,
           until: Callable[[], bool] | None = None) -> RefillResult:
    """One pass for one (queue, tenant). ``limit`` caps how many tasks this pass promotes
    (a claim refilling inline moves one batch and returns; the scheduled job fills up);
    ``until`` is asked after each batch and stops the promotion when true (the scheduled
    pass's time budget: a pair of warm_max rows is many batches)."""
    result = RefillResult()
    settings = ctx.queue_settings.get(queue)
    warm_max, warm_max_bytes = settings.warm_max, settings.warm_max_bytes
    stale_ms = int(ctx.settings.admission_stale_seconds * 1000)
    seen = ctx.warm.mode(queue, tenant, op="observe", now_ms=to_ms(ctx.now()),
                         stale_ms=stale_ms, warm_max=warm_max, warm_max_bytes=warm_max_bytes)
    if seen.mode == "warm":
        ctx.modes[(queue, tenant)] = "warm"
        result.cold_mode = False
        return result
    room = hysteresis.promotion_room(seen.ready, warm_max)
    room_bytes = hysteresis.promotion_room_bytes(seen.ready_bytes, warm_max_bytes)
    # the warm set's own tasks tell the likely size of the next ones
    blob_estimate = (seen.ready_bytes // seen.ready if seen.ready
                     else _last_blob_sizes.get((queue, tenant), BLOB_ESTIMATE))
    if room > 0 and room_bytes > 0:
        fits = memory_room(ctx, queue, tenant)
        if fits is not None and fits < blob_estimate:
            # Valkey has not the room for one more task: the line drains as memory frees
            result.out_of_memory = True
            room = 0
        elif fits is not None:
            room_bytes = min(room_bytes, fits)
        share, bound = tenant_budget.share(ctx, queue, tenant)
        if room > 0 and bound:
            # the tenant's bound: promote only what its share can take (none once the
            # tenant is over it: its work waits cold, other tenants' goes on)
            room_bytes = min(room_bytes, tenant_budget.room(ctx, queue, tenant, bound))
            if room_bytes < blob_estimate + share.charge:
                room = 0
    if room_bytes <= 0:
        room = 0
    if limit is not None:
        room = min(room, limit)
    drained = False  # this call's promotion emptied the cold line
    if room > 0 and not ctx.store.has_cold(queue, tenant):
        # Nothing to promote: no batch, so nothing registered in flight. An empty batch
        # registered for its moment moves the pair's epoch, which fails the return to warm
        # of every refill beside it; a new pair whose first producers all refill at once
        # then stayed cold, its first tasks written cold and promoted one by one.
        drained = True
        room = 0
    if room > 0:
        moved, busy = _promote(ctx, queue, tenant, room, room_bytes, blob_estimate, until)
        result.out_of_memory = busy is Busy.OUT_OF_MEMORY
        drained = moved < room and busy is None
        result.promoted = moved
        result.skipped_busy = busy is not None and busy is not Busy.BUDGET_SPENT
        if moved == room or busy in (Busy.ROW_HELD, Busy.WARM_FULL, Busy.OUT_OF_MEMORY,
                                     Busy.BUDGET_SPENT):
            # this pass filled all the room it was given, or a batch met a row another
            # writer holds: the cold line still has rows, so asking Postgres would be wasted
            return result
        if busy is Busy.PAIR_LOCKED and limit is not None:
            return result  # a claim refilling inline: the mover at work checks for itself
        # Another mover holding the pair lock cannot always return the queue to warm mode
        # itself: an admission that began in cold mode meanwhile (the first enqueue to a
        # new queue) blocks its flip. The check below is safe to run beside it, and after a
        # refill that found the cold line empty and promoted nothing.
    # Return to warm mode: observe (epoch e), see no cold rows in Postgres, flip iff still e.
    seen = ctx.warm.mode(queue, tenant, op="observe", now_ms=to_ms(ctx.now()),
                         stale_ms=stale_ms, warm_max=warm_max, warm_max_bytes=warm_max_bytes)
    if (seen.mode == "cold" and hysteresis.may_return_warm(seen.ready, warm_max, 0, seen.inflight)
            and hysteresis.may_return_warm_bytes(seen.ready_bytes, warm_max_bytes)):
        if not ctx.store.has_cold(queue, tenant):
            flip = ctx.warm.mode(queue, tenant, op="flip", now_ms=to_ms(ctx.now()),
                                 stale_ms=stale_ms, warm_max=warm_max,
                                 warm_max_bytes=warm_max_bytes, expected_epoch=seen.epoch)
            result.returned_to_warm = flip.flipped
            if flip.flipped:
                ctx.modes[(queue, tenant)] = "warm"
                result.cold_mode = False
    elif seen.mode == "warm":
        result.cold_mode = False
    elif drained and limit is not None:
        # a claim's inline refill drained the cold line while the warm set stays above 80%:
        # no cold row shows the scheduled mover this pair any more, so it is recorded for
        # the visit that returns it to warm mode (rare: a later low-water refill or the
        # mover's own record usually does it)
        _remember_cold_mode(ctx, queue, tenant)
    return result


def memory_room(ctx: Context, queue: str, tenant: str) -> int | None:
    """Bytes of task data a promotion into the pair may bring now without Valkey running
    out of memory: half of what the server has left (a push's arguments sit in Valkey's
    input buffer while the script stores them) less MEMORY_RESERVE of its maxmemory.
    None when Valkey does not say (no maxmemory, or INFO refused: ElastiCache), in which
    case a batch Valkey refuses is retried smaller (``_promote``). A reading kept from
    before (``WarmTier.memory``) that leaves no room is read again: memory frees fast."""
    memory = ctx.warm.memory(queue, tenant)
    if memory is not None and memory.free is not None \
            and memory.free < memory.maxmemory * MEMORY_RESERVE * 2:
        memory = ctx.warm.memory(queue, tenant, fresh=True)
    if memory is None or memory.free is None:
        return None
    return max(0, (memory.free - int(memory.maxmemory * MEMORY_RESERVE)) // 2)


def _remember_cold_mode(ctx: Context, queue: str, tenant: str) -> None:
    ctx.store.mark_cold_mode([(queue, tenant)], [True], to_datetime(ctx.now()))


def _promote(ctx: Context, queue: str, tenant: str, room: int, room_bytes: int,
             blob_estimate: int, until: Callable[[], bool] | None = None
             ) -> tuple[int, Busy | None]:
    """Move up to ``room`` of the oldest cold tasks, about ``room_bytes`` of task data,
    into the warm set, holding the (queue, tenant) promotion lock so two movers never
    interleave their batches. Batches are sized by bytes too, from ``blob_estimate`` and
    then from what each batch held (push_ready enforces warm_max_bytes exactly; what it
    refuses goes back to the cold line in its place).
    Returns (moved, busy): busy says why the pass stopped early, if it did: another mover
    held the lock, a batch gave up waiting for a row another writer held
    (PROMOTE_LOCK_TIMEOUT), the warm set's bytes are full, Valkey is out of memory, or
    ``until`` said stop between two batches."""
    moved = 0
    with ctx.db.connection() as conn:
        if not ctx.store.try_pair_lock(conn, queue, tenant):
            return 0, Busy.PAIR_LOCKED
        try:
            while room > 0:
                want = min(room, PROMOTE_BATCH, room_bytes // max(1, blob_estimate) + 1)
                since = ctx.now()  # the batch's state_since: its admission began then
                ticket = admission.Ticket(token=f"promote-{uuid.uuid4().hex}",
                                          since_ms=to_ms(since))
                items, refused = _promote_and_push(ctx, conn, queue, tenant, want, since,
                                                   ticket)
                if items is None:
                    return moved, Busy.ROW_HELD  # a writer holds one of the rows: next pass
                if not items:
                    break
                if ticket.full:
                    # Valkey refused a call of the batch for want of memory: the calls
                    # before it came in (a batch is pushed in calls, admission.push_chunks),
                    # the rest went back to the cold line in their places
                    gone = set(refused)
                    taken = len(items) - len(gone)
                    moved += taken
                    room -= taken
                    if not taken and len(items) == 1:
                        return moved, Busy.OUT_OF_MEMORY  # not even one task fits now
                    # try a quarter of what was refused, down to one task, so that what
                    # fits comes in rather than nothing
                    room_bytes = max(1, sum(len(item[2]) for item in items
                                            if item[0] in gone) // 4)
                    blob_estimate = max(blob_estimate, room_bytes // max(1, len(gone) // 4))
                    ctx.warm.forget_memory()
                    continue
                moved += len(items) - len(refused)
                room -= len(items)
                room_bytes -= sum(len(item[2]) for item in items if item[0] not in refused)
                blob_estimate = sum(len(item[2]) for item in items) // len(items)
                if len(_last_blob_sizes) >= LAST_BLOB_SIZES_KEPT:
                    _last_blob_sizes.clear()
                _last_blob_sizes[(queue, tenant)] = blob_estimate
                if refused or room_bytes <= 0:
                    return moved, Busy.WARM_FULL
                if len(items) < want:
                    break  # the cold line is drained
                if room > 0 and until is not None and until():
                    return moved, Busy.BUDGET_SPENT
        finally:
            ctx.store.release_pair_lock(conn, queue, tenant)
    return moved, None


def _promote_and_push(ctx: Context, conn: Conn, queue: str, tenant: str, limit: int,
                      since: float, ticket: admission.Ticket
                      ) -> tuple[list[PushItem] | None, set[str]]:
    """One batch: its rows marked warm, then pushed (``dispatch``); its items in line order
    and the ids the warm tier refused; (None, no ids) when it met a row another writer holds.

    The batch is registered in flight (lua/admission_begin.lua) from before its commit
    until its push ends: its rows are warm in PostgreSQL before they are in Valkey, and a
    return to warm in between (``refill`` run beside this one, which sees no cold row) would
    let later work go warm and be claimed ahead of them."""
    pair = (queue, tenant)
    registered = ctx.warm.admission_begin(queue, tenant, now_ms=to_ms(ctx.now()),
                                          token=ticket.token) == "cold"
    try:
        try:
            items = _promote_batch(ctx, conn, queue, tenant, limit, since)
        except psycopg.errors.LockNotAvailable:
            return None, set()
        if not items:
            return items, set()
        items.sort(key=itemgetter(1))  # line order (a place sorts as Valkey does)
        # (on the connection that holds the pair's lock: not a second pooled one)
        refused = admission.dispatch(ctx, ticket, {pair: items}, kind="promote", conn=conn)
        return items, refused
    finally:
        if registered:  # (a push that refused rows registered it too: ended already)
            ctx.warm.admission_end(queue, tenant, ticket.token)


def _promote_batch(ctx: Context, conn: Conn, queue: str, tenant: str,
                   limit: int, now: float) -> list[PushItem]:
    """Mark one batch of the oldest cold rows warm (as of ``now``); their push items (id,
    place, blob), made before the batch commits."""
    with transaction(conn):  # tierq's timeouts; then a shorter lock timeout of its own
        ctx.store.local_lock_timeout(conn, PROMOTE_LOCK_TIMEOUT)
        rows = ctx.store.promote_cold(conn, queue, tenant, limit, to_datetime(now))
        return [(r.id, place(r.priority, r.seq, r.id), r.blob) for r in rows]
