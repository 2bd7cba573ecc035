"""cold_to_warm: promote the oldest cold tasks while the warm set has headroom (< 90% of
warm_max), and return a queue to warm mode once its cold line has drained and the warm set
is at or below 80%.

Only pairs with cold rows, or that a pass left in cold mode (recorded in the registry until
a visit finds them warm again), are visited: idle pairs cost nothing. The walk goes in
slices in (queue, tenant) order and stops once the pass's time budget is spent; the next
pass goes on after the last pair visited (``tierq.logic.pairs.walk``). A pair whose Valkey
master does not answer is logged, listed in ``failed`` and passed over
(``tierq.maintenance.pair_failures``), as is one whose statement PostgreSQL cancels at the
pass's timeout, whose keys a script refuses, or whose queue's stored settings the settings
model refuses. One pair's or queue's failure is never waited for past the lock timeout nor
raised out of the pass: the walk saves its cursor only after a slice, so a failure raised
there would end every pass at that same slice.

=========================================  ==============================================
one pair or queue                          the pass
=========================================  ==============================================
its registry row held by another           its cold-mode record is passed over, not
transaction                                waited for (``mark_cold_mode_unless_held``),
                                           listed in ``failed``; its next visit writes it
its queue's ready-tenant index refuses     the queue is logged as an error, listed in
the backstop's entry (a key of the         ``ready_index_failed``; the other queues are
wrong type)                                entered (a reply for the whole server ends
                                           the pass)
its queue's stored settings refused        each pair of the queue is listed in ``failed``
=========================================  ==============================================
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from pydantic import ValidationError

from tierq.errors import DatabaseTimedOut, WarmTierUnavailable
from tierq.logic import pairs, tiering
from tierq.logic.context import Context, to_datetime
from tierq.maintenance.pair_failures import PairFailures, note_ready_tenants
from tierq.maintenance.registry import MaintenanceJob, SlicedWalkConfig

log = logging.getLogger(__name__)

WALK = "cold_to_warm"


@dataclass
class ColdToWarmSummary:
    pairs: int = 0  # pairs visited
    promoted: int = 0
    returned_to_warm: list[str] = field(default_factory=list)
    busy: int = 0
    slices: int = 0
    completed: bool = False  # the pass got round every pair with work
    # "queue|tenant" whose Valkey failed, whose statement timed out, whose keys a script
    # refused, whose queue's stored settings are refused, or whose registry row another
    # transaction held when its cold-mode record changed (tried next pass)
    failed: list[str] = field(default_factory=list)
    # queues whose ready-tenant index Valkey refused an entry (a key in a state no script
    # expects: logged as an error; its pairs are entered again next pass)
    ready_index_failed: list[str] = field(default_factory=list)


class ColdToWarmConfig(SlicedWalkConfig):
    """``TIERQ_COLD_TO_WARM_<FIELD>``: the pass's budget, timeouts and slice (the
    promotions' own lock timeout is ``tiering.PROMOTE_LOCK_TIMEOUT``)."""


def run(ctx: Context, config: ColdToWarmConfig | None = None,
        **overrides: Any) -> ColdToWarmSummary:
    """One pass under its config's timeouts (``JOB.run``)."""
    return JOB.run(ctx, config, **overrides)


def run_pass(ctx: Context, config: ColdToWarmConfig) -> ColdToWarmSummary:
    summary = ColdToWarmSummary()
    budget = pairs.Budget(config.budget_seconds)
    limit = config.slice_size
    stats = pairs.WalkStats()
    failures = PairFailures("cold_to_warm", ctx, summary.failed)

    def fetch(after: pairs.Pair) -> Sequence[tuple[str, str, bool]]:
        return ctx.store.walk_cold_to_warm_pairs(after, limit)

    cursors = pairs.load_cursors(ctx.store)
    for chunk in pairs.walk(ctx.store, WALK, fetch, lambda item: (item[0], item[1]), budget,
                            stats, cursors, limit):
        changed: list[tuple[str, str, bool]] = []
        ready: list[tuple[str, str]] = []  # pairs with cold or promoted work
        for queue, tenant, marked in chunk:
            result = _refill(ctx, failures, queue, tenant, budget)
            stats.items.append((queue, tenant))  # visited, even when its master failed
            if result is not None and (result.promoted or result.cold_mode):
                ready.append((queue, tenant))
            if result is not None:
                summary.promoted += result.promoted
                summary.busy += int(result.skipped_busy)
                if result.returned_to_warm:
                    summary.returned_to_warm.append(f"{queue}|{tenant}")
                if result.cold_mode != marked:
                    changed.append((queue, tenant, result.cold_mode))
            if budget.spent:
                break
        note_ready(ctx, ready, summary.ready_index_failed)
        if changed:
            mark_cold_mode(ctx, changed, failures)
    summary.pairs, summary.slices, summary.completed = stats.visited, stats.slices, \
        stats.completed
    return summary


JOB = MaintenanceJob(
    name="cold_to_warm", run_pass=run_pass, config=ColdToWarmConfig,
    schedule_setting="cold_to_warm_every", summary=ColdToWarmSummary,
    description="promote cold tasks while the warm tier has room, pair by pair")


def _refill(ctx: Context, failures: PairFailures, queue: str, tenant: str,
            budget: pairs.Budget) -> tiering.RefillResult | None:
    """One pair's refill; None when its master failed (in this call or earlier in the pass),
    PostgreSQL cancelled one of its statements at the pass's timeout, or Valkey refused one
    of its scripts."""
    if failures.skip((queue, tenant)):
        return None
    try:
        return tiering.refill(ctx, queue, tenant, until=lambda: budget.spent)
    except DatabaseTimedOut as exc:  # a row held or a slow statement: the others go on
        failures.timed_out((queue, tenant), exc)
        return None
    except WarmTierUnavailable as exc:  # its master is down: the others go on
        failures.record((queue, tenant), exc)
        return None
    except redis.ResponseError as exc:  # its keys in a state no script expects
        failures.broken((queue, tenant), exc)
        return None
    except ValidationError as exc:  # its queue's stored settings refused
        failures.refused_settings((queue, tenant), exc)
        return None


def note_ready(ctx: Context, ready: Sequence[pairs.Pair], failed: list[str]) -> None:
    """Enter the pairs with cold or promoted work in their queues' ready-tenant indexes
    (logic/ready_tenants.py: the index's backstop), one call per queue. A queue whose index
    Valkey refuses (a key of the wrong type) is logged and listed in ``failed``; the other
    queues and the pass go on (a reply for the whole server ends the pass)."""
    by_queue: dict[str, list[str]] = {}
    for queue, tenant in ready:
        by_queue.setdefault(queue, []).append(tenant)
    for queue, tenants in by_queue.items():
        note_ready_tenants(ctx, "cold_to_warm", queue, tenants, failed)


def mark_cold_mode(ctx: Context, changed: Sequence[tuple[str, str, bool]],
                   failures: PairFailures) -> None:
    """Record which pairs the slice left in cold mode or found warm again. A pair whose
    registry row another transaction holds is passed over, not waited for, and listed as
    failed: its next visit records it (one with cold rows is visited again; one whose cold
    line this pass drained returns to warm mode at a claim's refill once its warm set
    empties, or is visited again at its next cold row)."""
    held = ctx.store.mark_cold_mode_unless_held([(c[0], c[1]) for c in changed],
                                                [c[2] for c in changed],
                                                to_datetime(ctx.now()))
    for queue, tenant in held:
        failures.held((queue, tenant))
