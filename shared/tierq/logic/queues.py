"""Queues: settings, pause/resume, live counts per (queue, tenant), running leases."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tierq.logic.context import Context, from_ms, to_ms
from tierq.models.leases import RunningLease
from tierq.models.queues import (
    QueueCounts,
    QueueSettings,
    QueueSettingsUpdate,
    QueueView,
    TenantCounts,
)


def put_settings(ctx: Context, queue: str, update: QueueSettingsUpdate) -> QueueSettings:
    backoff = update.backoff
    ctx.db.fetch("upsert_queue_settings", {
        "queue": queue,
        "warm_max": update.warm_max,
        "lease_seconds": update.lease_seconds,
        "max_attempts": update.max_attempts,
        "backoff_kind": backoff.kind if backoff else None,
        "backoff_base_seconds": backoff.base_seconds if backoff else None,
        "backoff_cap_seconds": backoff.cap_seconds if backoff else None,
        "backoff_jitter": backoff.jitter if backoff else None,
        "retention_seconds": update.retention_seconds,
        "paused": update.paused,
    })
    ctx.queue_settings.invalidate(queue)
    return ctx.queue_settings.get(queue)


def purge_tasks(ctx: Context, queue: str) -> int:
    """Delete every task of a queue (all states) and its warm tier. Workers holding leases get
    ``not_owner`` on ack. Returns how many tasks were deleted."""
    deleted = ctx.db.execute("purge_queue_tasks", {"queue": queue})
    for tenant in ctx.pairs.tenants(queue):
        ctx.warm.drop_pair(queue, tenant)
        ctx.modes.pop((queue, tenant), None)
    return deleted


def tenant_counts(ctx: Context, queue: str) -> list[TenantCounts]:
    """Live counts per tenant of one queue: warm and leased from Valkey, the rest from
    Postgres, and the oldest ready task's age (leased tasks excluded)."""
    now = ctx.now()
    tenants = set(ctx.pairs.tenants(queue))
    pg: dict[str, dict[str, int]] = defaultdict(dict)
    for r in ctx.db.fetch("state_counts", {"queue": queue}):
        pg[r["tenant"]][r["state"]] = r["n"]
        tenants.add(r["tenant"])
    warm: dict[str, tuple[int, int, str]] = {}
    leased_ids: list[str] = []
    for tenant in tenants:
        warm[tenant] = ctx.warm.stats(queue, tenant)
        if warm[tenant][1]:
            leased_ids.extend(lease.id for lease in ctx.warm.leases(queue, tenant))
    oldest: dict[str, Any] = {
        r["tenant"]: r["oldest"]
        for r in ctx.db.fetch("oldest_ready", {"queue": queue, "leased": leased_ids})
    }
    out = []
    for tenant in sorted(tenants):
        ready, leased, mode = warm[tenant]
        counts = pg.get(tenant, {})
        oldest_at = oldest.get(tenant)
        out.append(TenantCounts(
            queue=queue, tenant=tenant, warm=ready, cold=counts.get("cold", 0),
            delayed=counts.get("delayed", 0), leased=leased, dead=counts.get("dead", 0),
            mode="warm" if mode == "warm" else "cold",
            oldest_ready_at=oldest_at,
            oldest_ready_age_seconds=None if oldest_at is None
            else max(0.0, now - oldest_at.timestamp()),
        ))
    return out


def queue_view(ctx: Context, queue: str, tenant: str | None = None) -> QueueView:
    """A queue's settings, counts and mode; with ``tenant``, as that tenant sees it (its own
    counts only)."""
    per_tenant = [t for t in tenant_counts(ctx, queue) if tenant is None or t.tenant == tenant]
    counts = QueueCounts()
    for t in per_tenant:
        counts.warm += t.warm
        counts.cold += t.cold
        counts.delayed += t.delayed
        counts.leased += t.leased
        counts.dead += t.dead
    cold_mode = any(t.mode == "cold" and (t.cold or t.warm) for t in per_tenant)
    return QueueView(queue=queue, settings=ctx.queue_settings.get(queue), counts=counts,
                     mode="cold" if cold_mode else "warm",
                     tenants=[t.tenant for t in per_tenant])


def known_queues(ctx: Context) -> list[str]:
    return [r["queue"] for r in ctx.db.fetch("known_queues")]


def detailed(ctx: Context) -> list[TenantCounts]:
    out: list[TenantCounts] = []
    for queue in known_queues(ctx):
        out.extend(tenant_counts(ctx, queue))
    return out


def running(ctx: Context, queue: str | None = None) -> list[RunningLease]:
    now_ms = to_ms(ctx.now())
    pairs = ctx.pairs.all()
    out = []
    for q, tenant in pairs:
        if queue is not None and q != queue:
            continue
        for lease in ctx.warm.leases(q, tenant):
            out.append(RunningLease(
                queue=q, tenant=tenant, id=lease.id,  # type: ignore[arg-type]
                worker=lease.worker, attempt=lease.attempt,
                started_at=from_ms(lease.started_ms),
                running_for_ms=max(0, now_ms - lease.started_ms),
                lease_expires_at=from_ms(lease.deadline_ms),
            ))
    out.sort(key=lambda r: r.started_at)
    return out
