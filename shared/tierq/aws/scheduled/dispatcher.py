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
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from tierq.aws import metrics
from tierq.aws.runtime import engine, logger
from tierq.aws.scheduled import (
    DEFAULT_MAX_SECONDS,
    DEFAULT_SAFETY_SECONDS,
    RemainingTime,
    _env_float,
    _event_float,
    check_event,
)
from tierq.logic import wake
from tierq.maintenance.dispatcher import DispatcherConfig, dispatcher_of

JOB = "dispatcher"
FAILED_PASS_PAUSE = 1.0


def run(event: Mapping[str, Any] | None, context: RemainingTime | None) -> dict[str, Any]:
    """One invocation of the dispatcher (see the module's documentation)."""
    from tierq.aws.consumers import install_functions

    tq = engine()
    install_functions(tq.settings)  # (the local stack installs its own first)
    options = check_event(JOB, event)
    max_seconds = _event_float(options, "max_seconds") or _env_float(
        "TIERQ_TICK_MAX_SECONDS", DEFAULT_MAX_SECONDS)
    safety = _env_float("TIERQ_TICK_SAFETY_SECONDS", DEFAULT_SAFETY_SECONDS)
    started = time.monotonic()
    left = math.inf if context is None else \
        context.get_remaining_time_in_millis() / 1000 - safety
    config = tq.job_config(JOB)
    assert isinstance(config, DispatcherConfig)
    dispatcher = dispatcher_of(tq.ctx, config)
    dispatcher.sink = metrics.count
    dispatcher.finish_by = started + left
    dispatcher.start_until = min(started + max_seconds, dispatcher.finish_by)
    if context is not None:
        dispatcher.stop_when = lambda: context.get_remaining_time_in_millis() <= safety * 1000
    before = dispatcher.counts()
    token = f"dispatcher-{uuid.uuid4().hex}"
    passes = failed_passes = 0
    dispatcher.last_busy = time.monotonic()
    while True:
        _hold(tq.ctx, token, dispatcher.start_until)
        while time.monotonic() < dispatcher.start_until and not (
                dispatcher.stop_when is not None and dispatcher.stop_when()):
            try:
                summary = tq.run_job(JOB)
                passes += 1
            except Exception:
                failed_passes += 1
                logger.exception("dispatcher: pass failed")
                time.sleep(FAILED_PASS_PAUSE)
                continue
            if summary.idle:
                break
        wake.release(tq.ctx, token)
        if time.monotonic() >= dispatcher.start_until or (
                dispatcher.stop_when is not None and dispatcher.stop_when()):
            break
        # a process that saw the flag set moments ago skips its wake: look after that
        time.sleep(wake.RELEASE_SETTLE_MS / 1000)
        try:
            more = dispatcher.has_ready_work()
        except Exception:
            logger.exception("dispatcher: the last look for ready work failed")
            more = False
        if not more:
            break
        dispatcher.last_busy = time.monotonic()
    drained = dispatcher.drain(max(0.0, dispatcher.finish_by - time.monotonic()))
    counts = dispatcher.counts().minus(before)
    report = {"job": JOB, "passes": passes, "failed_passes": failed_passes,
              "duration_ms": int((time.monotonic() - started) * 1000),
              "drained": drained, **asdict(counts)}
    log = logger.info if counts.batches or failed_passes else logger.debug
    log(f"{JOB}: {counts.batches} batches", extra={"report": report})
    if passes == 0 and failed_passes:
        raise RuntimeError("dispatcher: every pass failed (see the log)")
    return report


def _hold(ctx: Any, token: str, start_until: float) -> None:
    try:
        wake.hold(ctx, token, int((start_until - time.monotonic()) * 1000) + 5000)
    except Exception:  # without the flag, more wakes than needed: harmless
        logger.warning("dispatcher: setting the wake flag failed", exc_info=True)
