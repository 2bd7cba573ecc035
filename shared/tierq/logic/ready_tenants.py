"""Which tenants of a queue may have ready work: the ones a queue-wide claim and the
consumer dispatcher visit, read from an index in windows, so a claim pass costs the window,
not the tenants ever registered on the queue.

The index is a sorted set per queue on the queue's own slot
(``QueueKeys.ready_tenants``: ``tq:{<queue>}:ready_tenants``, every score 0, read by name
with ``ZRANGE … BYLEX``; ``…:ready_tenants:<shard tag>`` per shard of a sharded deployment,
whose shards share the warm tier: a shard's claims visit only the tenants homed there,
whose rows its own database holds). On a cluster it lives in another slot than the pairs, so no pair
script writes it: Python keeps it, after the pair's own calls.

=========================================  ===========================================
event                                      the index
=========================================  ===========================================
an admission pushed tasks warm (enqueue,   the tenant is entered after the push: on a
bulk load, release, delayed mover,         single server in the push's own pipeline;
restore, ``ready_now``)                    on a cluster by ``note`` (one ZADD) when the
                                           push found the pair's ready set empty
an admission wrote tasks cold              entered when it ends (``note``)
a maintenance pass visits a pair with      entered again (``note``, one call per
ready work (reaper: warm rows with ready   queue): the backstop for every other path
tasks; the cold → warm mover: cold rows)
a queue-wide claim or the dispatcher finds the tenant is taken out (``forget``), and
the pair empty (nothing ready warm, no     entered back if a second look at the pair
cold row a refill could bring)             finds ready tasks or cold mode
=========================================  ===========================================

A process's queue-wide claims read a window once and rotate over it for up to
``TIERQ_CLAIM_WINDOW_REUSE_MS`` (``claim_window``): each claim's window starts one tenant
further, as a read from the turn would, at a round trip less per claim, the busy shapes'
most frequent Valkey call. Only a window that is the whole index is kept:

=========================================  ===========================================
what happens                               the window the next claim takes
=========================================  ===========================================
the last read returned fewer than          the kept one, one tenant further, until the
``CLAIM_WINDOW`` tenants (the whole index) reuse time is up
it returned a full window, or the          read again (tenants beyond the window get
registered tenants stood in                their turns; the stand-in has its own turns)
a claim found a pair of it empty, or       read again: the index changed
raised
this process entered a tenant the window   read again: its work is seen by the next claim
lacks (a push, ``note``)                   that starts (a claim of another thread under
                                           way may keep the old window: at most the reuse
                                           time); other processes' work within the reuse
                                           time
=========================================  ===========================================

A claim that found a pair empty takes its tenant out, then looks at the pair once more
and enters it back if it has ready tasks or is in cold mode (``forget``): an admission
that raced the claim has pushed before it enters its tenant, so either the second look
sees its tasks or its entry lands after the removal. A push into a ready set that holds
tasks enters nobody on a cluster: a tenant is only taken out after a look that found its
ready set empty, and only a push fills an empty one, so the first push after that look
finds it empty and enters the tenant. The index may still lag where a write
of it failed (Valkey not answering): the next maintenance pass over the pair enters the
tenant again — at most one reaper or mover period (docs/architecture.md §5, "Tenants with
ready work"). Its own claims (a worker of that tenant) never read the index and see the
work at once. An entry of a tenant without work costs one visit, which takes it out.

On a cluster the index lives on one master, which may hold none of the queue's pairs; its
outage must not stop the claims of the tenants whose masters answer:

=========================================  ===========================================
the index's master                         reads and writes of the index
=========================================  ===========================================
answers                                    as above
did not answer an index call of this       remembered down for ``SET_ASIDE_SECONDS``
process (``WarmTierUnavailable``) within   (``Context.ready_index_down``; after a read,
``SET_ASIDE_SECONDS``                      its pairs set aside too, before the claim's
                                           pops: logic/claim_isolation.py): a
                                           window comes from the queue's registered
                                           tenants in PostgreSQL (``tierq_queue_tenants``,
                                           by name, wrapping) and the next window starts
                                           after its last tenant; ``forget`` takes
                                           nothing out; ``note`` keeps its tenants and
                                           enters them with the queue's first entry after
                                           (at most ``PENDING_MAX`` per process)
set aside by a claim's failed pair there   reads as in the row above (no timeout spent
                                           on the index); writes are tried
=========================================  ===========================================

What the registered tenants do not replace: a queue's claim limits (``rate``,
``max_leased``), its consumer's invocation slots (``max_concurrency``) and the
dispatcher's counts live on the queue's slot too, so their calls fail with that master as
before. A single server, or a shard of a sharded deployment (whose registered pairs
include pairs homed on other shards), raises ``WarmTierUnavailable`` as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

from tierq.errors import WarmTierFull, WarmTierUnavailable
from tierq.logic import claim_isolation
from tierq.logic.context import Context

log = logging.getLogger(__name__)

# Tenants one queue-wide claim visits at most (a window of the index, from its turn).
CLAIM_WINDOW = 64
# Tenants one dispatcher batch tries at most before it ends empty.
DISPATCH_WINDOW = 64


def note(ctx: Context, queue: str, tenants: Iterable[str]) -> None:
    """Enter ``tenants`` in the queue's index. Best-effort: a failure is logged, and the
    next maintenance pass over the pair enters the tenant again. While the index's master
    is remembered down, the tenants are kept (``Context.ready_index_pending``) and entered
    with the queue's first entry after it."""
    todo = list(tenants)
    if not todo:
        return
    window_changed(ctx, queue, todo)
    if _index_down(ctx, queue):
        _keep_pending(ctx, queue, todo)
        return
    pending = ctx.ready_index_pending.pop(queue, None) if ctx.ready_index_pending else None
    if pending:
        todo = [*todo, *pending]
    try:
        ctx.warm.note_ready_tenants(queue, todo, ctx.id_tag)
    except (WarmTierUnavailable, WarmTierFull) as exc:
        if _index_failed(ctx, queue, exc):
            _keep_pending(ctx, queue, todo)
        log.warning("entering tenants of %r in its ready-tenant index failed; the next "
                    "maintenance pass does", queue, exc_info=True)


def claim_window(ctx: Context, queue: str) -> tuple[list[str], bool]:
    """The window a queue-wide claim of this process starts from, and whether the registered
    tenants stood in (``window``, from the turn after the last claim's first tenant): the
    kept window one tenant further while it may be reused (the module docstring's second
    table), else a read, kept when it is the whole index."""
    reuse_ms = ctx.settings.claim_window_reuse_ms
    now = time.monotonic()
    kept = ctx.claim_windows.get(queue)
    if kept is not None:
        until, tenants = kept
        if now < until:
            turned = [*tenants[1:], tenants[0]]
            ctx.claim_windows[queue] = (until, turned)
            return turned, False
        ctx.claim_windows.pop(queue, None)  # (another thread's claim may have dropped it)
    candidates, registered = window(ctx, queue, ctx.claim_turns.get(queue), CLAIM_WINDOW)
    if reuse_ms and not registered and 0 < len(candidates) < CLAIM_WINDOW:
        ctx.claim_windows[queue] = (now + reuse_ms / 1000, candidates)
    return candidates, registered


def window_changed(ctx: Context, queue: str, tenants: Iterable[str] = ()) -> None:
    """Read the queue's index at the next claim instead of reusing the kept window: a pair
    of it was found empty (no ``tenants``), or this process made ``tenants`` ready and one
    of them is not in the window."""
    kept = ctx.claim_windows.get(queue)
    if kept is None:
        return
    if not tenants or not set(tenants).issubset(kept[1]):
        ctx.claim_windows.pop(queue, None)


def forget(ctx: Context, queue: str, tenants: Sequence[str]) -> None:
    """Take tenants found without ready work out of the queue's index, then look at their
    pairs again and enter back those that have ready tasks or are in cold mode now: an
    admission pushes (or writes cold) before it enters its tenant, so one that raced this
    claim either lands before the second look, which sees it, or enters its tenant after
    the removal. Best-effort: a failure is logged. When the removal went through but the
    second look fails (a pair's master not answering), every tenant removed is entered
    back: a push into a line with work enters no one on a cluster, so a tenant removed
    wrongly would otherwise wait for a maintenance pass, and an entry too many costs one
    visit. Nothing is taken out while the index's master is remembered down."""
    if not tenants or _index_down(ctx, queue):
        return
    try:
        ctx.warm.forget_ready_tenants(queue, tenants, ctx.id_tag)
    except (WarmTierUnavailable, WarmTierFull) as exc:
        _index_failed(ctx, queue, exc)
        log.warning("taking tenants of %r out of its ready-tenant index failed",
                    queue, exc_info=True)
        return
    try:
        now = ctx.warm.stats_of(queue, tenants)
    except (WarmTierUnavailable, WarmTierFull):
        log.warning("looking again at tenants of %r taken out of its ready-tenant index "
                    "failed; they are entered back", queue, exc_info=True)
        note(ctx, queue, tenants)
        return
    note(ctx, queue, [t for t, (ready, _, mode) in zip(tenants, now, strict=True)
                      if ready or mode != "warm"])


def tenants_after(ctx: Context, queue: str, after: str | None, k: int) -> list[str]:
    """Up to ``k`` tenants of the queue's index by name after ``after``, wrapping round to
    the first (``after`` None: from the first); :func:`window` says where they came from."""
    return window(ctx, queue, after, k)[0]


def window(ctx: Context, queue: str, after: str | None, k: int) -> tuple[list[str], bool]:
    """``tenants_after``, and whether the tenants are the queue's registered ones (the
    index's master is set aside: the module's second table), most of which may have no
    work: a caller's next window then starts after this one's last tenant."""
    if not _may_stand_in(ctx):
        return ctx.warm.ready_tenants_after(queue, after, k, ctx.id_tag), False
    if _index_down(ctx, queue, reading=True):
        return _registered_after(ctx, queue, after, k), True
    try:
        return ctx.warm.ready_tenants_after(queue, after, k, ctx.id_tag), False
    except WarmTierUnavailable as exc:
        _index_failed(ctx, queue, exc, pairs_too=True)
        return _registered_after(ctx, queue, after, k), True


# The most tenants a process keeps for entries its index's master did not take (beyond, the
# maintenance passes enter them).
PENDING_MAX = 10_000


def _may_stand_in(ctx: Context) -> bool:
    """Whether the registered tenants may stand in for the index: on a cluster of an
    unsharded deployment (a shard's registered pairs include pairs homed elsewhere)."""
    return not ctx.warm.single_server and ctx.id_tag is None


def _index_down(ctx: Context, queue: str, *, reading: bool = False) -> bool:
    """Whether the index's master is remembered down: after a call to the index failed
    (``Context.ready_index_down``), or, for a read, after any pair of that master failed a
    claim (logic/claim_isolation.py): a read then costs no timeout, and skipping a write
    would lose an entry."""
    if not _may_stand_in(ctx) or not (ctx.ready_index_down or
                                      (reading and ctx.claim_masters_down)):
        return False
    master = ctx.warm.index_master(queue, ctx.id_tag)
    if not master:
        return False
    until = ctx.ready_index_down.get(master)
    if until is not None:
        if until > time.monotonic():
            return True
        # (forgotten once its time is up: calls after the outage skip the slot lookup)
        ctx.ready_index_down.pop(master, None)
    return reading and claim_isolation.master_passed_over(ctx, master)


def _index_failed(ctx: Context, queue: str, exc: Exception, *,
                  pairs_too: bool = False) -> bool:
    """Remember the index's master down after it did not answer (not when it is out of
    memory: it answers), for this process's index calls, and with ``pairs_too`` (a claim's
    or a batch's read: its pops come next) for its claims' pairs there; whether it was."""
    if not isinstance(exc, WarmTierUnavailable) or not _may_stand_in(ctx):
        return False
    master = ctx.warm.index_master(queue, ctx.id_tag)
    if not master:
        return False
    now = time.monotonic()
    if ctx.ready_index_down.get(master, 0.0) <= now:
        log.warning("the ready-tenant index of %r did not answer; claims read its "
                    "registered tenants for %.0f s: %s", queue,
                    claim_isolation.SET_ASIDE_SECONDS, exc, extra={"queue": queue})
    ctx.ready_index_down[master] = now + claim_isolation.SET_ASIDE_SECONDS
    if pairs_too:
        claim_isolation.set_master_aside(ctx, master)
    return True


def _keep_pending(ctx: Context, queue: str, tenants: Iterable[str]) -> None:
    """Keep entries for the queue's first entry once its index answers (at most
    ``PENDING_MAX`` tenants in all)."""
    kept = ctx.ready_index_pending.setdefault(queue, set())
    room = PENDING_MAX - sum(len(v) for v in list(ctx.ready_index_pending.values()))
    for tenant in tenants:
        if room <= 0:
            return
        if tenant not in kept:
            kept.add(tenant)
            room -= 1


def _registered_after(ctx: Context, queue: str, after: str | None, k: int) -> list[str]:
    """Up to ``k`` of the queue's registered tenants by name after ``after``, then from the
    first up to ``after`` itself (each once, in the database's order of names): the
    index's window, from PostgreSQL."""
    first = [t for _, t in ctx.store.pairs_page((queue, after or ""), k, tenant=None,
                                                 queue=queue)]
    if not after or len(first) >= k:
        return first
    seen = set(first)
    out = list(first)
    for _, tenant in ctx.store.pairs_page((queue, ""), k - len(first), tenant=None,
                                          queue=queue):
        if tenant in seen:
            break
        out.append(tenant)
        if tenant == after:
            break
    return out
