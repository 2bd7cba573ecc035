"""reaper: expired leases go to the back of their line with the attempt counted, or to the
dead letters at max_attempts; warm rows that Valkey lost (older than the grace period) are
re-pushed; done and dead rows past their queue's retention are purged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tierq.dal.postgres import run as run_query
from tierq.dal.warm_tier import lease_member
from tierq.logic import admission, leases
from tierq.logic.admission import Ticket
from tierq.logic.context import Context, to_datetime, to_ms
from tierq.logic.leases import Verified
from tierq.logic.queues import known_queues

EXPIRED_BATCH = 500
RECONCILE_BATCH = 5000
PURGE_BATCH = 5000


@dataclass
class ReaperSummary:
    expired: int = 0
    requeued: int = 0
    dead: int = 0
    restored: int = 0
    purged: int = 0
    dead_by_queue: dict[str, int] = field(default_factory=dict)  # lease expiries that died


def run(ctx: Context) -> ReaperSummary:
    summary = ReaperSummary()
    for queue, tenant in ctx.pairs.all():
        expire_leases(ctx, queue, tenant, summary)
        reconcile(ctx, queue, tenant, summary)
    for queue in known_queues(ctx):
        purge(ctx, queue, summary)
    return summary


def expire_leases(ctx: Context, queue: str, tenant: str, summary: ReaperSummary) -> None:
    while True:
        expired = ctx.warm.expired(queue, tenant, now_ms=to_ms(ctx.now()), limit=EXPIRED_BATCH)
        if not expired:
            return
        record_expired(ctx, queue, tenant, expired, summary)
        if len(expired) < EXPIRED_BATCH:
            return


def record_expired(ctx: Context, queue: str, tenant: str,
                   expired: Sequence[tuple[str, str, int]], summary: ReaperSummary) -> None:
    """Record the expired leases ``(id, token, attempt)`` as failed attempts, then drop
    them. Another pass may have listed the same leases: the outcome statement only takes an
    attempt not recorded yet, so only one pass counts and re-queues each expiry."""
    now = ctx.now()
    held = [Verified(tenant, task_id, token, attempt, i, lease_member(task_id, token))
            for i, (task_id, token, attempt) in enumerate(expired)]
    states = leases.record_outcomes(
        ctx, queue, held,
        errors=[f"lease expired (attempt {v.attempt})" for v in held],
        retry_ats=[now] * len(held),
        deads=[False] * len(held),
    )
    summary.expired += len(states)
    dead = sum(1 for s in states.values() if s == "dead")
    summary.dead += dead
    if dead:
        summary.dead_by_queue[queue] = summary.dead_by_queue.get(queue, 0) + dead
    summary.requeued += sum(1 for s in states.values() if s == "delayed")


def reconcile(ctx: Context, queue: str, tenant: str, summary: ReaperSummary) -> None:
    """Re-push warm rows that neither the ready set nor the lease set knows. The rows are
    locked while checked and pushed, so an ack deleting one at that moment cannot race."""
    before = to_datetime(ctx.now() - ctx.settings.reconcile_grace_seconds)
    suspects = [str(r["id"]) for r in ctx.db.fetch("warm_suspects", {
        "queue": queue, "tenant": tenant, "before": before, "limit": RECONCILE_BATCH,
    })]
    lost = ctx.warm.missing(queue, tenant, suspects)
    if not lost:
        return
    ticket = Ticket(token=f"restore-{queue}-{tenant}-{to_ms(ctx.now())}")
    try:
        with ctx.db.transaction() as conn:
            rows = run_query(conn, "lock_warm_for_restore", {"ids": lost})
            still_lost = set(ctx.warm.missing(queue, tenant, [str(r["id"]) for r in rows]))
            items = [admission.row_push_item(r) for r in rows if str(r["id"]) in still_lost]
            refused = admission.push(ctx, ticket, (queue, tenant), items, kind="restore")
            admission.mark_cold(ctx, refused, conn)
    finally:
        admission.close(ctx, ticket)
    summary.restored += len(items)


def purge(ctx: Context, queue: str, summary: ReaperSummary) -> None:
    retention = ctx.queue_settings.get(queue).retention_seconds
    before = to_datetime(ctx.now() - retention)
    while True:
        deleted = ctx.db.execute("purge_finished",
                                 {"queue": queue, "before": before, "limit": PURGE_BATCH})
        summary.purged += max(0, deleted)
        if deleted < PURGE_BATCH:
            return
