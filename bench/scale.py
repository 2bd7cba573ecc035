"""Scale benchmark: throughput with a cold backlog of 10k, 100k and 1M tasks, Valkey memory
through the run, and PostgreSQL's dead tuples and table size after a sustained run.

    .venv/bin/python -m bench.scale            # backlogs 10k, 100k, 1M; 2 worker processes
    .venv/bin/python -m bench.scale --quick    # backlogs 10k, 100k; shorter phases

One queue in one fresh database, default settings (warm_max 5000), the scheduled
maintenance jobs running beside the workers. For each backlog size:

1. **fill**: producer processes grow the backlog to the size (batches of 500); past
   warm_max the queue is in cold mode and new tasks wait in PostgreSQL;
2. **measure**: W worker processes each loop claim (up to 400, as in bench.vs_peers) ->
   ack -> enqueue as many new tasks, so the backlog stays at its size while tasks flow
   through cold -> warm -> acked;
   tasks/s is acks per second, the median of ``--rounds`` rounds (claim latency p50/p99
   over all of them).

Then a **sustained** run of the same loop for ``--sustain`` seconds (180 s: three of
PostgreSQL's default 60 s autovacuum_naptime) on the largest backlog, sampling
``pg_stat_user_tables`` every 2 s. It reports dead tuples (peak, at the end, and once
autovacuum had another turn), autovacuum runs, and heap and index size through the run. A
plateau means autovacuum keeps up; steady growth means it does not. Valkey's
``used_memory`` is sampled every 100 ms for the whole run.

Verdicts: no slowdown (the largest backlog's throughput at least 80% of the smallest's,
and whether it is within +/-20% at all: the machine's noise shows there); Valkey memory
flat (the largest backlog's peak within 20% or 1 MiB of the smallest's). The last line is
``throughput_ratio_largest_vs_smallest=X.XX``.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.measure import ValkeyMemory, percentile
from bench.phases import PhaseResult, Role, run_phase, split
from bench.report import (
    fmt_bytes,
    fmt_ms,
    fmt_rate,
    print_figures,
    print_machine,
    print_table,
    say,
    write_json,
)
from bench.stores import add_store_arguments, machine_info, opened_stores
from bench.systems import QUEUE, TIERQ_CLAIM_BATCH
from bench.systems.tierq_engine import (
    TIERQ_PRELOAD,
    Maintenance,
    tierq_produce,
    tierq_recycle,
)

FILL_BATCH = 500
TABLE_STATS = """
SELECT s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.vacuum_count,
       s.last_autovacuum, pg_relation_size('tierq_tasks') AS heap_bytes,
       pg_indexes_size('tierq_tasks') AS index_bytes
FROM pg_stat_user_tables s WHERE s.relname = 'tierq_tasks'
"""


@dataclass
class TableSample:
    at: float
    live: int
    dead: int
    autovacuums: int
    heap_bytes: int
    index_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.heap_bytes + self.index_bytes


def table_sample(database_url: str) -> TableSample:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(TABLE_STATS).fetchone()
    assert row is not None, "tierq_tasks not found"
    return TableSample(time.time(), int(row[0]), int(row[1]), int(row[2]) + int(row[3]),
                       int(row[5]), int(row[6]))


class TableMonitor:
    """Samples the task table's statistics every ``every`` seconds in a thread."""

    def __init__(self, database_url: str, every: float = 2.0) -> None:
        self.url = database_url
        self.every = every
        self.samples: list[TableSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="table-monitor", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psycopg.Error):
                self.samples.append(table_sample(self.url))
            self._stop.wait(self.every)

    def between(self, start: float, end: float) -> list[TableSample]:
        return [s for s in self.samples if start <= s.at <= end]

    def __enter__(self) -> TableMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@dataclass
class Step:
    backlog: int
    fill_rate: float = float("nan")
    rounds: list[PhaseResult] = field(default_factory=list)
    memory_min: int = 0
    memory_max: int = 0
    table: TableSample | None = None
    states: dict[str, int] = field(default_factory=dict)

    @property
    def rates(self) -> list[float]:
        return sorted(r.rate for r in self.rounds)

    @property
    def rate(self) -> float:
        """The median round."""
        return percentile(self.rates, 50) if self.rounds else float("nan")

    def claim_latency(self, q: float) -> float:
        return percentile([v for r in self.rounds for v in r.values("claim_latency")], q)


def states(database_url: str) -> dict[str, int]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT state, count(*) FROM tierq_tasks GROUP BY state").fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def autovacuum_naptime(database_url: str) -> float:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT setting::float FROM pg_settings "
                           "WHERE name = 'autovacuum_naptime'").fetchone()
    return float(row[0]) if row else 60.0


def memory_between(memory: ValkeyMemory, start: float, end: float) -> tuple[int, int]:
    values = [m for t, m in memory.samples if start <= t <= end] or [memory.used()]
    return min(values), max(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlogs", type=int, nargs="+", default=None,
                        help="backlog sizes, ascending (10000 100000 1000000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--measure", type=int, default=None,
                        help="acks measured per backlog size (60000; 20000 --quick)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="measured rounds per backlog (the median is reported; 3)")
    parser.add_argument("--sustain", type=float, default=None,
                        help="seconds of the sustained run (180; 20 --quick)")
    parser.add_argument("--quick", action="store_true", help="backlogs 10k and 100k")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per phase")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    backlogs = args.backlogs or ([10_000, 100_000] if args.quick
                                 else [10_000, 100_000, 1_000_000])
    measure = args.measure or (20_000 if args.quick else 60_000)
    sustain = args.sustain or (20.0 if args.quick else 180.0)
    if backlogs != sorted(backlogs) or backlogs[0] < 1 or args.workers < 1 or measure < 1 \
            or args.rounds < 1:
        parser.error("--backlogs must be positive and ascending; --workers, --measure and "
                     "--rounds positive")

    from tierq.dal.migrate import migrate

    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        say(f"scale bench: backlogs {backlogs}, {args.workers} worker process(es), "
            f"{measure:,} acks measured per backlog, sustained run {sustain:.0f}s")
        url = stores.fresh_database("bench_scale")
        migrate(url)
        naptime = autovacuum_naptime(url)
        say(f"autovacuum_naptime {naptime:.0f}s (the server's setting)")
        stores.clear_valkey()
        spec: dict[str, Any] = {"database_url": url, "valkey_url": stores.valkey_url,
                                "queue": QUEUE, "settings": {}}
        steps: list[Step] = []
        sustained: PhaseResult | None = None
        before_sustain = after_sustain = settled = None
        samples: list[TableSample] = []
        memory = ValkeyMemory(stores.valkey_url)
        with memory, TableMonitor(url) as table, Maintenance(spec) as jobs:
            current = 0
            for backlog in backlogs:
                step = Step(backlog)
                say(f"-- backlog {backlog:,}: filling {backlog - current:,} tasks")
                roles = [Role("producer", tierq_produce,
                              {**spec, "index": i, "range": (current + lo, current + hi),
                               "batch": FILL_BATCH})
                         for i, (lo, hi) in enumerate(split(backlog - current, args.workers))]
                fill = run_phase(f"fill {backlog:,}", roles, total=backlog - current,
                                 timeout=args.timeout, preload=TIERQ_PRELOAD)
                step.fill_rate = fill.rate
                current = backlog
                step.states = states(url)
                say(f"  filled at {fill.rate:,.0f} tasks/s; states {step.states}")
                roles = [Role("consumer", tierq_recycle, {**spec, "index": i})
                         for i in range(args.workers)]
                started = time.time()
                for round_no in range(args.rounds):
                    step.rounds.append(run_phase(
                        f"backlog {backlog:,} round {round_no + 1}", roles,
                        total=max(1, measure // args.rounds), timeout=args.timeout,
                        preload=TIERQ_PRELOAD))
                    say(f"  round {round_no + 1}: {step.rounds[-1].rate:,.0f} tasks/s")
                step.memory_min, step.memory_max = memory_between(memory, started, time.time())
                step.table = table_sample(url)
                say(f"  backlog {backlog:,}: {step.rate:,.0f} tasks/s (median), claim p50/p99 "
                    f"{fmt_ms(step.claim_latency(50))}/{fmt_ms(step.claim_latency(99))} ms, "
                    f"valkey used_memory {fmt_bytes(step.memory_max)}, "
                    f"dead tuples {step.table.dead:,}")
                steps.append(step)

            say(f"-- sustained run: {sustain:.0f}s at backlog {current:,}")
            before_sustain = table_sample(url)
            roles = [Role("consumer", tierq_recycle, {**spec, "index": i})
                     for i in range(args.workers)]
            started = time.time()
            sustained = run_phase("sustained", roles, total=10**12, timeout=sustain + 600,
                                  duration=sustain, progress_every=10.0,
                                  preload=TIERQ_PRELOAD)
            after_sustain = table_sample(url)
            samples = table.between(started, time.time())
            settle = min(naptime + 5, 90.0)
            say(f"  waiting {settle:.0f}s (autovacuum_naptime + 5s) for autovacuum to settle...")
            time.sleep(settle)
            settled = table_sample(url)
        if jobs.errors:
            say(f"maintenance errors: {jobs.errors[:5]}")

        say("")
        say(f"tierq, {args.workers} worker process(es), claim {TIERQ_CLAIM_BATCH} -> ack -> "
            f"enqueue as many at a constant backlog; tasks/s is the median of {args.rounds} "
            "rounds")
        rows = []
        for s in steps:
            assert s.table is not None
            rows.append([
                f"{s.backlog:,}", fmt_rate(s.fill_rate), fmt_rate(s.rate),
                f"{fmt_rate(s.rates[0])}-{fmt_rate(s.rates[-1])}",
                f"{s.rate / steps[0].rate:.2f}",
                f"{fmt_ms(s.claim_latency(50))}/{fmt_ms(s.claim_latency(99))}",
                f"{fmt_bytes(s.memory_min)} - {fmt_bytes(s.memory_max)}",
                f"{s.table.dead:,}", fmt_bytes(s.table.heap_bytes),
                fmt_bytes(s.table.index_bytes),
            ])
        print_table(["backlog", "fill/s", "tasks/s", "rounds", "vs first", "claim ms p50/p99",
                     "valkey used_memory", "dead tuples", "heap", "indexes"], rows)
        say("")
        peak_dead = max((s.dead for s in samples), default=after_sustain.dead)
        say(f"sustained run: {sustained.total:,} tasks in {sustained.seconds:.0f}s "
            f"({sustained.rate:,.0f}/s) at a backlog of {current:,}")
        say("  timeline (sampled every 2s):")
        step_every = max(1, len(samples) // 8)
        shown = samples[::step_every]
        if samples and shown[-1] is not samples[-1]:
            shown.append(samples[-1])
        for sample in shown:
            say(f"    +{sample.at - samples[0].at:5.0f}s  live {sample.live:>9,}  dead "
                f"{sample.dead:>9,}  heap {fmt_bytes(sample.heap_bytes):>10}  indexes "
                f"{fmt_bytes(sample.index_bytes):>10}  vacuums {sample.autovacuums}")
        say(f"  autovacuum/vacuum runs on tierq_tasks during it: "
            f"{after_sustain.autovacuums - before_sustain.autovacuums}")
        say(f"  dead tuples: peak {peak_dead:,} (sampled every 2s), at the end "
            f"{after_sustain.dead:,}, {settle:.0f}s later {settled.dead:,}; live {settled.live:,}")
        say(f"  table: heap {fmt_bytes(before_sustain.heap_bytes)} -> "
            f"{fmt_bytes(after_sustain.heap_bytes)}, indexes "
            f"{fmt_bytes(before_sustain.index_bytes)} -> {fmt_bytes(after_sustain.index_bytes)}"
            f" (growth {100 * (after_sustain.total_bytes / before_sustain.total_bytes - 1):.1f}"
            f"% while {sustained.total:,} tasks went through; {settle:.0f}s later heap "
            f"{fmt_bytes(settled.heap_bytes)}, indexes {fmt_bytes(settled.index_bytes)})")
        ratio = steps[-1].rate / steps[0].rate
        flat = abs(1 - ratio) <= 0.20
        no_slowdown = ratio >= 0.80
        memory_growth = steps[-1].memory_max - steps[0].memory_max
        memory_flat = memory_growth <= max(0.2 * steps[0].memory_max, 1024 * 1024)
        say(f"throughput at {steps[-1].backlog:,} vs {steps[0].backlog:,}: {ratio:.2f} "
            f"({'no slowdown' if no_slowdown else 'SLOWER by more than 20%'}; "
            f"{'within' if flat else 'NOT within'} +/-20%)")
        say(f"valkey used_memory peak at {steps[-1].backlog:,} vs {steps[0].backlog:,}: "
            f"{fmt_bytes(steps[-1].memory_max)} vs {fmt_bytes(steps[0].memory_max)} "
            f"({'flat' if memory_flat else 'NOT flat'})")
        write_json(args.json, {
            "machine": info, "workers": args.workers, "measure": measure,
            "steps": [{"backlog": s.backlog, "fill_rate": s.fill_rate, "rate": s.rate,
                       "round_rates": s.rates,
                       "claim_p50_ms": s.claim_latency(50) * 1000,
                       "claim_p99_ms": s.claim_latency(99) * 1000,
                       "valkey_used_memory_max": s.memory_max,
                       "dead_tuples": s.table.dead if s.table else None,
                       "states": s.states} for s in steps],
            "sustained": {"tasks": sustained.total, "seconds": sustained.seconds,
                          "peak_dead": peak_dead, "dead_end": after_sustain.dead,
                          "dead_settled": settled.dead,
                          "bytes_before": before_sustain.total_bytes,
                          "bytes_after": after_sustain.total_bytes},
            "valkey_samples": memory.samples[:: max(1, len(memory.samples) // 500)],
        })
        print_figures(f"throughput_ratio_largest_vs_smallest={ratio:.2f}")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
