"""One phase of a benchmark: worker processes started together and timed from the moment
all of them are set up, until the last one has done its part.

Processes come from a fork server with the systems' modules preloaded, so they start in
milliseconds and never inherit the parent's threads or connections. Standard library only:
the peers' driver (bench/peers/driver.py) runs phases with it in the peers' environment.
"""

from __future__ import annotations

import contextlib
import cProfile
import gc
import json
import multiprocessing as mp
import os
import pstats
import queue as queue_module
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.report import say

READY_TIMEOUT = 180.0
RESULT_GRACE = 10.0  # seconds a process that exited 0 has for its result to arrive


class Sync:
    """What the parent shares with the processes of one phase: a start line, counters of
    tasks enqueued and finished, and a stop flag. Passed to the processes at their start."""

    def __init__(self, ctx: Any, total: int) -> None:
        self.total = total
        self.ready = ctx.Queue()
        self.results = ctx.Queue()
        self.go = ctx.Event()
        self.stop = ctx.Event()
        self.enqueued = ctx.Value("q", 0)
        self.finished = ctx.Value("q", 0)
        self.start_time = ctx.Value("d", 0.0)
        self.cpu_at_start: float | None = None  # set in each worker process at the start
        # set in a worker process whose spec has "profile_to" (bench/breakdown.py)
        self.profiler: cProfile.Profile | None = None

    def ready_and_wait(self, index: int) -> None:
        """Tell the parent this process is set up; block until every process is."""
        self.ready.put(index)
        self.go.wait()
        self.cpu_at_start = time.process_time()
        if self.profiler is not None:
            self.profiler.enable()

    def add_enqueued(self, n: int) -> None:
        with self.enqueued.get_lock():
            self.enqueued.value += n

    def add_finished(self, n: int) -> int:
        with self.finished.get_lock():
            self.finished.value += n
            return int(self.finished.value)

    def all_finished(self) -> bool:
        return bool(self.stop.is_set() or self.finished.value >= self.total)


Target = Callable[[dict[str, Any], Sync], dict[str, Any]]


@dataclass
class Role:
    """One process of a phase: ``target(spec, sync)`` runs in it and returns a summary dict
    (``t_end``: wall time it finished its part)."""

    kind: str  # "producer" or "consumer"
    target: Target
    spec: dict[str, Any]


@dataclass
class PhaseResult:
    label: str
    total: int
    seconds: float
    results: list[dict[str, Any]]
    timed_out: bool = False
    start_mark: Any = None

    @property
    def rate(self) -> float:
        return self.total / self.seconds if self.seconds > 0 else float("nan")

    @property
    def worker_cpu(self) -> float:
        """CPU seconds the worker processes spent between the start and their end."""
        return float(sum(r.get("cpu", 0.0) for r in self.results))

    def values(self, key: str) -> list[float]:
        out: list[float] = []
        for r in self.results:
            out.extend(r.get(key, []))
        return out


class PhaseFailed(RuntimeError):
    pass


def split(total: int, parts: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges splitting ``total`` into ``parts`` nearly equal pieces."""
    base, extra = divmod(total, parts)
    out, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def profiler_overhead(calls: int = 100_000) -> dict[str, float]:
    """Seconds the profiler (``cProfile`` timed by ``time.thread_time``, as ``_child`` runs
    it) adds per call, measured here with empty calls: to the called function's own time
    (``callee_*``) and to its caller's (``caller_*``), for a Python function (``py``) and
    a built-in (``c``). bench/breakdown.py subtracts them."""
    def empty() -> None:
        pass

    def python_calls(n: int) -> None:
        for _ in range(n):
            empty()

    def builtin_calls(n: int, x: tuple[()] = ()) -> None:
        for _ in range(n):
            len(x)

    out: dict[str, float] = {}
    for kind, loop, callee in (("py", python_calls, "empty"), ("c", builtin_calls, "len")):
        began = time.thread_time()
        loop(calls)
        bare = time.thread_time() - began
        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
        loop(calls)
        profiler.disable()
        entries = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        own = {name: tt for (_, _, name), (_, _, tt, _, _) in entries.items()}
        callee_tt = next(tt for name, tt in own.items() if callee in name)
        out[f"callee_{kind}"] = callee_tt / calls
        out[f"caller_{kind}"] = max(0.0, own[loop.__name__] - bare) / calls
    return out


# The application name a role's PostgreSQL connections carry (libpq's PGAPPNAME, which
# psycopg reads): bench.measure.PgProcesses splits the backends' CPU by role with it.
ROLE_APP_NAME = "bench-{kind}"


def _child(target: Target, spec: dict[str, Any], sync: Sync, index: int, kind: str) -> None:
    os.environ["PGAPPNAME"] = ROLE_APP_NAME.format(kind=kind)
    # Every worker process starts from the fork server holding the preloaded modules of
    # the systems. Like any long-running pre-forked worker, it freezes them (gc.freeze) so
    # that the cycle collector's full passes stop walking them again and again: in
    # development that walk cost tierq's and PGQueuer's workers alike about a fifth of their
    # CPU (bench/README.md).
    gc.collect()
    gc.freeze()
    # A spec with "profile_to" (a file) has this process profiled from the start signal to
    # its end, in CPU time of its main thread; the profiler's overhead per call, measured
    # afterwards, goes beside it (bench/breakdown.py reads both).
    profile_to: str | None = spec.get("profile_to")
    if profile_to:
        sync.profiler = cProfile.Profile(time.thread_time)
    try:
        out = target(spec, sync)
        if sync.cpu_at_start is not None:  # CPU of the measured part only, not the set-up
            out["cpu"] = time.process_time() - sync.cpu_at_start
        if sync.profiler is not None and profile_to:
            sync.profiler.disable()
            sync.profiler.dump_stats(profile_to)
            with open(f"{profile_to}.overhead.json", "w") as f:
                json.dump(profiler_overhead(), f)
        sync.results.put(("ok", index, out))
    except BaseException:
        sync.results.put(("error", index, traceback.format_exc()))
        sync.stop.set()
        raise SystemExit(1) from None


_mp_context: Any = None


def process_context(preload: Sequence[str]) -> Any:
    """This interpreter's fork server, started at the first call with ``preload`` imported
    once (one fork server per interpreter: later calls share it)."""
    global _mp_context
    if _mp_context is None:
        _mp_context = mp.get_context("forkserver")
        _mp_context.set_forkserver_preload(list(preload))
    return _mp_context


def run_phase(label: str, roles: Sequence[Role], *, total: int, timeout: float,
              preload: Sequence[str] = (), progress_every: float = 2.0,
              at_start: Callable[[], Any] | None = None,
              duration: float | None = None) -> PhaseResult:
    """Start one process per role, wait until all are set up, start them together and wait
    until all are done. The phase takes from the start signal to the latest ``t_end`` of
    the consumers (of the producers when there are none). Prints progress.
    ``at_start`` runs right before the start signal; its value is ``PhaseResult.start_mark``.
    With ``duration``, the processes are asked to stop after that many seconds and the
    phase's total is what they finished by then."""
    ctx = process_context(preload)
    sync = Sync(ctx, total)
    procs = [ctx.Process(target=_child, args=(r.target, r.spec, sync, i, r.kind), daemon=True,
                         name=f"{label}-{r.kind}-{i}") for i, r in enumerate(roles)]
    for p in procs:
        p.start()
    results: dict[int, dict[str, Any]] = {}
    errors: list[str] = []

    def drain_results(block: float) -> None:
        with contextlib.suppress(queue_module.Empty):
            while True:
                status, index, payload = sync.results.get(timeout=block)
                block = 0.0
                if status == "ok":
                    results[index] = payload
                else:
                    errors.append(f"{procs[index].name}:\n{payload}")

    try:
        ready = 0
        deadline = time.monotonic() + READY_TIMEOUT
        while ready < len(procs):
            try:
                sync.ready.get(timeout=0.5)
                ready += 1
            except queue_module.Empty:
                drain_results(0.0)
                dead = [p for p in procs if not p.is_alive()]
                if errors or dead or time.monotonic() > deadline:
                    raise PhaseFailed(f"{label}: processes failed to start\n"
                                      + "\n".join(errors or [p.name for p in dead])) from None
        start_mark = at_start() if at_start is not None else None
        t0 = time.time()
        sync.start_time.value = t0
        sync.go.set()
        last_print = time.monotonic()
        last_done = 0
        timed_out = False
        end_at = time.monotonic() + timeout
        while len(results) + len(errors) < len(procs):
            drain_results(0.2)
            if errors:
                sync.stop.set()
                break
            now = time.monotonic()
            if duration is not None and not sync.stop.is_set() and time.time() - t0 >= duration:
                sync.stop.set()
            if now >= end_at:
                timed_out = True
                sync.stop.set()
                say(f"  [{label}] timed out after {timeout:.0f}s: stopping")
                end_at = now + 30  # let the processes finish cleanly
                timeout = float("inf")
            if now - last_print >= progress_every:
                done = sync.finished.value
                say(f"  [{label}] {time.time() - t0:5.1f}s  enqueued {sync.enqueued.value:,}"
                    f"  finished {done:,}/{total:,}"
                    f"  ({(done - last_done) / (now - last_print):,.0f}/s now)")
                last_print, last_done = now, done
            if any(not p.is_alive() for p in procs) and len(results) + len(errors) < len(procs):
                drain_results(1.0)
                gone = [p for i, p in enumerate(procs) if not p.is_alive() and i not in results]
                if gone and all(p.exitcode == 0 for p in gone):
                    # (a process that exited 0 put its result before it ended: wait for it
                    # in the queue a little longer before calling it lost)
                    waited = time.monotonic() + RESULT_GRACE
                    while gone and time.monotonic() < waited:
                        drain_results(0.5)
                        gone = [p for i, p in enumerate(procs)
                                if i not in results and not p.is_alive()]
                        if any(p.exitcode != 0 for p in gone):
                            break
                if gone and len(results) + len(errors) < len(procs):
                    errors.append("exited without a result: " + ", ".join(
                        f"{p.name} (exit {p.exitcode})" for p in gone))
                    sync.stop.set()
                    break
        if errors:
            raise PhaseFailed(f"{label} failed:\n" + "\n".join(errors))
    finally:
        sync.stop.set()
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    ordered = [results[i] for i in sorted(results)]
    consumers = [results[i] for i, r in enumerate(roles) if r.kind == "consumer" and i in results]
    ends = [r["t_end"] for r in (consumers or ordered)]
    seconds = max(ends) - t0 if ends else float("nan")
    if duration is not None:
        total = int(sync.finished.value)
    return PhaseResult(label, total, seconds, ordered, timed_out, start_mark)
