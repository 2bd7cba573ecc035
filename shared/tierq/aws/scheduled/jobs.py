"""The scheduled maintenance functions, one per job of ``tierq.maintenance.registry``: what
one tick of each does, and the Lambda entry point they share (``handle``). A tick is one
pass of the job (``Tierq.run_job``); the reaper's also emits the per-queue metrics.

With several shards (``TIERQ_SHARD_URLS``) a tick runs the pass on every shard at once, each
under its own budget (tierq.aws.scheduled.shards): a shard that does not answer is named in
the tick's output (``shards_down``) and the others go on; the shards' summaries are summed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from aws_lambda_powertools.utilities.typing import LambdaContext

from tierq.aws import metrics
from tierq.aws.runtime import engine, logger, tracer
from tierq.aws.scheduled import RemainingTime, run_ticks
from tierq.aws.scheduled.shards import (
    answered,
    merge_summaries,
    on_every_shard,
    shards_down,
)
from tierq.contract import Deployment
from tierq.core.lazy import lazy_module
from tierq.dal.postgres import scoped_timeouts
from tierq.engine import Tierq
from tierq.logic.context import Context
from tierq.maintenance import registry

if TYPE_CHECKING:
    from tierq.maintenance import gauges, reaper
    from tierq.maintenance.reaper import ReaperSummary
else:
    # the reaper's tick and its gauges: imported by the reaper function's first tick only
    gauges = lazy_module("tierq.maintenance.gauges")
    reaper = lazy_module("tierq.maintenance.reaper")


class JobTick:
    """One pass of a job (on every shard); what failed in it (pairs, schedules) is logged as
    a warning."""

    def __init__(self, job: str) -> None:
        self.job = job

    def __call__(self) -> Any:
        run = engine().run_job(self.job)  # (every shard at once, each under its budget)
        summaries = answered(self.job, run.by_shard)
        if len(run.by_shard) == 1:  # one database: its summary, as it is
            summary = next(iter(summaries.values()))
            self._warn(summary)
            return summary
        for shard, summary in summaries.items():
            self._warn(summary, shard)
        return {**merge_summaries(summaries.values()),
                "shards_down": shards_down(run.by_shard)}

    def _warn(self, summary: Any, shard: str | None = None) -> None:
        failed = getattr(summary, "failed", None)
        if failed:
            where = {} if shard is None else {"shard": shard}
            logger.warning(f"{self.job}: some items failed", extra={"failed": failed, **where})


_GAUGE_ROUNDS: WeakKeyDictionary[Tierq, gauges.GaugeRound] = WeakKeyDictionary()


def gauge_round_of(tq: Tierq) -> gauges.GaugeRound:
    """The gauge round of this process's engine (of a shard's engine: each shard walks its
    own pairs): it outlives one invocation (a warm Lambda keeps its engine), so a round cut
    by its budget goes on and an emptied queue gets its zeros in the next invocation too."""
    state = _GAUGE_ROUNDS.get(tq)
    if state is None:
        state = _GAUGE_ROUNDS.setdefault(tq, gauges.GaugeRound())
    return state


class ShardGauges:
    """The per-queue gauges of a sharded deployment, one value per queue as without shards.

    Each shard's gauge round counts the pairs it holds. A queue's gauges are the sum of the
    latest counts each shard gave of it; the oldest ready age is their maximum. They are
    emitted once per tick for each queue some shard counted or found emptied in that tick.
    A shard that does not answer counts with its last values. A queue that no shard holds
    now gets its zeros once, then nothing."""

    def __init__(self) -> None:
        self.latest: dict[str, dict[str, gauges.QueueValues]] = {}
        self.touched: set[str] = set()
        self._lock = threading.Lock()  # the shards' passes run in parallel

    def emit_of(self, shard: str) -> gauges.Emit:
        """Where shard ``shard``'s round sends each queue's counts (zeros: it has none)."""
        def emit(queue: str, values: Mapping[str, float]) -> None:
            with self._lock:
                by_shard = self.latest.setdefault(queue, {})
                if any(values.values()):
                    by_shard[shard] = dict(values)
                else:
                    by_shard.pop(shard, None)
                self.touched.add(queue)

        return emit

    def flush(self, emit: gauges.Emit) -> tuple[int, int]:
        """Emit the queues touched since the last flush: (gauged, zeroed) queues."""
        ready: list[tuple[str, gauges.QueueValues]] = []
        with self._lock:
            touched, self.touched = sorted(self.touched), set()
            for queue in touched:
                total = gauges.zeros()
                by_shard = self.latest.get(queue) or {}
                for values in by_shard.values():
                    gauges.merge(total, values)
                if not by_shard:
                    self.latest.pop(queue, None)
                ready.append((queue, total))
        zeroed = 0
        for queue, values in ready:
            emit(queue, values)
            zeroed += not any(values.values())
        return len(ready) - zeroed, zeroed


_SHARD_GAUGES: WeakKeyDictionary[Deployment, ShardGauges] = WeakKeyDictionary()


def shard_gauges_of(deployment: Deployment) -> ShardGauges:
    """The per-queue gauges of this process's sharded engine (they outlive an invocation)."""
    found = _SHARD_GAUGES.get(deployment)
    if found is None:
        found = _SHARD_GAUGES.setdefault(deployment, ShardGauges())
    return found


class ReaperTick:
    """Expire leases, reconcile, purge; count dead letters per queue; and, about once a
    minute, emit the per-queue gauges the alarms and the dashboard read: for the queues with
    tasks only, plus zeros once for a queue that emptied since (tierq.maintenance.gauges).
    With shards, each shard's pass and gauge round run at once under the shard's own budget,
    and each queue's gauges are summed over the shards (``ShardGauges``)."""

    def __init__(self, gauges_every: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 gauge_round: gauges.GaugeRound | None = None) -> None:
        self.gauges_every = gauges_every  # None: the reaper's gauges_every_seconds
        self.clock = clock
        self.gauge_round = gauge_round  # (one engine's; each shard's is its engine's)

    def __call__(self) -> dict[str, Any]:
        current = engine()
        default = current.engines[current.default_shard]
        if len(current.engines) == 1:  # one database: its gauges emitted as they are counted
            state = self.gauge_round if self.gauge_round is not None \
                else gauge_round_of(default)
            out, summary = self.one_pass(default, state, metrics.queue_gauge,
                                         current.default_shard)
            count_dead(default.ctx, summary.dead_by_queue)
            return out
        combined = shard_gauges_of(current)
        budget = default.job_config("reaper").budget_seconds
        results = on_every_shard(current, lambda shard, tq: self.one_pass(
            tq, gauge_round_of(tq), combined.emit_of(shard), shard), waits=budget)
        # (a shard given up on may still emit later: flushed with the next tick)
        gauged, zeroed = combined.flush(metrics.queue_gauge)
        passes = answered("reaper", results)
        dead: dict[str, int] = {}
        for shard, (_, summary) in passes.items():
            current.after_pass(shard, summary)
            for queue, n in summary.dead_by_queue.items():
                dead[queue] = dead.get(queue, 0) + n
        count_dead(default.ctx, dead)
        out = merge_summaries(out for out, _ in passes.values())
        out["gauged_queues"], out["zeroed_queues"] = gauged, zeroed
        out["shards_down"] = shards_down(results)
        return out

    def one_pass(self, tq: Tierq, state: gauges.GaugeRound, emit: gauges.Emit,
                 shard: str) -> tuple[dict[str, Any], ReaperSummary]:
        """The reaper's pass on one engine (of ``shard``), then its gauges when due (within
        what the pass left of the budget): the tick's output, and the pass's summary."""
        config = tq.job_config("reaper")
        assert isinstance(config, reaper.ReaperConfig)
        started = time.monotonic()
        summary = tq.run_reaper()
        out: dict[str, Any] = {
            "expired": summary.expired, "requeued": summary.requeued, "dead": summary.dead,
            "restored": summary.restored, "purged": summary.purged, "gauged_queues": 0,
            "zeroed_queues": 0, "pairs": summary.pairs, "forgotten": len(summary.forgotten),
            # what the pass passed over, to be tried again (ReaperSummary): "queue|tenant"
            # whose Valkey failed, whose statement timed out, whose keys a script refused
            # or whose queue's settings are refused
            "failed_pairs": summary.failed,
            "purge_failed": summary.purge_failed, "groups_failed": summary.groups_failed,
            "ready_index_failed": summary.ready_index_failed,
            "waits_kept": summary.waits_kept,
            "payload_tombstones_forgotten": summary.payload_tombstones_forgotten,
        }
        now = self.clock()
        every = self.gauges_every if self.gauges_every is not None \
            else config.gauges_every_seconds
        if state.due(now, every):
            # what the reaper's pass left of the tick's budget (a round cut short goes on
            # at the next tick; at least one slice is counted each time)
            left = config.budget_seconds - (time.monotonic() - started)
            # under the reaper's timeouts too (its pass's scope ended with run_reaper)
            with scoped_timeouts(config.statement_timeout_ms, config.lock_timeout_ms):
                gauged = gauges.run(
                    tq.ctx, state, emit, now=now, budget_seconds=max(0.0, left),
                    emit_seq_used=lambda used: metrics.task_seq_used(shard, used))
            out["gauged_queues"], out["zeroed_queues"] = gauged.gauged, gauged.zeroed
        return out, summary


def count_dead(ctx: Context, dead_by_queue: Mapping[str, int]) -> None:
    """Lease expiries that dead-lettered, per queue's series (``DeadLettered``)."""
    metrics.count_queues(ctx, "DeadLettered", dead_by_queue)


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
    settings = engine().settings
    every = registry.job(job).every(settings)
    report = run_ticks(job, tick, every=every, event=event, context=context,
                       settings=settings)
    return report.as_dict()


def scheduled_handler(job: str) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The Lambda handler of a scheduled function (``functions/<job>/app.py``)."""
    registry.job(job)  # (a KeyError naming the known jobs at import, not at the first tick)

    @logger.inject_lambda_context
    @tracer.capture_lambda_handler
    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        return handle(job, event, context)

    return lambda_handler
