"""The scheduled maintenance functions, one per job of ``tierq.maintenance.registry``: what
one tick of each does, and the Lambda entry point they share (``handle``). A tick is one
pass of the job (``Tierq.run_job``); the reaper's also emits the per-queue metrics."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any
from weakref import WeakKeyDictionary

from aws_lambda_powertools.utilities.typing import LambdaContext

from tierq.aws import metrics
from tierq.aws.runtime import engine, logger, tracer
from tierq.aws.scheduled import RemainingTime, run_ticks
from tierq.dal.postgres import scoped_timeouts
from tierq.engine import Tierq
from tierq.maintenance import gauges, registry
from tierq.maintenance.reaper import ReaperConfig


class JobTick:
    """One pass of a job; what failed in it (pairs, schedules) is logged as a warning."""

    def __init__(self, job: str) -> None:
        self.job = job

    def __call__(self) -> Any:
        summary = engine().run_job(self.job)
        failed = getattr(summary, "failed", None)
        if failed:
            logger.warning(f"{self.job}: some items failed", extra={"failed": failed})
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

    def __init__(self, gauges_every: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 gauge_round: gauges.GaugeRound | None = None) -> None:
        self.gauges_every = gauges_every  # None: the reaper's gauges_every_seconds
        self.clock = clock
        self.gauge_round = gauge_round

    def __call__(self) -> dict[str, Any]:
        tq = engine()
        config = tq.job_config("reaper")
        assert isinstance(config, ReaperConfig)
        started = time.monotonic()
        summary = tq.run_reaper()
        for queue, dead in summary.dead_by_queue.items():
            metrics.count(queue, {"DeadLettered": dead})
        out: dict[str, Any] = {
            "expired": summary.expired, "requeued": summary.requeued, "dead": summary.dead,
            "restored": summary.restored, "purged": summary.purged, "gauged_queues": 0,
            "zeroed_queues": 0, "pairs": summary.pairs, "forgotten": len(summary.forgotten),
            # "queue|tenant" whose Valkey master failed or whose statement timed out
            "failed_pairs": summary.failed,
        }
        state = self.gauge_round if self.gauge_round is not None else gauge_round_of(tq)
        now = self.clock()
        every = self.gauges_every if self.gauges_every is not None \
            else config.gauges_every_seconds
        if state.due(now, every):
            # what the reaper's pass left of the tick's budget (a round cut short goes on
            # at the next tick; at least one slice is counted each time)
            left = config.budget_seconds - (time.monotonic() - started)
            # under the reaper's timeouts too (its pass's scope ended with run_reaper)
            with scoped_timeouts(config.statement_timeout_ms, config.lock_timeout_ms):
                gauged = gauges.run(tq.ctx, state, metrics.queue_gauge, now=now,
                                    budget_seconds=max(0.0, left))
            out["gauged_queues"], out["zeroed_queues"] = gauged.gauged, gauged.zeroed
        return out


# Jobs whose tick does more than a pass (AWS metrics); every other job's is a JobTick.
METRIC_TICKS: dict[str, Callable[[], Callable[[], Any]]] = {"reaper": ReaperTick}


def tick_of(job: str) -> Callable[[], Any]:
    """A new tick of ``job`` (a KeyError naming the known jobs for another name)."""
    registry.job(job)
    make = METRIC_TICKS.get(job)
    return make() if make is not None else JobTick(job)


def handle(job: str, event: Mapping[str, Any] | None,
           context: RemainingTime | None) -> dict[str, Any]:
    """One scheduled invocation of ``job``: ticks until it is time to return (the
    dispatcher: passes until it is idle or its time is over, tierq.aws.scheduled.dispatcher)."""
    if job == "dispatcher":
        from tierq.aws.scheduled import dispatcher

        return dispatcher.run(event, context)
    tick = tick_of(job)
    every = registry.job(job).every(engine().settings)
    report = run_ticks(job, tick, every=every, event=event, context=context)
    return report.as_dict()


def scheduled_handler(job: str) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The Lambda handler of a scheduled function (``functions/<job>/app.py``)."""
    registry.job(job)  # (a KeyError naming the known jobs at import, not at the first tick)

    @logger.inject_lambda_context
    @tracer.capture_lambda_handler
    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        return handle(job, event, context)

    return lambda_handler
