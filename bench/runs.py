"""One measured run of one system with W worker processes, in three phases:

* **enqueue**: W producer processes enqueue N tasks (N/W each) into an empty queue;
* **drain**: W consumer processes claim and ack those N tasks;
* **end-to-end**: then, on the same (now empty) queue, W producers and W consumers run at
  the same time, from the first enqueue to the last ack of another N tasks.

Each phase starts its processes first and times from the moment all of them are set up.
Afterwards the store is checked: every task must be finished (``left`` = 0).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from bench.common import (
    Cpu,
    PgWork,
    PhaseResult,
    Stores,
    ValkeyMemory,
    cpu_now,
    percentile,
    pg_work,
    run_phase,
    say,
)
from bench.systems import System

STATS_FLUSH_WAIT = 1.2  # PostgreSQL publishes a busy backend's counters at most once a second


@dataclass
class Measured:
    phase: PhaseResult
    work: PgWork | None = None
    valkey_peak: int | None = None  # bytes above the baseline, sampled
    left: int = 0
    cpu: Cpu | None = None

    def cpu_us_per_task(self) -> dict[str, float | None]:
        """CPU microseconds per task: client processes, PostgreSQL, Valkey."""
        n = self.phase.total
        if self.cpu is None:
            return {"client": None, "postgres": None, "valkey": None}
        def us(v: float | None) -> float | None:
            return None if v is None else v * 1e6 / n
        return {"client": us(self.cpu.client), "postgres": us(self.cpu.postgres),
                "valkey": us(self.cpu.valkey)}

    @property
    def rate(self) -> float:
        return self.phase.rate

    def latency(self, key: str, q: float) -> float:
        return percentile(self.phase.values(key), q)

    def statements_per_task(self) -> float | None:
        if self.work is None or self.work.statements is None:
            return None
        return self.work.statements / self.phase.total

    def commits_per_task(self) -> float | None:
        return None if self.work is None else self.work.commits / self.phase.total


@dataclass
class SystemRun:
    system: str
    workers: int
    total: int
    enqueue: Measured | None = None
    drain: Measured | None = None
    e2e: Measured | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def left(self) -> int:
        return sum(m.left for m in (self.drain, self.e2e) if m is not None)

    def summary(self) -> dict[str, Any]:
        def one(m: Measured | None) -> dict[str, Any] | None:
            if m is None:
                return None
            return {
                "rate": m.rate, "seconds": m.phase.seconds, "left": m.left,
                "timed_out": m.phase.timed_out,
                "claim_p50_ms": m.latency("claim_latency", 50) * 1000,
                "claim_p99_ms": m.latency("claim_latency", 99) * 1000,
                "claims": len(m.phase.values("claim_latency")),
                "empty_claims": sum(r.get("empty_claims", 0) for r in m.phase.results),
                "statements_per_task": m.statements_per_task(),
                "commits_per_task": m.commits_per_task(),
                "valkey_peak_bytes": m.valkey_peak,
                "cpu_us_per_task": m.cpu_us_per_task(),
            }
        return {"system": self.system, "workers": self.workers, "tasks": self.total,
                "enqueue": one(self.enqueue), "drain": one(self.drain), "e2e": one(self.e2e),
                "notes": self.notes}


def _measure(system: System, stores: Stores, prepared: Any, label: str, *, producers: int,
             consumers: int, total: int, timeout: float, statements: bool) -> Measured:
    memory = ValkeyMemory(stores.valkey_url) if system.uses_valkey else None
    pids = [prepared.spec["server_pid"]] if prepared.spec.get("server_pid") else []
    before = pg_work(stores, prepared.database_url, statements=statements)
    if memory is not None:
        memory.start()
    try:
        phase = run_phase(label, system.roles(prepared, producers=producers,
                                              consumers=consumers, total=total),
                          total=total, timeout=timeout, at_start=lambda: cpu_now(stores, pids))
    finally:
        if memory is not None:
            memory.stop()
    cpu = cpu_now(stores, pids) - phase.start_mark
    cpu.client += phase.worker_cpu
    time.sleep(STATS_FLUSH_WAIT)
    after = pg_work(stores, prepared.database_url, statements=statements)
    peak = None if memory is None else memory.peak - memory.baseline
    return Measured(phase, after - before, peak, cpu=cpu)


def run_system(system: System, stores: Stores, *, workers: int, total: int, timeout: float,
               statements: bool, phases: tuple[str, ...] = ("enqueue", "drain", "e2e"),
               ) -> SystemRun:
    """Measure one system with ``workers`` processes per role; see the module docstring."""
    run = SystemRun(system.name, workers, total)
    tag = f"{system.name} w={workers}"
    prepared = system.prepare(stores)
    try:
        with system.running(prepared):
            if "enqueue" in phases:
                run.enqueue = _measure(system, stores, prepared, f"{tag} enqueue",
                                       producers=workers, consumers=0, total=total,
                                       timeout=timeout, statements=statements)
                say(f"  {tag} enqueue: {run.enqueue.rate:,.0f} tasks/s "
                    f"({run.enqueue.phase.seconds:.1f}s)")
            if "drain" in phases:
                run.drain = _measure(system, stores, prepared, f"{tag} drain",
                                     producers=0, consumers=workers, total=total,
                                     timeout=timeout, statements=statements)
                run.drain.left = system.remaining(prepared)
                say(f"  {tag} drain: {run.drain.rate:,.0f} tasks/s "
                    f"({run.drain.phase.seconds:.1f}s), left {run.drain.left}")
            if "e2e" in phases and run.drain is not None and run.drain.left:
                run.notes.append("end-to-end skipped: the drain left tasks behind")
            elif "e2e" in phases:
                run.e2e = _measure(system, stores, prepared, f"{tag} end-to-end",
                                   producers=workers, consumers=workers, total=total,
                                   timeout=timeout, statements=statements)
                run.e2e.left = system.remaining(prepared)
                say(f"  {tag} end-to-end: {run.e2e.rate:,.0f} tasks/s "
                    f"({run.e2e.phase.seconds:.1f}s), left {run.e2e.left}")
    finally:
        system.cleanup(stores, prepared)
    for m in (run.drain, run.e2e):
        if m is not None and m.phase.timed_out:
            run.notes.append(f"{m.phase.label} timed out")
    return run
