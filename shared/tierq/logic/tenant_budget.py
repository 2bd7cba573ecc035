"""A tenant's share of the warm tier: the bytes one tenant holds in Valkey over all its
queues stay under its bound (``Settings.tenant_warm_bound``), so no tenant fills the cache
the others share (docs/architecture.md §3, "A tenant's share").

What counts (lua/warm_usage.lua): each pair's task data plus ``TASK_CHARGE`` per task
waiting or leased (its ready entry, and once claimed its lease, ``lease_of`` entry and a
share of its claim's record), plus the progress its leases keep (meta ``progress``), the
replacements it keeps for pushes on their way (meta ``newer``, lua/newer_entries.lua) and
its tombstones (``GONE_CHARGE`` each, dal/warm_tier.py) and its completion markers
(``MARKER_CHARGE`` each, kept within the pair's room: lua/task_finished.lua). A
pair's keys sit in its own slot and the tenant's pairs in many, so the total is kept the
way the queue-wide limits are: each pair holds an *allotment* (meta ``allot``) taken from
its tenant's ledger (``tq:{~tenant}:warm``, lua/warm_ledger.lua), and its pushes consume
it atomically (lua/push_ready.lua):

======================  =================================================================
step                    what happens
======================  =================================================================
push fits its allotment one call, as without a bound ('ask')
push short of it        no task written; ``grant`` takes the shortfall plus ``keep`` from
                        the ledger (sampling pairs that hold more than they use when the
                        ledger is at the bound: ``reclaim``) and pushes again, 'strict',
                        with the grant: what does not fit is refused and the pair goes cold
push expected short     a growing line (``shortfall``) takes its grant first, then asks
push leaves slack       an allotment over usage + 2 keep is lowered to usage + keep; the
                        pair's count of bytes given back (meta ``freed``) is reported to
                        the ledger (``give_back``)
replacement grows       counted as a push (lua/update_ready.lua), with the entries it keeps
                        for pushes; what does not fit waits cold, a task not waiting behind
                        a mark its push refuses (logic/admission.update_warm)
progress grows          a heartbeat's progress as a push (lua/lease_progress.lua): 'ask',
                        short a grant, then 'strict'; what does not fit is dropped, the
                        lease extended all the same (logic/leases.keep_progress)
======================  =================================================================

The ledger is written before a pair's allotment grows and after it shrinks, so a caller
that stops between the two leaves the ledger counting more than the pairs hold (the tenant
gets less, never more) until a later report or ``reclaim`` corrects the entry. A report
lowers the entry by what the pair's ``freed`` count has beyond the count the entry saw, so
it counts once whatever order reports arrive in; ``reclaim`` also sets the entry from the
pair's own figure, only when its last grant is older than ``quiet`` (the admission's
staleness, TIERQ_ADMISSION_STALE_SECONDS). The largest overshoot: a grant whose push reaches
its pair more than ``quiet`` after the grant was taken is counted by the pair but may have
left the ledger, at most one grant (its shortfall plus ``keep``) per push so stalled.
"""

from __future__ import annotations

import logging
import time
from weakref import WeakKeyDictionary

from tierq.dal.warm_tier import TenantShare, WarmTier
from tierq.errors import WarmTierFull, WarmTierUnavailable
from tierq.logic.context import Context, to_ms

log = logging.getLogger(__name__)

# Bytes counted per task waiting or leased besides its data. Measured (bench.valkey_commands,
# lua/README.md "Leases"): a lease costs 177 bytes in `leased`, 138 in `lease_of` and 145 in
# `started`, plus a claim record of about 100 once per claim; a waiting task about 130.
TASK_CHARGE = 640
# what a pair keeps beyond its usage: a share of the bound, within these
KEEP_MIN = 64 * 1024
KEEP_MAX = 4 * 1024 * 1024
KEEP_SHARE = 64
# pairs a reclaim looks at (HRANDFIELD of the ledger), and how often per tenant and process
RECLAIM_SAMPLE = 16
RECLAIM_EVERY = 1.0
_reclaimed_at: dict[str, float] = {}
RECLAIMED_KEPT = 10_000
# the allotment each pair had left beyond its usage after this process's last push of it,
# when that push found tasks waiting (a line that grows): a push that needs more takes its
# grant before it, not after an 'ask' (``shortfall``)
_slack: dict[tuple[str, str], int] = {}
SLACK_KEPT = 10_000
# a task's fields besides its payload and its parents' results, at most (key, names, ids)
TASK_FIELDS_BYTES = 16 * 1024
# the last capacity each warm tier's INFO gave (capacity())
_capacity_seen: WeakKeyDictionary[WarmTier, int] = WeakKeyDictionary()


def capacity(ctx: Context, queue: str, tenant: str) -> int:
    """The warm tier's capacity in bytes: TIERQ_WARM_CAPACITY_BYTES, else the ``maxmemory``
    of the server holding the pair (0: unknown: INFO refused, or no maxmemory). A reading
    that fails after one succeeded gives the last one: a moment without INFO never lifts
    the bound."""
    if ctx.settings.warm_capacity_bytes:
        return ctx.settings.warm_capacity_bytes
    memory = ctx.warm.memory(queue, tenant)
    if memory is not None and memory.maxmemory:
        _capacity_seen[ctx.warm] = memory.maxmemory
        return memory.maxmemory
    return _capacity_seen.get(ctx.warm, 0)


def largest_task(ctx: Context) -> int:
    """What one warm task may count against its tenant's bound at most: its payload, its
    parents' results (logic/flows.py), its other fields and ``TASK_CHARGE``."""
    from tierq.logic.flows import MAX_PARENT_RESULT_BYTES  # (flows imports admission)

    return (ctx.settings.max_payload_bytes + MAX_PARENT_RESULT_BYTES + TASK_FIELDS_BYTES
            + TASK_CHARGE)


def bound(ctx: Context, queue: str, tenant: str) -> int:
    """The bytes the tenant may hold warm (0: no bound); never less than one largest task,
    which would otherwise wait cold at the head of its line for good."""
    if ctx.settings.tenant_warm_max_bytes is not None:  # (no need to know the capacity)
        limit = ctx.settings.tenant_warm_max_bytes
    else:
        limit = ctx.settings.tenant_warm_bound(capacity(ctx, queue, tenant))
    return max(limit, largest_task(ctx)) if limit else 0


def charge(ctx: Context, queue: str, tenant: str) -> int:
    """What each task of the pair counts against its tenant's bound beside its data:
    ``TASK_CHARGE``, 0 when the tenant has no bound (what a completion marker's script
    takes to know the pair's room, lua/task_finished.lua)."""
    return TASK_CHARGE if bound(ctx, queue, tenant) else 0


def keep(limit: int) -> int:
    """The allotment a pair keeps beyond its usage, for a tenant bound of ``limit``."""
    return min(KEEP_MAX, max(KEEP_MIN, limit // KEEP_SHARE))


def share(ctx: Context, queue: str, tenant: str) -> tuple[TenantShare, int]:
    """How a push of the pair counts against its tenant's bound, and the bound (0: none)."""
    limit = bound(ctx, queue, tenant)
    if not limit:
        return TenantShare(), 0
    return TenantShare("ask", 0, TASK_CHARGE, keep(limit)), limit


def grant(ctx: Context, queue: str, tenant: str, short: int, limit: int) -> int:
    """Take ``short`` bytes (and ``keep`` more) of the tenant's bound for the pair; fewer
    when the ledger has not that much left, after a ``reclaim``. 0 when the ledger's
    Valkey does not answer (the pair's tasks then wait cold: the safe side)."""
    want = short + keep(limit)
    got = 0  # what the ledger gave: the pair's, even when a later step fails
    try:
        got = ctx.warm.ledger_take(tenant, queue, want=want, bound=limit,
                                   now_ms=to_ms(ctx.now()))
        if got < short and reclaim(ctx, tenant, limit, besides=queue):
            got += ctx.warm.ledger_take(tenant, queue, want=want - got, bound=limit,
                                        now_ms=to_ms(ctx.now()))
    except (WarmTierUnavailable, WarmTierFull):
        log.warning("the warm-tier ledger of tenant %r did not answer; %r waits cold (its "
                    "progress is dropped)", tenant,
                    queue, exc_info=True)
    return got


def pushed(queue: str, tenant: str, slack: int, ready_before: int) -> None:
    """Remember the allotment the pair had left beyond its usage after a push that found
    ``ready_before`` tasks waiting. A push into an empty line says claims keep up with the
    pair: its figure is forgotten, as claims will have raised it by the next push."""
    if not ready_before:
        _slack.pop((queue, tenant), None)
        return
    if len(_slack) >= SLACK_KEPT:
        _slack.clear()
    _slack[(queue, tenant)] = slack


def shortfall(queue: str, tenant: str, need: int) -> int:
    """The bytes a push of ``need`` bytes (its tasks' data plus ``TASK_CHARGE`` each: at
    most what it adds to the usage) is expected to be short of, from the pair's last push
    in this process (``pushed``): 0 when it fits or nothing is known (the push asks).
    Another process's pushes or claims may have changed the pair since: a push still short
    asks as before, and an allotment that grew too far is given back by the push."""
    left = _slack.get((queue, tenant))
    return 0 if left is None else max(0, need - left)


def give_back(ctx: Context, queue: str, tenant: str, freed: int) -> None:
    """Report to the ledger the pair's count of bytes given back so far (``freed``: a
    push gave some back), which lowers its entry by what the ledger has not seen of it
    (best effort: an entry left too high counts against the tenant only, until a later
    report or a ``reclaim`` lowers it)."""
    try:
        ctx.warm.ledger_set(tenant, queue, allot=None, freed=freed, now_ms=to_ms(ctx.now()),
                            quiet_ms=_quiet_ms(ctx))
    except (WarmTierUnavailable, WarmTierFull):
        log.warning("reporting %d bytes given back by %r/%r to its ledger failed", freed,
                    queue, tenant, exc_info=True)


def forget_pair(ctx: Context, queue: str, tenant: str) -> None:
    """The pair's keys were dropped (a queue purge): its ledger entry goes to 0 with them,
    and so does the count of bytes given back it saw, which the pair restarts from 0 (best
    effort, as ``give_back``: an entry left behind errs high, against the tenant only)."""
    try:
        ctx.warm.ledger_set(tenant, queue, allot=0, freed=0, now_ms=to_ms(ctx.now()),
                            quiet_ms=0)
    except (WarmTierUnavailable, WarmTierFull):
        log.warning("forgetting %r/%r in its tenant's ledger failed", queue, tenant,
                    exc_info=True)


def cancel(ctx: Context, queue: str, tenant: str, granted: int) -> None:
    """Take a grant out of the ledger whose push wrote nothing (best effort, as
    ``give_back``)."""
    try:
        ctx.warm.ledger_cancel(tenant, queue, amount=granted)
    except (WarmTierUnavailable, WarmTierFull):
        log.warning("giving back a grant of %d bytes of %r/%r to its ledger failed", granted,
                    queue, tenant, exc_info=True)


def reclaim(ctx: Context, tenant: str, limit: int, *, besides: str | None = None) -> bool:
    """Shrink up to RECLAIM_SAMPLE of the tenant's pairs (picked at random from its ledger)
    to their usage and set their ledger entries from them, at most every RECLAIM_EVERY
    seconds per tenant in this process; whether it ran. The tenant's queues that hold
    allotments they do not use (claims emptied them) so free them for the others.
    ``besides``: a queue whose pair is left as it is (the one asking for a grant: its push
    counted its allotment already)."""
    now = time.monotonic()
    if now - _reclaimed_at.get(tenant, float("-inf")) < RECLAIM_EVERY:
        return False
    if len(_reclaimed_at) >= RECLAIMED_KEPT:
        _reclaimed_at.clear()
    _reclaimed_at[tenant] = now
    for queue in ctx.warm.ledger_queues(tenant, RECLAIM_SAMPLE):
        if queue == besides:
            continue
        _, after, freed = ctx.warm.shrink_allot(queue, tenant, charge=TASK_CHARGE, keep=0)
        ctx.warm.ledger_set(tenant, queue, allot=after, freed=freed, now_ms=to_ms(ctx.now()),
                            quiet_ms=_quiet_ms(ctx))
    return True


def room(ctx: Context, queue: str, tenant: str, limit: int) -> int:
    """Bytes the pair could still take under its tenant's bound: what its allotment has
    beyond its usage (its completion markers give way to tasks: counted free) plus what the
    ledger has left (a promotion sizes itself by it). 0 when the tenant's ledger or pairs do
    not answer: its pair waits cold, and a claim over many tenants goes on with the
    others."""
    try:
        usage, allot, markers = ctx.warm.pair_usage(queue, tenant, charge=TASK_CHARGE)
        usage -= markers
        left = limit - ctx.warm.ledger_total(tenant)
        if left < TASK_CHARGE and allot - usage < TASK_CHARGE and reclaim(ctx, tenant, limit):
            left = limit - ctx.warm.ledger_total(tenant)
            usage, allot, markers = ctx.warm.pair_usage(queue, tenant, charge=TASK_CHARGE)
            usage -= markers
    except (WarmTierUnavailable, WarmTierFull):
        log.warning("the warm-tier share of tenant %r did not answer; %r waits cold", tenant,
                    queue, exc_info=True)
        return 0
    return max(0, allot - usage) + max(0, left)


def _quiet_ms(ctx: Context) -> int:
    return int(ctx.settings.admission_stale_seconds * 1000)
