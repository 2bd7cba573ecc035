"""Finer ticks inside one scheduled invocation.

EventBridge Scheduler fires a function at most once a minute, but the maintenance jobs run
every few seconds (cold → warm every 5 s, the delayed mover every second, …). So each
invocation runs its job's tick every ``every`` seconds and returns well before its timeout:
it stops when ``max_seconds`` (default 55, ``TIERQ_TICK_MAX_SECONDS``) have passed or when
less than ``safety_seconds`` (default 10, ``TIERQ_TICK_SAFETY_SECONDS``) of the invocation's
remaining time is left. Every job is safe to run twice at once, so an overlap does no harm.

The event is what the Scheduler sends: the template's ``Input``
(``{"source": "tierq.scheduler", "job": "reaper"}``), an EventBridge "Scheduled Event", or
nothing. Optional fields ``max_seconds`` and ``every_seconds`` override the defaults (short
invocations in tests). A tick that fails is logged and the loop goes on; an invocation whose
every tick failed raises the last error, so Lambda counts it as failed.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Protocol

from tierq.aws.runtime import logger
from tierq.config import MAX_INVOCATION_SECONDS, Settings, get_settings

SLEEP_SLICE = 0.25  # re-check the remaining time at least this often while waiting


class RemainingTime(Protocol):
    def get_remaining_time_in_millis(self) -> int: ...


@dataclass
class TickReport:
    job: str
    every_seconds: float
    ticks: int = 0
    failed_ticks: int = 0
    duration_ms: int = 0
    totals: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _event_float(event: Mapping[str, Any], name: str) -> float | None:
    value = event.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 < value <= MAX_INVOCATION_SECONDS:
        raise ValueError(f"event field {name!r} must be a number in (0, {MAX_INVOCATION_SECONDS:g}]"
                         f", got {value!r}")
    return float(value)


def _accumulate(totals: defaultdict[str, float], summary: Any) -> None:
    if summary is None:
        return
    values = asdict(summary) if is_dataclass(summary) and not isinstance(summary, type) \
        else dict(summary) if isinstance(summary, Mapping) else {}
    for name, value in values.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            totals[name] += value
        elif isinstance(value, list | tuple | set | dict):
            totals[name] += len(value)


def check_event(job: str, event: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The event as a mapping; a ``job`` naming another job is a wiring mistake."""
    if event is None:
        return {}
    if not isinstance(event, Mapping):
        raise ValueError(f"expected a JSON object as the event, got {type(event).__name__}")
    named = event.get("job")
    if named is not None and named != job:
        raise ValueError(f"this function runs {job!r} but the schedule's event names {named!r}")
    return event


def run_ticks(
    job: str,
    tick: Callable[[], Any],
    *,
    every: float,
    event: Mapping[str, Any] | None = None,
    context: RemainingTime | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    settings: Settings | None = None,
) -> TickReport:
    """Run ``tick`` every ``every`` seconds until the invocation should return (its limits:
    ``settings``' ticks, by default the process's)."""
    options = check_event(job, event)
    every = _event_float(options, "every_seconds") or every
    if not every > 0:
        raise ValueError(f"{job}: the tick interval must be positive, got {every!r}")
    settings = settings or get_settings()
    max_seconds = _event_float(options, "max_seconds") or settings.tick_max_seconds
    safety = settings.tick_safety_seconds

    def time_left() -> float:
        if context is None:
            return math.inf
        return context.get_remaining_time_in_millis() / 1000.0 - safety

    report = TickReport(job=job, every_seconds=every)
    totals: defaultdict[str, float] = defaultdict(int)  # whole counts stay int
    last_error: Exception | None = None
    start = clock()
    stop_at = start + max_seconds
    next_tick = start
    while True:
        now = clock()
        left = min(stop_at - now, time_left())
        if left <= 0:
            break
        if now < next_tick:
            sleep(max(0.0, min(next_tick - now, left, SLEEP_SLICE)))
            continue
        try:
            _accumulate(totals, tick())
            report.ticks += 1
        except Exception as exc:
            report.failed_ticks += 1
            last_error = exc
            logger.exception(f"{job}: tick failed", extra={"job": job})
        next_tick += every
        after = clock()
        if next_tick < after:  # the tick overran its slot: next one at once, no catching up
            next_tick = after
    report.duration_ms = int((clock() - start) * 1000)
    report.totals = dict(totals)
    if report.ticks == 0 and last_error is not None:
        raise last_error
    log = logger.info if any(totals.values()) or report.failed_ticks else logger.debug
    log(f"{job}: {report.ticks} ticks", extra={"report": report.as_dict()})
    return report
