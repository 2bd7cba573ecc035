"""Queues: settings, pause/resume, live counts per (queue, tenant), running leases."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson

from tierq.core.lazy import lazy_module
from tierq.dal.warm_tier import RUNNING_CALL_LEASES
from tierq.logic import limits, tenant_budget
from tierq.logic.context import Context, Pair, from_ms, to_ms
from tierq.models.queues import QueueSettings, RateLimit

if TYPE_CHECKING:
    from tierq.logic import flows, groups
    from tierq.models import queue_views
    from tierq.models.leases import RunningLease
    from tierq.models.queue_update import QueueSettingsUpdate
    from tierq.models.queue_views import (
        LimitsUse,
        QueueCounts,
        QueueView,
        TenantCounts,
        TenantQueueView,
    )
else:  # the views: every function reads a queue's settings, few build its views
    queue_views = lazy_module("tierq.models.queue_views")
    # (what a purge tells: the admin function's)
    flows = lazy_module("tierq.logic.flows")
    groups = lazy_module("tierq.logic.groups")


def put_settings(ctx: Context, queue: str, update: QueueSettingsUpdate) -> QueueSettings:
    backoff = update.backoff
    ctx.store.upsert_queue_settings(
        queue,
        warm_max=update.warm_max,
        warm_max_bytes=update.warm_max_bytes,
        lease_seconds=update.lease_seconds,
        max_attempts=update.max_attempts,
        backoff_kind=backoff.kind if backoff else None,
        backoff_base_seconds=backoff.base_seconds if backoff else None,
        backoff_cap_seconds=backoff.cap_seconds if backoff else None,
        backoff_jitter=backoff.jitter if backoff else None,
        retention_seconds=update.retention_seconds,
        paused=update.paused,
        **_limit_changes(update),
    )
    ctx.queue_settings.invalidate(queue)
    ctx.metric_queues.forget()  # (a configured queue may now have its own metrics)
    return ctx.queue_settings.get(queue)


def _limit_changes(update: QueueSettingsUpdate) -> dict[str, Any]:
    """The store's arguments for the limits and the consumer the update names (null
    clears; a field left out is not passed, so the store keeps it)."""
    out: dict[str, Any] = {}
    for name in ("max_leased", "tenant_max_leased", "group_max_leased", "timeout_seconds"):
        if update.given(name):
            out[name] = getattr(update, name)
    for name in ("rate", "tenant_rate"):
        if update.given(name):
            rate: RateLimit | None = getattr(update, name)
            out[name] = None if rate is None else (rate.per_second, rate.burst)
    if update.given("consumer"):
        out["consumer"] = None if update.consumer is None \
            else update.consumer.model_dump_json()
    return out


def purge_tasks(ctx: Context, queue: str) -> int:
    """Delete every task of a queue (all states) and its warm tier. Workers holding leases get
    ``not_owner`` on ack. Returns how many tasks were deleted."""
    deleted = ctx.store.purge_queue_tasks(queue)
    flows.on_queue_purged(ctx, queue)  # what waits on them elsewhere (logic/flows.py)
    groups.on_queue_purged(ctx, queue)  # its groups (logic/groups.py)
    # a push that read rows before the purge and comes after it is late: the fence
    fence_ms = to_ms(ctx.now())
    for tenant in ctx.pairs.tenants(queue):
        ctx.warm.drop_pair(queue, tenant, fence_ms=fence_ms)
        ctx.modes.pop((queue, tenant), None)
        # its allotment (and the count of bytes it gave back) went with its keys
        tenant_budget.forget_pair(ctx, queue, tenant)
    ctx.warm.drop_ready_tenants(queue, ctx.id_tag)
    return deleted


# How many pairs one statement of a listing reads at a time.
PAIR_CHUNK = 500


def pairs_after(ctx: Context, after: Pair = ("", ""), *, limit: int = PAIR_CHUNK,
                tenant: str | None = None, queue: str | None = None) -> list[Pair]:
    """Registered (queue, tenant) pairs after ``after`` in (queue, tenant) order, of one
    tenant and/or one queue if given (selected in SQL, each filter by its own index)."""
    if queue is not None and tenant is None:
        if after[0] < queue:
            after = (after[0], "")  # the cursor is before this queue: all its tenants
        elif after[0] > queue:
            return []
    return ctx.store.pairs_page(after, limit, tenant=tenant, queue=queue)


def iter_pairs(ctx: Context, after: Pair = ("", ""), *, tenant: str | None = None,
               queue: str | None = None, with_warm_rows: bool = False,
               chunk: int = PAIR_CHUNK) -> Iterator[Pair]:
    """Every pair :func:`pairs_after` selects, read ``chunk`` registered pairs at a time;
    ``with_warm_rows``: only those with ready or leased tasks (the only ones that can hold
    leases)."""
    while True:
        registered = pairs_after(ctx, after, limit=chunk, tenant=tenant, queue=queue)
        if with_warm_rows and registered:
            yield from ctx.store.pairs_with_warm_rows(registered)
        else:
            yield from registered
        if len(registered) < chunk:
            return
        after = registered[-1]


def pair_counts(ctx: Context, pairs: Sequence[Pair]) -> list[TenantCounts]:
    """Live counts of the pairs given, in their order: warm and leased from Valkey, the rest
    from PostgreSQL, and the oldest ready task's age (leased tasks excluded). Per pair a
    fixed number of reads, whatever it holds: counts, and for the oldest ready task the
    heads of its lines (``WarmTier.ready_heads``), never its leases."""
    if not pairs:
        return []
    now = ctx.now()
    pg = {(r.queue, r.tenant): r for r in ctx.store.pair_state_counts(pairs)}
    warm = {pair: ctx.warm.stats(*pair) for pair in pairs}
    # (the warm ready tasks that may be the oldest: the heads of the lines, never leases)
    heads = ctx.warm.ready_heads([pair for pair in pairs if warm[pair][0]])
    oldest = {(r.queue, r.tenant): r.oldest
              for r in ctx.store.pair_oldest_ready(pairs, heads)}
    out = []
    for pair in pairs:
        ready, leased, mode = warm[pair]
        counts = pg.get(pair)
        oldest_at = oldest.get(pair)
        head_at = counts.oldest_head if counts else None
        out.append(queue_views.TenantCounts(
            queue=pair[0], tenant=pair[1], warm=ready, cold=counts.cold if counts else 0,
            waiting=counts.waiting if counts else 0, held=counts.held if counts else 0,
            delayed=counts.delayed if counts else 0, leased=leased,
            dead=counts.dead if counts else 0,
            mode="warm" if mode == "warm" else "cold",
            oldest_ready_at=oldest_at,
            oldest_ready_age_seconds=None if oldest_at is None
            else max(0.0, now - oldest_at.timestamp()),
            groups=counts.groups if counts else 0,
            oldest_group_head_at=head_at,
            oldest_group_head_age_seconds=None if head_at is None
            else max(0.0, now - head_at.timestamp()),
        ))
    return out


def iter_counts(ctx: Context, after: Pair = ("", ""), *, tenant: str | None = None,
                queue: str | None = None, chunk: int = 100) -> Iterator[TenantCounts]:
    """Counts of every pair after ``after`` (of one tenant and/or queue if given), computed
    ``chunk`` pairs at a time as they are consumed."""
    while True:
        pairs = pairs_after(ctx, after, limit=chunk, tenant=tenant, queue=queue)
        yield from pair_counts(ctx, pairs)
        if len(pairs) < chunk:
            return
        after = pairs[-1]


def tenant_counts(ctx: Context, queue: str, tenant: str | None = None) -> list[TenantCounts]:
    """Live counts per tenant of one queue (only ``tenant``'s if given)."""
    return list(iter_counts(ctx, tenant=tenant, queue=queue, chunk=PAIR_CHUNK))


# A queue's view names at most this many of its tenants (the detailed metrics page them all).
TENANTS_SHOWN = 100


def queue_view(ctx: Context, queue: str) -> QueueView:
    """A queue's settings, counts and mode as an admin sees it (a caller pinned to a tenant
    gets :func:`tenant_queue_view`, never this). Only the first ``TENANTS_SHOWN`` tenants
    are named, since a queue's tenants are unbounded and the view must fit one response;
    the totals of the whole queue are aggregates in SQL, plus the warm tier's counters of
    the tenants with ready work only (found by skip scans, one index descent each; their
    counters in one pipeline): idle tenants, backlogs and leases cost nothing."""
    totals = ctx.store.queue_view_state_totals(queue)
    counts = queue_views.QueueCounts(waiting=totals.waiting, held=totals.held,
                                     cold=totals.cold, delayed=totals.delayed,
                                     dead=totals.dead)
    cold_mode = False
    rows = ctx.store.queue_view_ready_tenants(queue)
    busy = [row.tenant for row in rows]  # tenants with ready or leased work
    for row, (ready, leased, mode) in zip(rows, ctx.warm.stats_of(queue, busy), strict=True):
        counts.warm += ready
        counts.leased += leased
        cold_mode = cold_mode or (mode != "warm" and (row.cold or ready > 0))
    shown = [t for _, t in pairs_after(ctx, limit=TENANTS_SHOWN, queue=queue)]
    total = ctx.store.queue_view_tenant_count(queue)
    settings = ctx.queue_settings.get(queue)
    return queue_views.QueueView(
        queue=queue, settings=settings, counts=counts, mode="cold" if cold_mode else "warm",
        tenants=shown, tenants_total=total, tenants_truncated=total > len(shown),
        limits_use=limits_use(ctx, queue, settings, busy[:TENANTS_SHOWN]))


def _own_counts(ctx: Context, queue: str, tenant: str) -> tuple[QueueCounts, bool, bool]:
    """One tenant's counts in a queue (its own pair alone), whether its ready work waits
    cold, and whether the pair is registered (when not: zero counts)."""
    counts = queue_views.QueueCounts()
    registered = False
    cold_mode = False
    for t in iter_counts(ctx, tenant=tenant, queue=queue, chunk=PAIR_CHUNK):
        counts.warm += t.warm
        counts.cold += t.cold
        counts.waiting += t.waiting
        counts.held += t.held
        counts.delayed += t.delayed
        counts.leased += t.leased
        counts.dead += t.dead
        cold_mode = cold_mode or (t.mode == "cold" and bool(t.cold or t.warm))
        registered = True
    return counts, cold_mode, registered


def tenant_queue_view(ctx: Context, queue: str, tenant: str) -> TenantQueueView:
    """A queue as a caller pinned to ``tenant`` sees it: its own counts (zero when it has no
    tasks there) and the settings its workers read, which depend on its own pair alone:

    =====================================  ==============================================
    the pair (queue, ``tenant``)           the settings shown
    =====================================  ==============================================
    registered (the tenant has had tasks   the queue's (the defaults where it has none)
    there lately)
    not registered                         the deployment's defaults, whatever the queue's
    =====================================  ==============================================

    It reads nothing of other tenants, nor the queue's settings for a tenant that has no
    part in it, so a queue an admin configured and other tenants use answers exactly as a
    name nobody used. A worker of a pair not registered yet reads the queue's settings again
    once it gets tasks (the pair is registered by then: tierq.client.worker)."""
    counts, cold_mode, registered = _own_counts(ctx, queue, tenant)
    settings = ctx.queue_settings.get(queue) if registered \
        else ctx.queue_settings.effective(None)
    return queue_views.TenantQueueView(queue=queue, tenant=tenant,
                                       settings=queue_views.WorkerSettings.of(settings),
                                       counts=counts, mode="cold" if cold_mode else "warm")


def _rate_of(limit: RateLimit | None) -> tuple[float, int] | None:
    return None if limit is None else (limit.per_second, limit.burst)


def limits_use(ctx: Context, queue: str, settings: QueueSettings,
               tenants: Sequence[str]) -> LimitsUse | None:
    """How much of each of the queue's limits is in use now (None without limits): the
    queue-wide ones from the queue's own keys, the per-tenant ones over ``tenants`` (the
    busiest tenant's leases, the emptiest bucket; the view passes at most TENANTS_SHOWN
    tenants with work, one call each)."""
    queue_wide = settings.max_leased is not None or settings.rate is not None
    per_tenant = settings.tenant_max_leased is not None or settings.tenant_rate is not None
    if not queue_wide and not per_tenant:
        return None
    now_ms = to_ms(ctx.now())
    use = queue_views.LimitsUse()
    if queue_wide:
        held, tokens = ctx.warm.capacity_use(queue, limits.LEASES_POOL, now_ms=now_ms,
                                             rate=_rate_of(settings.rate))
        use.leased = held if settings.max_leased is not None else None
        use.rate_tokens = tokens
    if per_tenant:
        leased: list[int] = []
        buckets: list[float] = []
        for tenant in tenants:
            held, tokens = ctx.warm.pair_limit_use(queue, tenant, now_ms=now_ms,
                                                   rate=_rate_of(settings.tenant_rate))
            leased.append(held)
            if tokens is not None:
                buckets.append(tokens)
        if settings.tenant_max_leased is not None:
            use.tenant_leased_max = max(leased, default=0)
        if settings.tenant_rate is not None:
            use.tenant_rate_tokens_min = min(buckets, default=float(settings.tenant_rate.burst))
    return use


def known_queues(ctx: Context) -> list[str]:
    return ctx.store.known_queues()


def queue_known(ctx: Context, queue: str, tenant: str | None = None) -> bool:
    """Whether a queue has settings or has had tasks (of ``tenant``, if given)."""
    return ctx.store.queue_known(queue, tenant)


def queue_names_after(ctx: Context, after: str = "", *, limit: int = PAIR_CHUNK,
                      tenant: str | None = None) -> list[str]:
    """Queue names after ``after`` in name order; with ``tenant``, only the queues that tenant
    has had tasks in (filtered in SQL)."""
    return ctx.store.queue_names_page(after, limit, tenant)


def iter_queue_names(ctx: Context, after: str = "", *, tenant: str | None = None,
                     chunk: int = 20) -> Iterator[str]:
    """The names :func:`queue_names_after` selects, ``chunk`` at a time as they are
    consumed."""
    while True:
        names = queue_names_after(ctx, after, limit=chunk, tenant=tenant)
        yield from names
        if len(names) < chunk:
            return
        after = names[-1]


def iter_queue_views(ctx: Context, after: str = "", *, chunk: int = 20) -> Iterator[QueueView]:
    """Admin views of every queue after ``after``, in name order, read as they are
    consumed."""
    return (queue_view(ctx, name) for name in iter_queue_names(ctx, after, chunk=chunk))


def iter_tenant_queue_views(ctx: Context, tenant: str, after: str = "", *,
                            chunk: int = 20) -> Iterator[TenantQueueView]:
    """Tenant views of the queues ``tenant`` has had tasks in, after ``after``, in name
    order, read as they are consumed."""
    return (tenant_queue_view(ctx, name, tenant)
            for name in iter_queue_names(ctx, after, tenant=tenant, chunk=chunk))


def detailed(ctx: Context) -> list[TenantCounts]:
    return list(iter_counts(ctx, chunk=PAIR_CHUNK))


def lease_key(lease: RunningLease) -> tuple[int, str]:
    """Order of the leases of one pair: started (ms), then id."""
    return round(lease.started_at.timestamp() * 1000), str(lease.id)


# Leases one read of a pair's running leases asks for (a page is read in windows of it).
LEASE_WINDOW = RUNNING_CALL_LEASES


def pair_leases(ctx: Context, pair: Pair, after: tuple[int, str] | None = None, *,
                window: int = LEASE_WINDOW) -> Iterator[RunningLease]:
    """The current leases of one pair after ``after`` (:func:`lease_key`: started ms, then
    id; ``(ms, "")``: after every lease that started at ms), oldest first, read ``window``
    at a time as they are consumed (``WarmTier.running_page``): a page costs what it
    holds, not what the pair holds."""
    from tierq.models.leases import RunningLease  # (the lease models: not every function's)

    queue, tenant = pair
    position = after
    while True:
        leases, position = ctx.warm.running_page(queue, tenant, after=position, limit=window)
        # (their groups: one read by primary key per window, since Valkey's lease entries
        # do not carry them)
        grps = {row.id: row.grp for row in ctx.store.groups_of_tasks(
            queue, [lease.id for lease in leases], [tenant] * len(leases))} if leases else {}
        # (and their progress: one HMGET of the pair's progress per window)
        progress = ctx.warm.progress_of(queue, tenant, [(lease.id, lease.token)
                                                        for lease in leases])
        now_ms = to_ms(ctx.now())
        for lease in leases:
            yield RunningLease(
                queue=queue, tenant=tenant, id=UUID(lease.id),
                worker=lease.worker, attempt=lease.attempt,
                started_at=from_ms(lease.started_ms),
                running_for_ms=max(0, now_ms - lease.started_ms),
                lease_expires_at=from_ms(lease.deadline_ms),
                group=grps.get(lease.id),
                **progress_fields(progress.get(lease.id)),
            )
        if position is None:
            return


def progress_fields(kept: tuple[int, str] | None) -> dict[str, Any]:
    """A running lease's ``progress`` and ``progress_at`` from what Valkey keeps (ms, JSON
    text); none without."""
    if kept is None:
        return {}
    return {"progress": orjson.loads(kept[1]), "progress_at": from_ms(kept[0])}


def running(ctx: Context, queue: str | None = None, tenant: str | None = None,
            ) -> list[RunningLease]:
    """Every current lease (of one queue and/or tenant if given), oldest first."""
    out = [lease for pair in iter_pairs(ctx, queue=queue, tenant=tenant, with_warm_rows=True)
           for lease in pair_leases(ctx, pair)]
    out.sort(key=lambda r: r.started_at)
    return out
