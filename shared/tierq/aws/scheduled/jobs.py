"""The scheduled maintenance functions: what one tick of each does, and the Lambda entry
point they share (``handle``). The ``cron_tick`` function uses ``run_ticks`` the same way."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any
from weakref import WeakKeyDictionary

from aws_lambda_powertools.utilities.typing import LambdaContext

from tierq.aws import metrics
from tierq.aws.runtime import engine, logger, tracer
from tierq.aws.scheduled import RemainingTime, run_ticks
from tierq.engine import Tierq
from tierq.maintenance import gauges

GAUGES_EVERY_SECONDS = 60.0


def cold_to_warm_tick() -> Any:
    return engine().run_cold_to_warm()


def delayed_mover_tick() -> Any:
    return engine().run_delayed_mover()


def cron_tick() -> Any:
    summary = engine().run_cron_tick()
    if summary.failed:
        logger.warning("cron tick: some schedules failed", extra={"failed": summary.failed})
    return summary


_GAUGE_ROUNDS: WeakKeyDictionary[Tierq, gauges.GaugeRound] = WeakKeyDictionary()


def gauge_round_of(tq: Tierq) -> gauges.GaugeRound:
    """The gauge round of this process's engine: it outlives one invocation (a warm Lambda
    keeps its engine), so a round cut by its budget goes on and an emptied queue gets its
    zeros in the next invocation too."""
    state = _GAUGE_ROUNDS.get(tq)
    if state is None:
        state = _GAUGE_ROUNDS.setdefault(tq, gauges.GaugeRound())
    return state


class ReaperTick:
    """Expire leases, reconcile, purge; count dead letters per queue; and, about once a
    minute, emit the per-queue gauges the alarms and the dashboard read: for the queues with
    tasks only, plus zeros once for a queue that emptied since (tierq.maintenance.gauges)."""

    def __init__(self, gauges_every: float = GAUGES_EVERY_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 gauge_round: gauges.GaugeRound | None = None) -> None:
        self.gauges_every = gauges_every
        self.clock = clock
        self.gauge_round = gauge_round

    def __call__(self) -> dict[str, Any]:
        tq = engine()
        started = time.monotonic()
        summary = tq.run_reaper()
        for queue, dead in summary.dead_by_queue.items():
            metrics.count(queue, {"DeadLettered": dead})
        out: dict[str, Any] = {
            "expired": summary.expired, "requeued": summary.requeued, "dead": summary.dead,
            "restored": summary.restored, "purged": summary.purged, "gauged_queues": 0,
            "zeroed_queues": 0, "pairs": summary.pairs, "forgotten": len(summary.forgotten),
            "failed_pairs": summary.failed,  # "queue|tenant" whose Valkey master failed
        }
        state = self.gauge_round if self.gauge_round is not None else gauge_round_of(tq)
        now = self.clock()
        if state.due(now, self.gauges_every):
            # what the reaper's pass left of the tick's budget (a round cut short goes on
            # at the next tick; at least one slice is counted each time)
            left = tq.settings.maintenance_budget_seconds - (time.monotonic() - started)
            gauged = gauges.run(tq.ctx, state, metrics.queue_gauge, now=now,
                                budget_seconds=max(0.0, left))
            out["gauged_queues"], out["zeroed_queues"] = gauged.gauged, gauged.zeroed
        return out


def _every(job: str) -> float:
    settings = engine().settings
    return {
        "cold_to_warm": settings.cold_to_warm_every,
        "delayed_mover": settings.delayed_every,
        "reaper": settings.reaper_every,
        "cron_tick": settings.cron_every,
    }[job]


TICKS: dict[str, Callable[[], Callable[[], Any]]] = {
    "cold_to_warm": lambda: cold_to_warm_tick,
    "delayed_mover": lambda: delayed_mover_tick,
    "reaper": ReaperTick,
    "cron_tick": lambda: cron_tick,
}


def handle(job: str, event: Mapping[str, Any] | None,
           context: RemainingTime | None) -> dict[str, Any]:
    """One scheduled invocation of ``job``: ticks until it is time to return."""
    if job not in TICKS:
        raise KeyError(f"unknown scheduled job {job!r}; known: {sorted(TICKS)}")
    report = run_ticks(job, TICKS[job](), every=_every(job), event=event, context=context)
    return report.as_dict()


def scheduled_handler(job: str) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The Lambda handler of a scheduled function (``functions/<job>/app.py``)."""
    if job not in TICKS:
        raise KeyError(f"unknown scheduled job {job!r}; known: {sorted(TICKS)}")

    @logger.inject_lambda_context
    @tracer.capture_lambda_handler
    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        return handle(job, event, context)

    return lambda_handler
