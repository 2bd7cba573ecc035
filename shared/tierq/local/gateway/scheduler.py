"""The schedules of template.yaml, run locally: each schedule invokes its function with the
schedule's input (the event EventBridge Scheduler would send), once per period (``rate(1
minute)`` → every 60 s), never two invocations of one schedule at once (the template's
reserved concurrency of 1). Inside each invocation the handler runs its own finer ticks
(``TIERQ_*_EVERY``), exactly as on AWS. Stopping expires every running invocation's remaining
time, so the tick loops return at their next check.

The schedules are checked against the maintenance jobs (``tierq.maintenance.registry``): a
job without a schedule is reported (it would never run here), and a schedule that names no
registered job, or whose function is another job's, is reported and left off.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tierq.local.gateway.lambdas import LambdaContext, LocalFunction
from tierq.local.gateway.template import ScheduleSpec
from tierq.maintenance import registry


@dataclass
class ScheduleRun:
    spec: ScheduleSpec
    function: LocalFunction
    period: float
    invocations: int = 0
    failures: int = 0
    last_error: str | None = None
    current: LambdaContext | None = None
    thread: threading.Thread | None = field(default=None, repr=False)
    problem: str | None = None  # why the schedule is off (see check_schedule)
    # set to invoke at once rather than at the next period (a wake of the dispatcher)
    wake: threading.Event = field(default_factory=threading.Event, repr=False)


def check_schedule(spec: ScheduleSpec, function: LocalFunction) -> str | None:
    """Why a schedule does not run a registered maintenance job, or None."""
    job = spec.payload.get("job")
    if job not in registry.jobs():
        return (f"its input names job {job!r}, which is not a maintenance job (known: "
                f"{sorted(registry.jobs())})")
    if function.spec.name != job:
        return f"it runs job {job!r} on the function of {function.spec.name!r}"
    return None


def unscheduled_jobs(schedules: list[ScheduleSpec]) -> list[str]:
    """The maintenance jobs no schedule runs."""
    scheduled = {s.payload.get("job") for s in schedules}
    return sorted(name for name in registry.jobs() if name not in scheduled)


class LocalScheduler:
    def __init__(self, schedules: list[ScheduleSpec], functions: Mapping[str, LocalFunction], *,
                 period: float | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.runs = [ScheduleRun(spec=s, function=functions[s.function],
                                 period=period if period is not None else s.period_seconds,
                                 problem=check_schedule(s, functions[s.function]))
                     for s in schedules]
        self.unscheduled = unscheduled_jobs(schedules)
        self._stop = threading.Event()

    def start(self) -> None:
        for job in self.unscheduled:
            self.log(f"[tierq dev] maintenance job {job} has no schedule in the template: "
                     "it does not run")
        for run in self.runs:
            if run.problem is not None:
                self.log(f"[tierq dev] schedule {run.spec.name} is off: {run.problem}")
                continue
            run.function.load()
            if run.function.handler is None:
                self.log(f"[tierq dev] schedule {run.spec.name} is off: {run.function.error}")
                continue
            run.thread = threading.Thread(target=self._loop, args=(run,), daemon=True,
                                          name=f"tierq-dev-{run.spec.name}")
            run.thread.start()

    def _loop(self, run: ScheduleRun) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            context = run.function.context()
            run.current = context
            if self._stop.is_set():
                context.expire()  # stop() ran between the loop's check and now
            try:
                run.function.invoke(dict(run.spec.payload), context)
            except Exception as exc:
                run.failures += 1
                run.last_error = repr(exc)
                self.log(f"[tierq dev] {run.spec.name} invocation failed: {exc!r}\n"
                         + traceback.format_exc())
            finally:
                run.current = None
                run.invocations += 1
            run.wake.wait(max(0.0, started + run.period - time.monotonic()))
            run.wake.clear()

    def trigger(self, job: str) -> bool:
        """Invoke the schedule of ``job`` now (or as soon as its running invocation ends,
        one invocation at a time as always); whether such a schedule runs."""
        for run in self.runs:
            if run.spec.payload.get("job") == job and run.thread is not None:
                run.wake.set()
                return True
        return False

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        for run in self.runs:
            run.wake.set()
            if run.current is not None:
                run.current.expire()
        deadline = time.monotonic() + timeout
        for run in self.runs:
            if run.thread is not None:
                run.thread.join(max(0.0, deadline - time.monotonic()))
                if run.thread.is_alive():
                    self.log(f"[tierq dev] {run.spec.name} did not stop within {timeout:.0f}s")
