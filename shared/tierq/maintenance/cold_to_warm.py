"""cold_to_warm: promote the oldest cold tasks while the warm set has headroom (< 90% of
warm_max), and return a queue to warm mode once its cold line has drained and the warm set
is at or below 80% (DESIGN §3)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tierq.logic import tiering
from tierq.logic.context import Context


@dataclass
class ColdToWarmSummary:
    pairs: int = 0
    promoted: int = 0
    returned_to_warm: list[str] = field(default_factory=list)
    busy: int = 0


def run(ctx: Context) -> ColdToWarmSummary:
    summary = ColdToWarmSummary()
    for queue, tenant in ctx.pairs.all():
        summary.pairs += 1
        result = tiering.refill(ctx, queue, tenant)
        summary.promoted += result.promoted
        summary.busy += int(result.skipped_busy)
        if result.returned_to_warm:
            summary.returned_to_warm.append(f"{queue}|{tenant}")
    return summary
