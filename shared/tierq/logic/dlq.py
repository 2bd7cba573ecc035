"""Dead letters: list, replay (back of the line with fresh attempts), purge."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from tierq.dal.postgres import run
from tierq.logic import admission
from tierq.logic.admission import Target
from tierq.logic.context import Context, to_datetime
from tierq.logic.tasks import view
from tierq.models.tasks import TaskView

REPLAY_BATCH = 1000


def list_dead(ctx: Context, queue: str, *, tenant: str | None = None, limit: int = 100,
              after: tuple[datetime, UUID] | None = None) -> list[TaskView]:
    rows = ctx.db.fetch("dlq_page", {
        "queue": queue, "tenant": tenant, "limit": limit,
        "after": after[0] if after else None, "after_id": after[1] if after else None,
    })
    return [view(r) for r in rows]


def replay(ctx: Context, queue: str, *, ids: Sequence[UUID] = (), all_dead: bool = False,
           ) -> tuple[list[UUID], list[UUID]]:
    """Make dead tasks ready again with attempts reset. Returns (replayed, skipped): a task
    is skipped when it is not dead (anymore) or a live task holds its key."""
    wanted = [str(i) for i in ids]
    replayed: list[UUID] = []
    while True:
        pending = None
        try:
            with ctx.db.transaction() as conn:
                locked = run(conn, "lock_dead", {
                    "queue": queue, "all": all_dead, "ids": wanted, "limit": REPLAY_BATCH,
                })
                if not locked:
                    break
                targets = [Target(str(r["id"]), queue, r["tenant"]) for r in locked]
                run(conn, "reset_dead", {"ids": [t.id for t in targets],
                                         "now": to_datetime(ctx.now())})
                pending = admission.make_ready(ctx, conn, targets)
        except BaseException:
            admission.abandon(ctx, pending)
            raise
        admission.finish(ctx, pending)
        replayed.extend(UUID(str(r["id"])) for r in pending.rows)
        if not all_dead or len(locked) < REPLAY_BATCH:
            break
    done = {str(i) for i in replayed}
    skipped = [UUID(i) for i in wanted if i not in done]
    return replayed, skipped


def purge(ctx: Context, queue: str, *, ids: Sequence[UUID] = (),
          all_dead: bool = False) -> list[UUID]:
    rows = ctx.db.fetch("purge_dead", {"queue": queue, "all": all_dead,
                                       "ids": [str(i) for i in ids]})
    return [UUID(str(r["id"])) for r in rows]
