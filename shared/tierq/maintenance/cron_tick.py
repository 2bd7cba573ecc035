"""cron_tick: keep every schedule's next occurrences installed as keyed delayed tasks, and
withdraw the pending occurrences of outdated, disabled or removed schedules (the rules are
in :mod:`tierq.logic.schedules`; a schedule is (tenant, name)). One transaction per schedule;
a schedule another tick (or a PUT) is installing right now is left to that one, and two
ticks at once never install an occurrence twice. Only schedules with work to do are visited
(an occurrence became due, the installed ones end within the lookahead, or occurrences of
another config remain), so an idle schedule costs no write per tick."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from tierq.errors import Unavailable
from tierq.logic import schedules
from tierq.logic.context import Context, to_ms
from tierq.models.names import DEFAULT_TENANT

logger = logging.getLogger(__name__)


@dataclass
class CronTickSummary:
    schedules: int = 0  # schedules with work to do (see the schedules_to_tick query)
    installed: int = 0  # occurrences inserted
    withdrawn: int = 0  # pending occurrences of outdated, disabled or removed schedules
    busy: int = 0  # schedules another tick or a PUT held at that moment
    failed: list[str] = field(default_factory=list)  # schedules whose install raised


def run(ctx: Context) -> CronTickSummary:
    summary = CronTickSummary()
    due = ctx.db.fetch("schedules_to_tick", {"now_ms": to_ms(ctx.now()),
                                             "lookahead_ms": schedules.lookahead_ms(ctx)})
    for row in due:
        tenant, name = row["tenant"], row["name"]
        summary.schedules += 1
        try:
            result = schedules.tick_schedule(ctx, tenant, name)
        except Unavailable:
            raise  # a store is down: every schedule would fail; let the caller retry
        except Exception:
            # one broken schedule must not stop the others; it is retried next tick
            logger.exception("cron tick failed for schedule %r of tenant %r", name, tenant)
            summary.failed.append(name if tenant == DEFAULT_TENANT else f"{tenant}/{name}")
            continue
        if result is None:
            summary.busy += 1
            continue
        summary.installed += result.installed
        summary.withdrawn += result.withdrawn
    return summary
