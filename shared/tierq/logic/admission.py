"""Admission: tasks that become ready (new, due, retried, re-queued, replayed, promoted,
restored) enter the warm tier or the cold line, never out of order.

Protocol (docs/architecture.md §3, "Admission" and "The return to warm"):

1. ``begin``: per (queue, tenant), learn the tier mode; in cold mode register the admission
   as in flight (Valkey ``inflight``), so the queue cannot return to warm mode until these
   cold rows are committed.
2. The caller writes Postgres with each ready row's state (``warm`` or ``cold``) and commits.
3. ``dispatch``: push the warm rows (one Lua script per pair, enforcing warm_max,
   warm_max_bytes and the pair's share of its tenant's bound atomically, ``ZADD NX``;
   logic/tenant_budget.py); what it refuses is marked cold (keeping its
   seq); then the registrations end. When Valkey is out of memory (``WarmTierFull``), the
   pair is turned cold (go_cold.lua, allowed at maxmemory) and every row of the push is
   refused: the rows are committed, so they wait cold and the mover promotes them later.

A crash between 2 and 3 leaves ``warm`` rows that Valkey does not know: the reaper's
reconciler re-pushes them after the grace period (at-least-once, nothing lost). A push that
comes after the reconciler has taken its rows over (it began before the pair's fence,
lua/missing.lua) writes nothing (``LatePush``): the rows stay the reconciler's, so no task is
added twice, nor after a worker finished it (docs/architecture.md §8).
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import field, replace
from datetime import datetime
from typing import Protocol
from uuid import UUID

import orjson

from tierq.core.lazy import lazy_dataclass
from tierq.core.ordering import Place, place
from tierq.dal.store.rows import ReadyRow
from tierq.dal.task_store import Conn
from tierq.dal.warm_tier import (
    PUSH_CALL_BYTES,
    PUSH_CALL_TASKS,
    AdmittedSize,
    LatePush,
    PushAlong,
    PushOutcome,
    TenantShare,
)
from tierq.errors import WarmTierFull
from tierq.logic import ready_tenants, tenant_budget, wake
from tierq.logic.context import Context, Pair, to_datetime, to_ms

log = logging.getLogger(__name__)

# (id, place in the ready set, blob) of a task for the warm tier: a blob made here is bytes,
# one made in SQL by promote_cold is text
PushItem = tuple[str, Place, bytes | str]
# the quotes around the keys of a task blob's JSON: "e", "p", "k", "pr", "m", "c"
BLOB_KEY_QUOTES = 12


def task_blob(attempts: int, payload_json: bytes | str, key: str | None, priority: int,
              max_attempts: int, created_ms: int,
              parents_json: bytes | str | None = None, group: str | None = None,
              seq: int | None = None, timeout_seconds: int | None = None,
              trace_json: bytes | str | None = None) -> bytes:
    """What the warm tier keeps of a ready task: enough to hand it out without Postgres.
    ``<attempts>|{"e":<n>,"p":<payload>,"k":<key>,"pr":<priority>,"m":<max_attempts>,
    "c":<ms>}``, formatted directly (one per task on the enqueue path); a task released
    from a wait adds ``"pa":<its parents>`` (logic/flows.py), since claims do not read
    PostgreSQL; a task of a group adds ``"g":<its group>,"gs":<its seq>`` after it
    (logic/groups.py; the seq is its records' ``SequenceNumber``, logic/dispatch/events.py);
    a task with a time limit of its own adds ``"to":<seconds>`` (logic/time_limits.py), and a
    traced task ``"tr":<its trace context>`` last (models/traces.py, as stored).
    ``e`` counts the quotes and backslashes of that JSON text (its own key's included): each
    costs a second byte in a Lambda response, and lua/claim.lua sizes a claim by it
    without scanning."""
    if isinstance(payload_json, str):
        payload_json = payload_json.encode()
    key_json = b"null" if key is None else orjson.dumps(key)
    escapes = (BLOB_KEY_QUOTES + payload_json.count(b'"') + payload_json.count(b"\\")
               + key_json.count(b'"') + key_json.count(b"\\"))
    if (parents_json is None and group is None and timeout_seconds is None
            and trace_json is None):
        return b'%d|{"e":%d,"p":%b,"k":%b,"pr":%d,"m":%d,"c":%d}' % (
            attempts, escapes, payload_json, key_json, priority, max_attempts, created_ms)
    tail = b""
    if parents_json is not None:
        if isinstance(parents_json, str):
            parents_json = parents_json.encode()
        escapes += 2 + parents_json.count(b'"') + parents_json.count(b"\\")
        tail += b',"pa":' + parents_json
    if group is not None:
        group_json = orjson.dumps(group)
        escapes += 2 + group_json.count(b'"') + group_json.count(b"\\")
        tail += b',"g":' + group_json
        if seq is not None:
            escapes += 2
            tail += b',"gs":%d' % seq
    if timeout_seconds is not None:
        escapes += 2
        tail += b',"to":%d' % timeout_seconds
    if trace_json is not None:
        if isinstance(trace_json, str):
            trace_json = trace_json.encode()
        escapes += 2 + trace_json.count(b'"') + trace_json.count(b"\\")
        tail += b',"tr":' + trace_json
    return b'%d|{"e":%d,"p":%b,"k":%b,"pr":%d,"m":%d,"c":%d%b}' % (
        attempts, escapes, payload_json, key_json, priority, max_attempts, created_ms, tail)


def plain_blob(payload_json: bytes, priority: int, max_attempts: int, created_ms: int) -> bytes:
    """``task_blob`` of a new task (attempt 0) without a key, parents, group, time limit or
    trace: most of what an enqueue pushes, made with one format and no branches."""
    return b'0|{"e":%d,"p":%b,"k":null,"pr":%d,"m":%d,"c":%d}' % (
        BLOB_KEY_QUOTES + payload_json.count(b'"') + payload_json.count(b"\\"), payload_json,
        priority, max_attempts, created_ms)


class PushableRow(Protocol):
    """A task row read back from Postgres with what the warm tier keeps of it."""

    @property
    def id(self) -> UUID: ...
    @property
    def key(self) -> str | None: ...
    @property
    def seq(self) -> int: ...
    @property
    def priority(self) -> int: ...
    @property
    def payload(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def created_at(self) -> datetime: ...


def row_push_item(row: PushableRow) -> tuple[str, Place, bytes]:
    """(id, place, blob) of a task row read back from Postgres."""
    created_ms = int(row.created_at.timestamp() * 1000)
    task_id = str(row.id)
    return (
        task_id,
        place(row.priority, row.seq, task_id),
        task_blob(row.attempts, row.payload, row.key, row.priority, row.max_attempts,
                  created_ms, getattr(row, "parents", None), getattr(row, "grp", None),
                  row.seq, getattr(row, "timeout_seconds", None), getattr(row, "trace", None)),
    )


@lazy_dataclass
class Ticket:
    """One admission across one or more (queue, tenant) pairs. ``since_ms``: when it
    began, at or before the ``state_since`` its rows are written with (the caller's clock):
    its pushes are refused once the reconciler has taken over rows that old."""

    token: str
    since_ms: int
    modes: dict[Pair, str] = field(default_factory=dict)
    registered: set[Pair] = field(default_factory=set)
    # pairs whose push Valkey refused for want of memory (their rows went cold)
    full: set[Pair] = field(default_factory=set)
    # pairs whose warm set recorded the tasks this admission is about to push
    # (lua/admission_begin.lua), until its push uses the record up (or ``close`` drops it)
    reserved: set[Pair] = field(default_factory=set)

    def state_for(self, pair: Pair) -> str:
        return "warm" if self.modes.get(pair) == "warm" else "cold"


def begin(ctx: Context, pairs: Iterable[Pair], *, force_cold: bool = False,
          since: float | None = None, sizes: Mapping[Pair, AdmittedSize] | None = None
          ) -> Ticket:
    """Start an admission. ``force_cold`` (bulk loads) turns each queue cold first, so the
    rows land in the cold line and nothing enqueued later can jump ahead of them; the
    caller writes them with state 'cold' and calls ``close`` after its commit. ``since``:
    the ``state_since`` the caller writes its rows with when it took that time before
    this call (the admission counts as begun then); by default, now. ``sizes``: for the
    pairs given there, what the caller will push (the bytes of its first task, its tasks,
    their bytes). Each such pair's mode is asked of Valkey whatever this process
    remembers, all of them in one round trip (lua/admission_begin.lua). A warm set that
    could not take that first task, counting what admissions that found room before are
    about to push, turns cold now. The caller then writes its rows cold at once rather
    than warm and then marked cold. A set that can take it records the caller's tasks as
    about to be pushed, so that its push is taken even if the pair turns cold meanwhile."""
    now_ms = to_ms(ctx.now())
    ticket = Ticket(token=uuid.uuid4().hex,
                    since_ms=now_ms if since is None else min(now_ms, to_ms(since)))
    checked: list[Pair] = []
    for pair in sorted(set(pairs)):
        if sizes is not None and pair in sizes and not force_cold:
            checked.append(pair)
            continue
        if ctx.modes.get(pair) == "warm" and not force_cold:
            ticket.modes[pair] = "warm"
            continue
        mode = ctx.warm.admission_begin(pair[0], pair[1], now_ms=now_ms, token=ticket.token,
                                        force_cold=force_cold)
        ticket.modes[pair] = mode
        ctx.modes[pair] = mode
        if mode == "cold":
            ticket.registered.add(pair)
    if checked:
        assert sizes is not None
        settings = [ctx.queue_settings.get(queue) for queue, _ in checked]
        modes = ctx.warm.admission_begin_fits(
            [(queue, tenant, s.warm_max, s.warm_max_bytes, sizes[(queue, tenant)])
             for (queue, tenant), s in zip(checked, settings, strict=True)],
            now_ms=now_ms, token=ticket.token,
            stale_ms=int(ctx.settings.admission_stale_seconds * 1000))
        for pair, mode in zip(checked, modes, strict=True):
            ticket.modes[pair] = mode
            ctx.modes[pair] = mode
            if mode == "cold":
                ticket.registered.add(pair)
            else:
                ticket.reserved.add(pair)
    return ticket


def close(ctx: Context, ticket: Ticket) -> None:
    """End the admission's registrations; the pairs it wrote cold rows to (or may have:
    a failed transaction's entry costs one visit) enter their queue's ready-tenant index.
    A record of tasks about to be pushed that no push used up (nothing to push, or the
    push failed) is dropped."""
    for queue, tenant in sorted(ticket.registered | ticket.reserved):
        ctx.warm.admission_end(queue, tenant, ticket.token)
        if (queue, tenant) in ticket.registered:
            ready_tenants.note(ctx, queue, (tenant,))
    ticket.registered.clear()
    ticket.reserved.clear()


def push(ctx: Context, ticket: Ticket, pair: Pair, items: Sequence[PushItem],
         *, kind: str, along: PushAlong | None = None, conn: Conn | None = None
         ) -> list[str]:
    """Push items of one pair; returns the ids refused (to be marked cold by the caller;
    a task cancelled or deleted since its row was read is left out, neither pushed nor
    refused).
    Valkey out of memory refuses the rest of the items: see ``go_cold``. A push the
    reconciler has overtaken (``LatePush``) leaves the rest of the items to it: they are
    neither pushed nor refused (their rows stay warm). ``along``: the same push sent
    already in another round trip (``push_along``), whose outcome is read instead.
    ``conn``: a connection the caller holds (the promotion's, holding the pair's lock),
    where the queue's settings are read on a cache miss rather than on a second pooled
    one."""
    queue, tenant = pair
    settings = ctx.queue_settings.get(queue, conn=conn)
    now_ms = to_ms(ctx.now())
    refused: list[str] = []
    late = 0
    gone = 0  # left out: cancelled or deleted since their rows were read (lua/push_ready.lua)
    # whether a push found the pair's line empty with no note of its tenant after it
    unnoted = False
    share, limit = tenant_budget.share(ctx, queue, tenant)
    for start, end in push_chunks(items):
        chunk = items[start:end]
        def push_chunk(share: TenantShare, chunk: Sequence[PushItem] = chunk) -> PushOutcome:
            return ctx.warm.push(
                queue, tenant, warm_max=settings.warm_max,
                warm_max_bytes=settings.warm_max_bytes, kind=kind, now_ms=now_ms,
                token=ticket.token, since_ms=ticket.since_ms, items=chunk, share=share,
                note=True, shard_tag=ctx.id_tag)

        got = 0  # taken from the ledger for this chunk
        try:
            if along is not None and start == 0 and end == len(items):
                # sent already with this chunk and share, as expecting no shortfall (an
                # 'allot' answer is taken up below as a push's)
                out = ctx.warm.pushed_along(along)
            else:
                if limit:
                    # a line that grows past its allotment takes its grant first (no 'ask'
                    # round trip that comes back short)
                    need = sum(len(item[2]) for item in chunk) + share.charge * len(chunk)
                    short = tenant_budget.shortfall(queue, tenant, need)
                    if short:
                        got = tenant_budget.grant(ctx, queue, tenant, short, limit)
                out = push_chunk(replace(share, grant=got))
            if out.mode == "allot":
                # past the pair's allotment: take more of the tenant's bound, then push
                # what fits of it (the rest is refused: the tenant's work waits cold)
                got = tenant_budget.grant(ctx, queue, tenant, out.short, limit)
                out = push_chunk(replace(share, bound="strict", grant=got))
        except (WarmTierFull, LatePush) as exc:
            if got:
                # refused whole, nothing written: the grant goes back to the ledger
                tenant_budget.cancel(ctx, queue, tenant, got)
            if isinstance(exc, LatePush):
                late = len(items) - start
                log.warning("a push of %d task(s) of %r/%r came after the reconciler took "
                            "them over; it re-pushes them", late, queue, tenant)
                break
            go_cold(ctx, ticket, pair)
            refused.extend(item[0] for item in items[start:])
            break
        ticket.reserved.discard(pair)  # (the push used up the record: lua/push_ready.lua)
        if out.given_back:
            tenant_budget.give_back(ctx, queue, tenant, out.freed)
        if limit:
            tenant_budget.pushed(queue, tenant, out.slack, out.ready_before)
        unnoted = not out.noted and (unnoted or not out.ready_before)
        ctx.modes[pair] = out.mode
        gone += out.gone
        if out.refused:
            ticket.registered.add(pair)
            refused.extend(out.refused)
            if end < len(items):
                # the line's order holds across calls: what follows a refused task waits
                # cold behind it, not in Valkey ahead of it (a mark refuses its task in any
                # call, and a cold pair's later calls would take the rest)
                refused.extend(item[0] for item in items[end:])
                break
    if gone:
        log.info("a push of %r/%r left out %d task(s) cancelled or deleted since their rows "
                 "were read", queue, tenant, gone)
    if len(refused) + late + gone < len(items):
        # the tenant enters its queue's ready-tenant index after the push that found its
        # line empty (logic/ready_tenants.py); before the consumer's wake, which reads it
        if unnoted:
            ready_tenants.note(ctx, queue, (tenant,))
        else:  # (entered in the push's own pipeline: this process's claims see it at once)
            ready_tenants.window_changed(ctx, queue, (tenant,))
        wake.task_ready(ctx, queue, conn=conn)  # the queue's consumer, if any, has work
    return refused


def push_chunks(items: Sequence[PushItem], *, tasks: int = PUSH_CALL_TASKS,
                max_bytes: int = PUSH_CALL_BYTES) -> Iterator[tuple[int, int]]:
    """The (start, end) of each push_ready call's items, in order: at most ``tasks`` items
    and ``max_bytes`` of blobs a call, at least one item (a script runs alone on its server,
    so a call's cost is bounded by both its count and its bytes)."""
    if len(items) <= tasks and sum([len(item[2]) for item in items]) <= max_bytes:
        # (one call, as most pushes are: the bytes summed without the walk below)
        if items:
            yield 0, len(items)
        return
    start, size = 0, 0
    for i, item in enumerate(items):
        blob = len(item[2])
        if i > start and (i - start >= tasks or size + blob > max_bytes):
            yield start, i
            start, size = i, 0
        size += blob
    if start < len(items):
        yield start, len(items)


def go_cold(ctx: Context, ticket: Ticket, pair: Pair) -> None:
    """Valkey is out of memory: turn the pair cold and register the ticket's admission (as
    push_ready does when it refuses), so the rows the caller now marks cold keep their place
    ahead of later work and the mover promotes them once memory is free."""
    ctx.warm.go_cold(pair[0], pair[1], now_ms=to_ms(ctx.now()), token=ticket.token)
    ctx.modes[pair] = "cold"
    ticket.registered.add(pair)
    ticket.full.add(pair)


def update_warm(ctx: Context, pair: Pair,
                items: Sequence[tuple[str, Place, bytes]]) -> list[str]:
    """Replace in the warm tier the data of tasks updated in Postgres (on_conflict=replace),
    their growth counted against the pair's share of its tenant's bound as a push's is
    (the replacements kept for pushes on their way too: lua/update_ready.lua).

    ==========================  ===========================================================
    the growth                  what happens
    ==========================  ===========================================================
    fits the tenant's bound     the waiting tasks are replaced in place; the others keep
                                their replacements for a push on its way
    fits for the waiting tasks  they are replaced; each of the others keeps a mark, so a
    only                        push that read it before the replace refuses it and it
                                waits cold (its promotion reads the row)
    does not fit, or Valkey is  the waiting tasks leave the warm tier and wait cold (their
    out of memory               rows marked ``cold``); each of the others keeps a mark
                                (lua/replace_cold.lua)
    ==========================  ===========================================================

    So no claim hands out the old data, and the row, which holds the new, is what a
    promotion reads. Returns the ids of the waiting tasks that went cold."""
    # (logic/tasks.py imports this module, through logic/groups.py)
    from tierq.logic.tasks import gone_ttl_ms
    queue, tenant = pair
    share, limit = tenant_budget.share(ctx, queue, tenant)
    warm_max_bytes = ctx.queue_settings.get(queue).warm_max_bytes
    # a task not waiting (a push of it read before the replace may be on its way) keeps
    # its replacement for the push, as long as a tombstone would stay (lua/update_ready.lua)
    now_ms, ttl_ms = to_ms(ctx.now()), gone_ttl_ms(ctx.settings)
    try:
        out = ctx.warm.update_ready(queue, tenant, items, warm_max_bytes=warm_max_bytes,
                                    share=share, now_ms=now_ms, ttl_ms=ttl_ms)
        if out.short:
            # past the pair's allotment: take more of the tenant's bound, then replace
            got = tenant_budget.grant(ctx, queue, tenant, out.short, limit)
            try:
                out = ctx.warm.update_ready(queue, tenant, items[out.done:],
                                            warm_max_bytes=warm_max_bytes,
                                            share=replace(share, bound="strict", grant=got),
                                            now_ms=now_ms, ttl_ms=ttl_ms)
            except WarmTierFull:
                tenant_budget.cancel(ctx, queue, tenant, got)  # nothing written
                raise
        if not out.over:
            return []
    except WarmTierFull:
        pass
    ticket = Ticket(token=f"update-{uuid.uuid4().hex}", since_ms=to_ms(ctx.now()))
    try:
        go_cold(ctx, ticket, pair)
        # only those still waiting are marked cold: a claimed task's row is warm too, and
        # stays so (a push of it on its way meets its mark and is refused)
        removed = ctx.warm.replace_cold(queue, tenant, [item[1] for item in items],
                                        now_ms=now_ms, ttl_ms=ttl_ms)
        mark_cold(ctx, removed)
    finally:
        close(ctx, ticket)
    return removed


def mark_cold(ctx: Context, ids: Sequence[str], conn: Conn | None = None) -> None:
    if ids:
        ctx.store.mark_cold(ids, to_datetime(ctx.now()), conn=conn)


def dispatch(ctx: Context, ticket: Ticket, rows_by_pair: Mapping[Pair, Sequence[PushItem]],
             *, kind: str = "enqueue", along: Mapping[Pair, PushAlong] | None = None,
             conn: Conn | None = None, together: bool = False) -> set[str]:
    """Push committed warm rows, mark what the warm tier refused cold, end the admission.
    Returns the refused ids. ``along``: pushes of pairs sent already (``push_along``).
    ``conn``: a connection the caller holds, not in a transaction (the promotion's):
    the settings read on a cache miss and the refused rows' marks run on it.
    ``together`` (without ``along``): the pairs' pushes that can go along are sent in one
    round trip first (``push_together``), then each pair's outcome is read in turn. When a
    pair's push fails, the outcomes of the pushes sent already are still read and their
    refusals marked cold, the pairs not sent yet are not pushed, and the first error is
    raised."""
    refused: set[str] = set()
    error: Exception | None = None
    try:
        if together and along is None:
            along = push_together(ctx, ticket, rows_by_pair, kind=kind, conn=conn)
        for pair, items in rows_by_pair.items():
            if not items:
                continue
            sent = along.get(pair) if along else None
            if error is not None and sent is None:
                continue  # (not sent: its rows wait for the reconciler, as after any failure)
            try:
                refused.update(push(ctx, ticket, pair, items, kind=kind, along=sent,
                                    conn=conn))
            except Exception as exc:  # (the pushes sent already: their outcomes still read)
                if error is None:
                    error = exc
        mark_cold(ctx, sorted(refused), conn)
        if error is not None:
            raise error
    finally:
        close(ctx, ticket)
    return refused


@lazy_dataclass(frozen=True)
class Target:
    """A task about to become ready."""

    id: str
    queue: str
    tenant: str


def warm_items(rows: Iterable[ReadyRow]) -> dict[Pair, list[PushItem]]:
    """The push items of the warm rows, by pair. Built before the transaction that made
    the rows ready commits: a value that cannot be made fails it, not the push after."""
    by_pair: dict[Pair, list[PushItem]] = defaultdict(list)
    for row in rows:
        if row.state == "warm":
            by_pair[(row.queue, row.tenant)].append(row_push_item(row))
    return by_pair


@lazy_dataclass
class Pending:
    """Rows made ready in an open transaction, and their push items, to dispatch once it
    commits."""

    ticket: Ticket
    rows: list[ReadyRow]
    items: dict[Pair, list[PushItem]]
    # pushes sent in another round trip of their pair (push_along), read by finish
    along: dict[Pair, PushAlong] = field(default_factory=dict)


def make_ready(ctx: Context, conn: Conn, targets: Sequence[Target],
               *, from_states: Sequence[str] = ("delayed",)) -> Pending:
    """Give each target a new seq (the back of its line, in the order given) and its tier.
    Call ``finish`` after the transaction commits."""
    ticket = begin(ctx, ((t.queue, t.tenant) for t in targets))
    try:
        rows = ctx.store.make_ready(
            conn, (t.id for t in targets),
            [ticket.state_for((t.queue, t.tenant)) for t in targets],
            list(from_states), to_datetime(ctx.now()))
        items = warm_items(rows)
    except BaseException:
        close(ctx, ticket)
        raise
    return Pending(ticket, rows, items)


def finish(ctx: Context, pending: Pending) -> set[str]:
    """After commit: push the warm rows (or read the outcome of those pushed along);
    returns the ids that went cold instead."""
    return dispatch(ctx, pending.ticket, pending.items, along=pending.along)


def push_along(ctx: Context, pending: Pending, pair: Pair) -> PushAlong | None:
    """After commit: the push of ``pending``'s warm rows of ``pair`` made ready for the
    caller to send in a round trip of its own to the pair's server (``WarmTier.release``),
    and kept in ``pending`` so that ``finish`` reads its outcome rather than pushing. None
    when it cannot go along (nothing to push, more than one call's worth, a cluster, or a
    tenant's bound that needs a grant first): ``finish`` pushes it then."""
    items = pending.items.get(pair)
    if not items or pair in pending.along:
        return None
    along = _along(ctx, pending.ticket, pair, items, kind="enqueue")
    if along is not None:
        pending.along[pair] = along
    return along


def push_together(ctx: Context, ticket: Ticket, rows_by_pair: Mapping[Pair, Sequence[PushItem]],
                  *, kind: str, conn: Conn | None = None) -> dict[Pair, PushAlong] | None:
    """The pushes of the pairs (an enqueue's: one queue, a pair per tenant) that can go
    along (``_along``), sent in one round trip, each followed by its tenant's note, as
    ``push`` would send them one pair after another; ``dispatch`` reads their outcomes
    (and pushes the other pairs on their own). The pairs share nothing a push of another
    changes (each its own keys and its tenant's share), so sending them before reading
    any outcome leaves each push as it would be: for distinct tenants of one queue only.
    None when fewer than two pairs have items, or on a cluster (each pair's push goes to
    its own master); ``WarmTierUnavailable`` as ``push`` raises it."""
    if ctx.warm.calls is None or sum(1 for items in rows_by_pair.values() if items) < 2:
        return None
    alongs: dict[Pair, PushAlong] = {}
    for pair, items in rows_by_pair.items():
        if items:
            along = _along(ctx, ticket, pair, items, kind=kind, conn=conn)
            if along is not None:
                alongs[pair] = along
    if alongs:
        ctx.warm.push_pairs(list(alongs.values()))
    return alongs


def _along(ctx: Context, ticket: Ticket, pair: Pair, items: Sequence[PushItem], *, kind: str,
           conn: Conn | None = None) -> PushAlong | None:
    """The push of ``items`` to ``pair`` made ready to send in another round trip
    (``WarmTier.push_along``), as ``push`` would send it. None when it cannot go along:
    more than one call's worth, a cluster, or a tenant's bound that needs a grant first
    (``push`` sends it then)."""
    if next(iter(push_chunks(items)))[1] != len(items):
        return None
    queue, tenant = pair
    share, limit = tenant_budget.share(ctx, queue, tenant)
    if limit and tenant_budget.shortfall(queue, tenant, sum(len(item[2]) for item in items)
                                         + share.charge * len(items)):
        return None
    settings = ctx.queue_settings.get(queue, conn=conn)
    return ctx.warm.push_along(
        queue, tenant, warm_max=settings.warm_max, warm_max_bytes=settings.warm_max_bytes,
        kind=kind, now_ms=to_ms(ctx.now()), token=ticket.token,
        since_ms=ticket.since_ms, items=items, share=share, shard_tag=ctx.id_tag)


def abandon(ctx: Context, pending: Pending | None) -> None:
    """The transaction failed: only end the registrations."""
    if pending is not None:
        close(ctx, pending.ticket)


def ready_now(ctx: Context, targets: Sequence[Target],
              *, from_states: Sequence[str] = ("delayed",)) -> list[ReadyRow]:
    """Make these tasks ready right away, in one short transaction; the rows made ready,
    with the state each ended in (a row the warm tier refused is cold)."""
    if not targets:
        return []
    pending: Pending | None = None
    try:
        with ctx.db.transaction() as conn:
            pending = make_ready(ctx, conn, targets, from_states=from_states)
    except BaseException:
        abandon(ctx, pending)
        raise
    refused = finish(ctx, pending)
    return [row._replace(state="cold") if str(row.id) in refused else row
            for row in pending.rows]
