"""tierq side by side with PGQueuer and procrastinate, in one run, on the same PostgreSQL
(each in its own fresh database) and the same Valkey/Redis.

    .venv/bin/python -m bench.vs_peers            # 20,000 tasks, 1/2/4 worker processes
    .venv/bin/python -m bench.vs_peers --quick    # 2,000 tasks, 1/4 processes: < 2 minutes
    .venv/bin/python -m bench.vs_peers --systems tierq-http tierq-http+ack-and-claim
    .venv/bin/python -m bench.vs_peers --workers 4 --tierq-setting batch_rows=true

Systems: tierq through the engine, tierq through HTTP on the local stack (``tierq dev``,
when this environment has it; on request, ``tierq-http+ack-and-claim``, whose acks claim the
next batch), PGQueuer and procrastinate, and the bare table. The bare
table is one durable table read with ``FOR UPDATE SKIP LOCKED``: the floor the peers sit on,
not a peer (bench.vs_bare runs it at more shapes). bench/systems/ gives the settings of
each. For
every worker count, every system runs the same three phases with the same number of no-op
tasks and the same number of processes: enqueue/s, drain/s and end-to-end/s
(bench/runs.py). Systems alternate inside each worker count so that drifts
of the machine (the disk's fsync rate varies) hit all of them alike.

The last line is always ``ratio_vs_best_peer=X.XX``: tierq's engine path end-to-end rate
over the best peer's (the bare table is not one), at the largest worker count.
``--tierq-setting FIELD=VALUE`` (repeatable) adds the engine with those settings beside its
defaults (``tierq-engine+FIELD=VALUE``, taking turns with the others), and its own ratio
just before the last line: ``ratio_vs_best_peer_with_settings=X.XX``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.measure import median_rate
from bench.peers.remote import PeerSystem
from bench.phases import PhaseFailed, process_context
from bench.report import (
    fmt_cpu,
    fmt_ms,
    fmt_rate,
    print_figures,
    print_machine,
    print_table,
    say,
    write_json,
)
from bench.runs import SystemRun, run_system
from bench.stores import (
    Stores,
    add_store_arguments,
    enable_pg_stat_statements,
    machine_info,
    opened_stores,
)
from bench.systems import System
from bench.systems.bare_table import BareTable
from bench.systems.pgqueuer import PgQueuer
from bench.systems.procrastinate import Procrastinate
from bench.systems.tierq_engine import TierqEngine, parsed_settings
from bench.systems.tierq_http import TierqHttp, tierq_dev_available

PEERS = ("pgqueuer", "procrastinate")
FLOOR = ("bare-table",)  # compared with, never a peer
TIERQ_PATHS = ("tierq-engine", "tierq-http", "tierq-http+ack-and-claim")
# the name of the engine run with --tierq-setting begins so (TierqEngine's named_settings)
ENGINE_WITH = "tierq-engine+"
SYSTEMS = ["tierq-engine", "tierq-http", "pgqueuer", "procrastinate", "bare-table"]
# on request only: tierq over HTTP, each ack claiming the next batch (one request a loop)
HTTP_ACK_AND_CLAIM = "tierq-http+ack-and-claim"
PHASES = ("enqueue", "drain", "e2e")
PHASE_TITLES = {"enqueue": "enqueue/s", "drain": "drain/s", "e2e": "end-to-end/s"}


Runs = list[SystemRun]


def rate(runs: Runs | None, phase: str) -> float | None:
    """The median over the repeats (a run that left tasks behind or timed out has none)."""
    return median_rate([getattr(run, phase) for run in runs or []])


def representative(runs: Runs) -> SystemRun:
    """The repeat whose end-to-end rate is the median one (for latency and CPU columns)."""
    def e2e_rate(run: SystemRun) -> float:
        return run.e2e.rate if run.e2e is not None and run.e2e.counts else 0.0

    return sorted(runs, key=e2e_rate)[len(runs) // 2]


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "-"
    return f"{a / b:.2f}x"


def print_results(results: dict[int, dict[str, Runs]]) -> None:
    rows = []
    for workers, by_system in results.items():
        for name, runs in by_system.items():
            run = representative(runs)
            drain, e2e = run.drain, run.e2e
            claims = "-"
            if e2e is not None and e2e.phase.values("claim_latency"):
                claims = (f"{fmt_ms(e2e.latency('claim_latency', 50))}/"
                          f"{fmt_ms(e2e.latency('claim_latency', 99))}")
            rows.append([
                name, str(workers),
                *(fmt_rate(rate(runs, p)) for p in PHASES),
                claims,
                fmt_cpu(e2e.cpu_us_per_task()) if e2e is not None else "-",
                str(sum(r.left for r in runs)) if drain is not None or e2e is not None
                else "-",
                "; ".join(n for r in runs for n in r.notes) or "",
            ])
    print_table(["system", "workers", *PHASE_TITLES.values(), "claim ms p50/p99",
                 "CPU us/task client/pg/valkey", "left", "notes"], rows)


def print_ratios(results: dict[int, dict[str, Runs]]) -> None:
    rows = []
    for workers, by_system in results.items():
        for mine in [n for n in by_system if n in TIERQ_PATHS or n.startswith(ENGINE_WITH)]:
            for peer in PEERS + FLOOR:
                if peer not in by_system:
                    continue
                rows.append([f"{mine} / {peer}", str(workers), *(
                    ratio(rate(by_system[mine], p), rate(by_system[peer], p)) for p in PHASES)])
    if rows:
        print_table(["ratio", "workers", *PHASE_TITLES.values()], rows)


def best_peer_ratio(results: dict[int, dict[str, Runs]], mine_name: str = "tierq-engine"
                    ) -> tuple[float, str]:
    """``mine_name``'s end-to-end rate over the best peer's at the largest worker count,
    and that peer (nan and "-" when either was not measured)."""
    largest = max(results)
    by_system = results[largest]
    mine = rate(by_system.get(mine_name), "e2e")
    peers = {p: rate(by_system.get(p), "e2e") for p in PEERS if p in by_system}
    measured = {p: r for p, r in peers.items() if r}
    if mine is None or not measured:
        return float("nan"), "-"
    best = max(measured, key=lambda p: measured[p])
    return mine / measured[best], best


def make_systems(names: list[str], tierq_settings: dict[str, Any] | None = None
                 ) -> tuple[list[System], list[str]]:
    """The systems asked for, and the reasons for those that cannot run here;
    ``tierq_settings``: the engine with them too, after the engine with its defaults."""
    systems: list[System] = []
    skipped: list[str] = []
    for name in names:
        if name == "tierq-engine":
            systems.append(TierqEngine())
            if tierq_settings:
                systems.append(TierqEngine(tierq_settings, named_settings=True))
        elif name in ("tierq-http", HTTP_ACK_AND_CLAIM):
            if tierq_dev_available():
                systems.append(TierqHttp(ack_and_claim=name == HTTP_ACK_AND_CLAIM))
            else:
                skipped.append(f"{name} (this environment's `tierq` has no `dev` command)")
        elif name == "pgqueuer":
            systems.append(PgQueuer())
        elif name == "bare-table":
            systems.append(BareTable())
        else:
            systems.append(Procrastinate())
    return systems, skipped


def start_fork_server(systems: list[System]) -> None:
    """One fork server for the worker processes of every system run in this interpreter
    (the peers run in their own), holding all their modules: it is started once, with the
    modules of the first phase, so they are named together before it."""
    local = [s for s in systems if not isinstance(s, PeerSystem)]
    process_context(tuple(dict.fromkeys(m for s in local for m in s.preload)))


def alternate(systems: list[System], stores: Stores, *, workers: int, total: int, repeat: int,
              timeout: float, statements: bool, detail: bool = False,
              by_role: bool = False) -> dict[str, Runs]:
    """``repeat`` runs of every system at one worker count, the systems taking turns so
    that drifts of the machine hit all of them alike, each round starting one system
    further (no system always runs after the same one) (``detail`` and ``by_role``: see
    runs.measure_phase)."""
    by_system: dict[str, Runs] = {s.name: [] for s in systems}
    for round_no in range(repeat):
        start = round_no % len(systems)
        for system in systems[start:] + systems[:start]:
            say(f"-- {system.name}, {workers} worker process(es)"
                + (f", run {round_no + 1}/{repeat}" if repeat > 1 else ""))
            try:
                run = run_system(system, stores, workers=workers, total=total,
                                 timeout=timeout, statements=statements, detail=detail,
                                 by_role=by_role)
            except PhaseFailed as exc:
                say(f"  {system.name} failed: {exc}")
                run = SystemRun(system.name, workers, total)
                run.notes.append("failed: " + str(exc).splitlines()[0])
            by_system[system.name].append(run)
    return by_system


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.vs_peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=None, help="tasks per phase (20000)")
    parser.add_argument("--quick", action="store_true",
                        help="2,000 tasks per phase, 1 and 4 worker processes")
    parser.add_argument("--workers", type=int, nargs="+", default=None,
                        help="worker process counts (1 2 4; 1 4 with --quick)")
    parser.add_argument("--systems", nargs="+", default=SYSTEMS,
                        choices=[*SYSTEMS, HTTP_ACK_AND_CLAIM])
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per system and worker count, alternating; medians are "
                             "reported (1)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per phase before a system is stopped (600; 60 --quick)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--tierq-setting", action="append", default=[],
                        metavar="FIELD=VALUE",
                        help="also run the engine with this field of tierq.config.Settings "
                             "(repeatable; e.g. batch_rows=true), beside its defaults")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    total = args.tasks or (2_000 if args.quick else 20_000)
    args.workers = args.workers or ([1, 4] if args.quick else [1, 2, 4])
    timeout = args.timeout or (60.0 if args.quick else 600.0)
    if total < 1 or any(w < 1 for w in args.workers) or args.repeat < 1:
        parser.error("--tasks, --workers and --repeat must be positive")

    tierq_settings = parsed_settings(parser, args.tierq_setting)
    if tierq_settings and "tierq-engine" not in args.systems:
        parser.error("--tierq-setting runs beside tierq-engine: name it in --systems")
    systems, skipped = make_systems(args.systems, tierq_settings)
    start_fork_server(systems)
    try:
        with opened_stores(args) as stores:
            statements = enable_pg_stat_statements(stores)
            info = machine_info(stores)
            print_machine(info)
            say(f"side by side: {total:,} no-op tasks per phase, workers {args.workers}, "
                f"systems {[s.name for s in systems]}")
            for note in skipped:
                say(f"  skipped: {note}")
            results = {workers: alternate(systems, stores, workers=workers, total=total,
                                          repeat=args.repeat, timeout=timeout,
                                          statements=statements)
                       for workers in args.workers}
    finally:
        for system in systems:
            system.close()
    say("")
    say(f"rates in tasks/s, {total:,} tasks per phase, median of {args.repeat} run(s); "
        "claim latency (claim calls of tierq and the bare table "
        "that returned tasks) and CPU microseconds per task (worker processes, PostgreSQL "
        "server, Valkey server) in the end-to-end phase")
    print_results(results)
    say("")
    print_ratios(results)
    value, best = best_peer_ratio(results)
    with_settings = [s.name for s in systems if s.name.startswith(ENGINE_WITH)]
    value_with = best_peer_ratio(results, with_settings[0])[0] if with_settings else None
    say("")
    say(f"best peer at {max(results)} workers, end-to-end: {best}")
    for note in skipped:
        say(f"not measured: {note}")
    write_json(args.json, {
        "machine": info, "tasks": total, "skipped": skipped,
        "runs": [r.summary() for by in results.values() for runs in by.values() for r in runs],
        "ratio_vs_best_peer": value, "best_peer": best,
        **({} if value_with is None else {"with_settings": with_settings[0],
                                          "ratio_vs_best_peer_with_settings": value_with})})
    print_figures(*([] if value_with is None
                    else [f"ratio_vs_best_peer_with_settings={value_with:.2f}"]),
                  f"ratio_vs_best_peer={value:.2f}")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
