"""Engine benchmark: N no-op tasks enqueued -> claimed -> acked through the ``Tierq`` engine
(enqueue batches of 500, claims of up to 400, as bench.vs_peers), with 1, 2 and 4 worker
processes.

    .venv/bin/python -m bench.engine            # 100,000 tasks, 1/2/4 processes
    .venv/bin/python -m bench.engine --quick    # 10,000 tasks

Per worker count it prints enqueue/s, drain/s (claim + ack of a backlog), end-to-end/s
(producers and consumers at once), claim latency p50/p99, PostgreSQL statements and
commits per task, and Valkey's peak memory above its baseline. The last line is
``tasks_per_s=N``: end-to-end at the largest worker count.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.report import (
    fmt_bytes,
    fmt_cpu,
    fmt_ms,
    fmt_per_task,
    fmt_rate,
    print_figures,
    print_machine,
    print_table,
    say,
    write_json,
)
from bench.runs import SystemRun, run_system
from bench.stores import (
    add_store_arguments,
    enable_pg_stat_statements,
    machine_info,
    opened_stores,
)
from bench.systems import TIERQ_CLAIM_BATCH, TIERQ_ENQUEUE_BATCH
from bench.systems.tierq_engine import TierqEngine


def print_results(runs: list[SystemRun]) -> None:
    rows = []
    for r in runs:
        enq, drain, e2e = r.enqueue, r.drain, r.e2e
        assert enq is not None and drain is not None and e2e is not None
        rows.append([
            str(r.workers), fmt_rate(enq.rate), fmt_rate(drain.rate), fmt_rate(e2e.rate),
            f"{fmt_ms(drain.latency('claim_latency', 50))}/"
            f"{fmt_ms(drain.latency('claim_latency', 99))}",
            f"{fmt_ms(e2e.latency('claim_latency', 50))}/"
            f"{fmt_ms(e2e.latency('claim_latency', 99))}",
            "/".join(fmt_per_task(m.statements_per_task()) for m in (enq, drain, e2e)),
            f"{fmt_per_task(e2e.commits_per_task())}",
            fmt_cpu(e2e.cpu_us_per_task()),
            fmt_bytes(max(m.valkey_peak or 0 for m in (enq, drain, e2e))),
            str(r.left),
        ])
    print_table(["workers", "enqueue/s", "drain/s", "end-to-end/s", "claim ms drain p50/p99",
                 "claim ms e2e p50/p99", "PG stmts/task enq/drain/e2e", "commits/task e2e",
                 "CPU us/task e2e client/pg/valkey", "valkey peak", "left"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=None, help="tasks per run (100000)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4],
                        help="worker process counts (1 2 4)")
    parser.add_argument("--quick", action="store_true", help="10,000 tasks")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per phase")
    parser.add_argument("--warm-max", type=int, default=None,
                        help="the queue's warm_max (default: the deployment default, 5000)")
    parser.add_argument("--no-maintenance", action="store_true",
                        help="do not run the scheduled maintenance jobs beside the workers")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    total = args.tasks or (10_000 if args.quick else 100_000)
    if total < 1 or any(w < 1 for w in args.workers):
        parser.error("--tasks and --workers must be positive")

    with opened_stores(args) as stores:
        statements = enable_pg_stat_statements(stores)
        info = machine_info(stores)
        print_machine(info)
        say(f"engine bench: {total:,} no-op tasks, enqueue batches of {TIERQ_ENQUEUE_BATCH}, "
            f"claims of up to {TIERQ_CLAIM_BATCH}, workers {args.workers}, "
            f"maintenance {'off' if args.no_maintenance else 'on'}, statements counted by "
            f"{'pg_stat_statements' if statements else '(unavailable)'}")
        overrides = {} if args.warm_max is None else {"warm_max": args.warm_max}
        system = TierqEngine(overrides, maintenance=not args.no_maintenance)
        runs = []
        for workers in args.workers:
            say(f"-- {workers} worker process(es)")
            runs.append(run_system(system, stores, workers=workers, total=total,
                                   timeout=args.timeout, statements=statements))
    say("")
    say(f"tierq engine, {total:,} tasks (claim latency: claim calls that returned tasks; "
        "valkey peak: sampled used_memory above the baseline)")
    print_results(runs)
    write_json(args.json, {"machine": info, "tasks": total,
                           "runs": [r.summary() for r in runs]})
    lost = sum(r.left for r in runs)
    if lost:
        say(f"WARNING: {lost} tasks were left unfinished")
    e2e = max(runs, key=lambda r: r.workers).e2e
    print_figures(f"tasks_per_s={e2e.rate if e2e else float('nan'):.0f}")
    return 1 if lost else 0

if __name__ == "__main__":
    raise SystemExit(main())
