"""The dispatcher's invocation (``functions/dispatcher``): passes of the dispatcher job until
it is idle or its minute is over, then a wait for the invocations it started.

How it keeps going without calling itself. An invocation takes batches for at most
``max_seconds`` (55 s, ``TIERQ_TICK_MAX_SECONDS``), and only batches whose lease — the
consumer's timeout and margins — ends before the invocation's own deadline (its remaining
time less ``TIERQ_TICK_SAFETY_SECONDS``); it stops taking batches earlier when nothing was
ready for ``idle_seconds``. Then it releases the wake flag (tierq.logic.wake), looks once
more for ready work after ``RELEASE_SETTLE_MS`` (and goes on if it finds some and has time),
and finally waits for its running invocations. It never invokes itself: the next
invocation comes from the schedule (every minute, so a backlog is never left for longer
than the gap between one invocation's end of taking batches and the next minute) or from a
wake sent by another function when a task becomes ready while no dispatcher holds the
flag. No chain of invocations forms for Lambda's recursive loop detection to stop: each
invocation starts from the Scheduler or from a wake that carries no trace header.

With several shards (``TIERQ_SHARD_URLS``) each shard's engine has a dispatcher of its own,
over the pairs that shard holds. One invocation runs a pass of every shard's dispatcher at
once until all are idle, and holds the one wake flag of the deployment for all of them.
Each pass runs under its shard's deadline: a shard that does not answer is skipped and named
in the report's ``shards_down``, and its pairs wait. Each queue's ``max_concurrency`` is counted in
Valkey across every dispatcher; the invocation's ``max_in_flight`` is split over the shards.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from tierq.aws import metrics
from tierq.aws.runtime import engine, logger, shard_engines
from tierq.aws.scheduled import (
    RemainingTime,
    _event_float,
    check_event,
)
from tierq.aws.scheduled.shards import per_shard, shards_down
from tierq.engine import Tierq
from tierq.logic import wake
from tierq.logic.dispatch import DispatchCounts, Dispatcher
from tierq.logic.homes import ShardDown
from tierq.maintenance.dispatcher import DispatcherConfig, DispatcherSummary, dispatcher_of

JOB = "dispatcher"
FAILED_PASS_PAUSE = 1.0


def run(event: Mapping[str, Any] | None, context: RemainingTime | None) -> dict[str, Any]:
    """One invocation of the dispatcher (see the module's documentation)."""
    from tierq.aws.consumers import provide_functions

    # (the local stack's engines have theirs already: tierq.aws.runtime.use_consumers)
    settings = engine().settings
    provide_functions([tq.ctx for tq in shard_engines().values()], settings)
    options = check_event(JOB, event)
    max_seconds = _event_float(options, "max_seconds") or settings.tick_max_seconds
    safety = settings.tick_safety_seconds
    started = time.monotonic()
    left = math.inf if context is None else \
        context.get_remaining_time_in_millis() / 1000 - safety
    shards = shard_engines()
    first = next(iter(shards.values()))  # (the shards share the warm tier: the flag's)
    config = first.job_config(JOB)
    assert isinstance(config, DispatcherConfig)
    if len(shards) > 1:  # the invocation's threads, split over the shards
        config = config.model_copy(update={
            "max_in_flight": max(1, math.ceil(config.max_in_flight / len(shards)))})
    dispatchers = {name: dispatcher_of(tq.ctx, config) for name, tq in shards.items()}
    finish_by = started + left
    start_until = min(started + max_seconds, finish_by)

    def stopping() -> bool:
        return context is not None and context.get_remaining_time_in_millis() <= safety * 1000

    series_ctx = first.ctx  # (every shard holds the queues' settings)
    for dispatcher in dispatchers.values():
        # a queue's counts under its series: its name if an admin configured it, else ~other
        dispatcher.sink = lambda queue, counts: metrics.count_queue(series_ctx, queue, counts)
        dispatcher.began = started
        dispatcher.finish_by = finish_by
        dispatcher.start_until = start_until
        if context is not None:
            dispatcher.stop_when = stopping
        dispatcher.last_busy = time.monotonic()
    before = {name: d.counts() for name, d in dispatchers.items()}
    token = f"dispatcher-{uuid.uuid4().hex}"
    passes = failed_passes = 0
    down: dict[str, str] = {}
    while True:
        _hold(first.ctx, token, start_until)
        while time.monotonic() < start_until and not stopping():
            try:
                summaries = _pass(config)
                passes += 1
            except Exception:
                failed_passes += 1
                logger.exception("dispatcher: pass failed")
                time.sleep(FAILED_PASS_PAUSE)
                continue
            down.update(shards_down(summaries))
            if all(s.idle for s in summaries.values() if not isinstance(s, ShardDown)):
                break
        wake.release(first.ctx, token)
        if time.monotonic() >= start_until or stopping():
            break
        # a process that saw the flag set moments ago skips its wake: look after that
        time.sleep(wake.RELEASE_SETTLE_MS / 1000)
        if not _more_ready(dispatchers):
            break
        for dispatcher in dispatchers.values():
            dispatcher.last_busy = time.monotonic()
    drained = True
    for dispatcher in dispatchers.values():  # (their batches run at once: one deadline)
        drained = dispatcher.drain(max(0.0, finish_by - time.monotonic())) and drained
    counts = DispatchCounts()
    for name, dispatcher in dispatchers.items():
        counts.add(dispatcher.counts().minus(before[name]))
    report = {"job": JOB, "passes": passes, "failed_passes": failed_passes,
              "duration_ms": int((time.monotonic() - started) * 1000),
              "drained": drained, **asdict(counts)}
    unfit = sorted(set().union(*(d.unfit for d in dispatchers.values())))
    if unfit:  # (each named in a warning above)
        report["unfit_queues"] = unfit
    if len(shards) > 1:
        report["shards_down"] = down
        metrics.shard_down(JOB, down)  # (once an invocation: its passes each logged it)
    log = logger.info if counts.batches or failed_passes else logger.debug
    log(f"{JOB}: {counts.batches} batches", extra={"report": report})
    if passes == 0 and failed_passes:
        raise RuntimeError("dispatcher: every pass failed (see the log)")
    return report


def _pass(config: DispatcherConfig) -> dict[str, DispatcherSummary | ShardDown]:
    """A pass of every shard's dispatcher at once, each under its shard's deadline (its
    budget beyond the call limit); a pass every shard failed raises (a failed pass)."""
    summaries = per_shard(lambda _shard, tq: _run_job(tq), waits=config.budget_seconds)
    if all(isinstance(s, ShardDown) for s in summaries.values()):
        raise next(s for s in summaries.values() if isinstance(s, ShardDown))
    down = shards_down(summaries)
    if down:
        logger.warning("dispatcher: shard(s) did not answer; their pairs wait",
                       extra={"shards_down": down})
    return summaries


def _run_job(tq: Tierq) -> DispatcherSummary:
    summary = tq.run_job(JOB).summary()
    assert isinstance(summary, DispatcherSummary)
    return summary


def _more_ready(dispatchers: Mapping[str, Dispatcher]) -> bool:
    """Whether some shard has ready work its dispatcher could take (the last look)."""
    try:
        found = per_shard(lambda shard, _tq: dispatchers[shard].has_ready_work())
    except Exception:
        logger.exception("dispatcher: the last look for ready work failed")
        return False
    return any(r is True for r in found.values())


def _hold(ctx: Any, token: str, start_until: float) -> None:
    try:
        wake.hold(ctx, token, int((start_until - time.monotonic()) * 1000) + 5000)
    except Exception:  # without the flag, more wakes than needed: harmless
        logger.warning("dispatcher: setting the wake flag failed", exc_info=True)
