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
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.measure import (
    Cpu,
    Measured,
    PgProcesses,
    ValkeyMemory,
    cpu_now,
    pg_work,
    statement_counters,
    statements_between,
)
from bench.report import say
from bench.stores import Stores
from bench.systems import Prepared, System

STATS_FLUSH_WAIT = 1.2  # PostgreSQL publishes a busy backend's counters at most once a second
# per phase: producers and consumers per worker count, and its name in the progress lines
PHASE_SHAPES = {"enqueue": (1, 0, "enqueue"), "drain": (0, 1, "drain"),
                "e2e": (1, 1, "end-to-end")}


@dataclass
class SystemRun:
    system: str
    workers: int
    total: int
    enqueue: Measured | None = None
    drain: Measured | None = None
    e2e: Measured | None = None
    notes: list[str] = field(default_factory=list)
    # PostgreSQL CPU per task spent outside the phases (System.pg_us_per_task_apart)
    pg_us_apart: float | None = None

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
                "rows_written_per_task": m.rows_written_per_task(),
                "wal_bytes_per_task": m.wal_bytes_per_task(),
                "wal_syncs_per_task": m.wal_syncs_per_task(),
                "valkey_peak_bytes": m.valkey_peak,
                "cpu_us_per_task": m.cpu_us_per_task(),
                "role_cpu_us_per_task": m.role_cpu_us_per_task(),
            }
        return {"system": self.system, "workers": self.workers, "tasks": self.total,
                "enqueue": one(self.enqueue), "drain": one(self.drain), "e2e": one(self.e2e),
                "pg_us_apart": self.pg_us_apart, "notes": self.notes}


def measure_phase(system: System, stores: Stores, prepared: Prepared, label: str, *,
                  producers: int, consumers: int, total: int, timeout: float,
                  statements: bool, detail: bool = False, profile_to: Path | None = None,
                  by_role: bool = False) -> Measured:
    """One phase of ``system`` with PostgreSQL's counters, the CPU of the client and the
    servers, and Valkey's memory measured around it. ``detail``: each statement's counters
    too (pg_stat_statements); ``profile_to``: the first producer and the first consumer
    are profiled into ``<profile_to>-producer.prof`` and ``-consumer.prof``; ``by_role`` (with
    ``detail``): the database's backends' CPU split by role too (``PgProcesses``, whose
    connection to the admin database then counts among the server's other backends)."""
    memory = ValkeyMemory(stores.valkey_url) if system.uses_valkey else None
    pids = system.client_pids(prepared)
    roles = system.roles(prepared, producers=producers, consumers=consumers, total=total)
    if profile_to is not None:
        for kind in ("producer", "consumer"):
            first = next((r for r in roles if r.kind == kind), None)
            if first is not None:
                first.spec = {**first.spec, "profile_to": f"{profile_to}-{kind}.prof"}
    counters = statement_counters(stores, prepared.database_url) if detail else None
    before = pg_work(stores, prepared.database_url, statements=statements)
    processes: PgProcesses | None = None
    if detail and stores.private and stores.services is not None:
        processes = PgProcesses(stores.services.postgres.pid,  # type: ignore[attr-defined]
                                urlsplit(prepared.database_url).path.lstrip("/"),
                                activity_url=stores.postgres_url if by_role else None).start()

    def at_start() -> Cpu:
        if processes is not None:
            processes.mark()
        return cpu_now(stores, pids)

    if memory is not None:
        memory.start()
    try:
        phase = system.run_phase(label, roles, total=total, timeout=timeout,
                                 at_start=at_start)
    finally:
        if memory is not None:
            memory.stop()
        if processes is not None:
            processes.stop()
    cpu = cpu_now(stores, pids) - phase.start_mark
    cpu.client += phase.worker_cpu
    time.sleep(STATS_FLUSH_WAIT)
    after = pg_work(stores, prepared.database_url, statements=statements)
    peak = None if memory is None else memory.peak - memory.baseline
    measured = Measured(phase, after - before, peak, cpu=cpu)
    if processes is not None:
        measured.pg_by_kind = processes.seconds_by_kind()
        measured.pg_by_role = processes.seconds_by_role()
        measured.pg_connections = processes.started
    if counters is not None:
        measured.statements = statements_between(
            counters, statement_counters(stores, prepared.database_url))
    return measured


def run_system(system: System, stores: Stores, *, workers: int, total: int, timeout: float,
               statements: bool, phases: tuple[str, ...] = ("enqueue", "drain", "e2e"),
               detail: bool = False, profile_dir: Path | None = None,
               by_role: bool = False) -> SystemRun:
    """Measure one system with ``workers`` processes per role; see the module docstring.
    ``detail`` and ``profile_dir`` (``<dir>/<phase>-<role>.prof``): see ``measure_phase``."""
    run = SystemRun(system.name, workers, total)
    tag = f"{system.name} w={workers}"
    prepared = system.prepare(stores)
    try:
        with system.running(prepared):
            for phase in ("enqueue", "drain", "e2e"):
                if phase not in phases:
                    continue
                if phase == "e2e" and run.drain is not None and run.drain.left:
                    run.notes.append("end-to-end skipped: the drain left tasks behind")
                    continue
                producers, consumers, title = PHASE_SHAPES[phase]
                measured = measure_phase(
                    system, stores, prepared, f"{tag} {title}", producers=producers * workers,
                    consumers=consumers * workers, total=total, timeout=timeout,
                    statements=statements, detail=detail, by_role=by_role,
                    profile_to=None if profile_dir is None else profile_dir / phase)
                if consumers:
                    measured.left = system.remaining(prepared)
                setattr(run, phase, measured)
                say(f"  {tag} {title}: {measured.rate:,.0f} tasks/s "
                    f"({measured.phase.seconds:.1f}s)"
                    + (f", left {measured.left}" if consumers else ""))
        run.notes.extend(system.run_notes(prepared))
        run.pg_us_apart = system.pg_us_per_task_apart(prepared)
        if run.pg_us_apart is not None:
            run.notes.append(f"PostgreSQL apart: {run.pg_us_apart:.2f} us a task")
    finally:
        system.cleanup(stores, prepared)
    for m in (run.drain, run.e2e):
        if m is not None and m.phase.timed_out:
            run.notes.append(f"{m.phase.label} timed out")
    return run
