"""delayed_mover: delayed tasks whose run_at has come become ready (warm or cold) at the back
of their line. Bounded batches selected with FOR UPDATE SKIP LOCKED from the due index, so
the cost is proportional to what is due, not to the delayed backlog (codeQ)."""

from __future__ import annotations

from dataclasses import dataclass

from tierq.dal.postgres import run as run_query
from tierq.logic import admission
from tierq.logic.admission import Target
from tierq.logic.context import Context, to_datetime

BATCH = 1000
MAX_BATCHES = 50


@dataclass
class DelayedMoverSummary:
    moved: int = 0
    warm: int = 0
    cold: int = 0
    batches: int = 0


def run(ctx: Context, *, batch: int = BATCH, max_batches: int = MAX_BATCHES) -> DelayedMoverSummary:
    summary = DelayedMoverSummary()
    for _ in range(max_batches):
        pending = None
        try:
            with ctx.db.transaction() as conn:
                due = run_query(conn, "lock_due", {"now": to_datetime(ctx.now()), "limit": batch})
                if not due:
                    break
                targets = [Target(str(r["id"]), r["queue"], r["tenant"]) for r in due]
                pending = admission.make_ready(ctx, conn, targets)
        except BaseException:
            admission.abandon(ctx, pending)
            raise
        refused = admission.finish(ctx, pending)
        summary.batches += 1
        summary.moved += len(pending.rows)
        warm = sum(1 for r in pending.rows if r["state"] == "warm") - len(refused)
        summary.warm += warm
        summary.cold += len(pending.rows) - warm
        if len(due) < batch:
            break
    return summary
