"""tierq's engine side by side with the bare table (one durable PostgreSQL table read with
``FOR UPDATE SKIP LOCKED``, bench/systems/bare_table.py) at the shapes of issue 29, in one
run, on the same private servers.

    .venv/bin/python -m bench.vs_bare                 # 20,000 tasks, medians of 3 runs
    .venv/bin/python -m bench.vs_bare --breakdown     # and where a task's microseconds go
    .venv/bin/python -m bench.vs_bare --quick         # 2,000 tasks, 1 run (a smoke run)

    .venv/bin/python -m bench.vs_bare --sketch        # and design A's writes, sketched
    .venv/bin/python -m bench.vs_bare --sketch b      # or design B's, C's or D's (--sketch c,
                                                      # --sketch d); repeat the option
                                                      # for several
    .venv/bin/python -m bench.vs_bare --sketch d --sketch-setting ack_group_commit=true
                                                      # a sketch with a setting changed

    .venv/bin/python -m bench.vs_bare --bare-client-us 22  # and the bare table, its
                                                      # clients 22 µs a task heavier
    .venv/bin/python -m bench.vs_bare --bare-custom-plans  # and the bare table, each
                                                      # statement planned for its
                                                      # parameters
    .venv/bin/python -m bench.vs_bare --ack-claims 8  # and tierq acking 8 claims at once
    .venv/bin/python -m bench.vs_bare --tierq-setting claim_window_reuse_ms=0
                                                      # and tierq with a setting changed

    .venv/bin/python -m bench.vs_bare --ack-and-claim # and workers that ack and claim in
                                                      # one call
    .venv/bin/python -m bench.vs_bare --floor         # and the least any two-store queue
                                                      # does per task (--floor batches:
                                                      # with a row per batch)

Shapes (``--shapes``; every one enqueues in batches of 500):

* ``4x400``: 4 worker processes per role, claims of up to 400;
* ``8x10``: 8 worker processes per role, claims of up to 10;
* ``mixed``: 4 worker processes per role, claims of up to 100, tasks over 10 tenants with a
  random priority 0..9 and a key on one task in ten. tierq claims without a tenant (its
  claims rotate across the tenants); the bare table stores the same rows with a tenant
  column and orders its claims by priority only.

For each shape both systems run the three phases of bench/runs.py (enqueue, drain,
end-to-end), alternating, ``--repeat`` times; rates are medians over the repeats, CPU per
task the median of each part over the repeats, claim latencies the percentiles of every
claim call that returned tasks in the end-to-end phases of all repeats.

Per shape it prints each system's rates, claim latency p50/p99, CPU microseconds per task
(client / PostgreSQL / Valkey) and tasks per PostgreSQL CPU-second (10^6 / PostgreSQL
microseconds per task: what one PostgreSQL core sustains), then tierq ÷ bare for the rates
and for PostgreSQL CPU per task. ``--breakdown`` adds where a task's microseconds go
(bench/breakdown.py): statements, commits, rows and WAL per task, each statement's share,
and the client's CPU split by stage from one more, profiled, run of each system.

``--sketch [a|b|c|d]`` (a by default; repeat it for several) adds a system taking turns with
the two: tierq's engine with the writes of a design of docs/design-rotating-tables.md in
place of its insert and ack statements. These are ``tierq-hot-sketch`` for design A (a narrow table,
bench/systems/hot_sketch.py), ``tierq-log-sketch`` for design B (rotating slot tables whose
acks append, bench/systems/log_sketch.py), ``tierq-batch-sketch`` for design C (a row per
batch whose tasks are finished by bits, bench/systems/batch_sketch.py) or
``tierq-append-sketch`` for design D (a row per batch whose acks append a row of ids,
bench/systems/append_sketch.py). What B, C and D do after the phases (B's rotation, C's
and D's sweeps) is measured then and added to their PostgreSQL CPU per task. Each prints
``sketch_<letter>_ratio_vs_bare_<shape>=`` and ``sketch_<letter>_pg_cpu_vs_bare_<shape>=``
before the last lines: what the design would give end to end, measured before it is built
(each module says what it leaves out). ``--sketch-setting FIELD=VALUE`` (repeat it for
several) runs the sketches with those settings, named ``<sketch>+<field>=<value>``: a
design with a setting of today's engine, such as group commit.
``--bare-client-us N`` adds the bare table whose clients spend N µs more CPU per task
(``bare-table+<N>us``, bench/systems/bare_table.py): what a client as heavy as tierq's does
to PostgreSQL's CPU per task on the same cores. ``--bare-custom-plans`` adds the bare
table whose connections plan every statement for its parameters
(``bare-table+custom-plans``): what planning every statement, rather than the generic plan
PostgreSQL may keep for a prepared one, costs or saves it. ``--ack-claims N`` adds tierq's
engine whose consumers ack once they hold N claims (``tierq-engine+acks-of-<N>-claims``): what
acks of several workers committed together (docs/design-rotating-tables.md, section 6)
would leave PostgreSQL, without the cost of gathering them (with ``--tierq-setting``, it
has those settings too: ``tierq-engine+acks-of-<N>-claims+<field>=<value>``, several comma
separated; ``--ack-and-claim``'s system likewise).
``--tierq-setting FIELD=VALUE`` (repeat it for several, all in one system) adds tierq's
engine with those settings (``tierq-engine+<field>=<value>``): a setting's effect measured
side by side.
``--ack-and-claim`` adds tierq's engine whose consumers ack a batch and claim the next in
one call (``tierq-engine+ack-and-claim``, ``Tierq.ack_and_claim``); its claim latency is
that of the claims made alone. ``--floor [rows|batches]`` (rows by default; repeat it for
both) adds ``two-store-floor`` or ``two-store-floor+batch-rows``
(bench/systems/two_store_floor.py): a queue keeping tierq's contract with PostgreSQL and
Valkey each doing the least they can per task, and none of its features, its PostgreSQL
rows one per task or one per enqueued batch (its sweep after the phases added); it prints
``floor_ratio_vs_bare_<shape>=`` and ``floor_pg_cpu_vs_bare_<shape>=`` (or
``floor_batches_…``) before the last lines: how far a design with two stores can go on
these cores.

The last lines are ``ratio_vs_bare_<shape>=`` (end-to-end rate, tierq ÷ bare) for every
shape run, then ``pg_cpu_vs_bare_<shape>=`` (PostgreSQL CPU per task, tierq ÷ bare).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import breakdown
from bench.measure import Measured, percentile
from bench.phases import PhaseFailed, process_context
from bench.report import (
    fmt_cpu,
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
from bench.systems import System, Workload
from bench.systems.append_sketch import AppendedAcksSketch
from bench.systems.bare_table import BareTable
from bench.systems.batch_sketch import BatchRowsSketch
from bench.systems.hot_sketch import HotTableSketch
from bench.systems.log_sketch import LogSlotsSketch
from bench.systems.tierq_engine import TierqEngine, parsed_settings
from bench.systems.two_store_floor import TwoStoreFloor
from bench.vs_peers import Runs, alternate, rate

TIERQ = "tierq-engine"
BARE = "bare-table"
# the designs' sketches (--sketch), by the letter of docs/design-rotating-tables.md
SKETCHES: dict[str, type[TierqEngine]] = {"a": HotTableSketch, "b": LogSlotsSketch,
                                          "c": BatchRowsSketch, "d": AppendedAcksSketch}
# the two-store floors (--floor), by what their PostgreSQL rows hold: their figures' prefix
# and whether their rows are per batch
FLOORS = {"rows": ("floor", False), "batches": ("floor_batches", True)}
PHASES = ("enqueue", "drain", "e2e")


@dataclass(frozen=True)
class Shape:
    name: str
    title: str
    workers: int
    workload: Workload


SHAPES = {s.name: s for s in (
    Shape("4x400", "4 workers, claims of 400, enqueues of 500", 4,
          Workload(enqueue_batch=500, claim_batch=400)),
    Shape("8x10", "8 workers, claims of 10, enqueues of 500", 8,
          Workload(enqueue_batch=500, claim_batch=10)),
    Shape("mixed", "4 workers, claims of 100, enqueues of 500, 10 tenants, priorities 0-9, "
          "a key on 1 task in 10", 4,
          Workload(enqueue_batch=500, claim_batch=100, tenants=10, priorities=True,
                   key_every=10)),
)}


def e2e_phases(runs: Runs) -> list[Measured]:
    """The end-to-end phases that count (every task finished in time)."""
    return [r.e2e for r in runs if r.e2e is not None and r.e2e.counts]


def median_of(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return percentile(known, 50) if known else None


def cpu_part(runs: Runs, part: str) -> float | None:
    """The median over the repeats of one part of the end-to-end CPU per task."""
    return median_of([m.cpu_us_per_task()[part] for m in e2e_phases(runs)])


def pg_with_apart(runs: Runs) -> float | None:
    """PostgreSQL CPU per task of the end-to-end phases (median) plus what the system
    spends apart, after its phases (median; a sketch's rotation)."""
    pg = cpu_part(runs, "postgres")
    apart = median_of([r.pg_us_apart for r in runs])
    return None if pg is None else pg + (apart or 0.0)


def claim_ms(runs: Runs, q: float) -> float | None:
    """The q-th percentile of every claim that returned tasks, in the end-to-end phases."""
    values = [v for m in e2e_phases(runs) for v in m.phase.values("claim_latency")]
    return percentile(values, q) * 1000 if values else None


def tasks_per_pg_cpu_second(runs: Runs) -> float | None:
    pg = cpu_part(runs, "postgres")
    return 1e6 / pg if pg else None


def divided(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else a / b


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def fmt_num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


@dataclass
class ShapeResult:
    shape: Shape
    runs: dict[str, Runs]
    # by system, the profiled run and where its profiles are (--breakdown)
    profiled: dict[str, tuple[Path, SystemRun]]
    # the sketches' systems' names by letter (with --sketch-setting, their settings' too)
    sketch_names: dict[str, str]

    def figures(self) -> dict[str, Any]:
        mine, bare = self.runs[TIERQ], self.runs[BARE]
        out: dict[str, Any] = {
            "ratio_vs_bare": divided(rate(mine, "e2e"), rate(bare, "e2e")),
            "pg_cpu_vs_bare": divided(cpu_part(mine, "postgres"), cpu_part(bare, "postgres")),
        }
        for phase in ("enqueue", "drain"):
            out[f"{phase}_ratio_vs_bare"] = divided(rate(mine, phase), rate(bare, phase))
        for letter, name in self.sketch_names.items():
            sketch = self.runs.get(name)
            if sketch is not None:
                out[f"sketch_{letter}_ratio_vs_bare"] = divided(rate(sketch, "e2e"),
                                                                rate(bare, "e2e"))
                out[f"sketch_{letter}_pg_cpu_vs_bare"] = divided(pg_with_apart(sketch),
                                                                 cpu_part(bare, "postgres"))
        for prefix, batch_rows in FLOORS.values():
            floor = self.runs.get(TwoStoreFloor(batch_rows=batch_rows).name)
            if floor is not None:
                out[f"{prefix}_ratio_vs_bare"] = divided(rate(floor, "e2e"), rate(bare, "e2e"))
                out[f"{prefix}_pg_cpu_vs_bare"] = divided(pg_with_apart(floor),
                                                          cpu_part(bare, "postgres"))
        for name, runs in self.runs.items():
            out[name] = {
                **{f"{p}_per_s": rate(runs, p) for p in PHASES},
                "claim_ms_p50": claim_ms(runs, 50), "claim_ms_p99": claim_ms(runs, 99),
                "cpu_us_per_task": {part: cpu_part(runs, part)
                                    for part in ("client", "postgres", "valkey")},
                "tasks_per_pg_cpu_s": tasks_per_pg_cpu_second(runs),
                "pg_us_apart": median_of([r.pg_us_apart for r in runs]),
            }
        return out


def print_shape(result: ShapeResult) -> None:
    shape = result.shape
    say("")
    say(f"== {shape.name}: {shape.title}")
    rows = []
    for name, runs in result.runs.items():
        cpu = {part: cpu_part(runs, part) for part in ("client", "postgres", "valkey")}
        rows.append([name, *(fmt_rate(rate(runs, p)) for p in PHASES),
                     f"{fmt_num(claim_ms(runs, 50))}/{fmt_num(claim_ms(runs, 99))}",
                     fmt_cpu(cpu), fmt_rate(tasks_per_pg_cpu_second(runs)),
                     str(sum(r.left for r in runs)),
                     "; ".join(n for r in runs for n in r.notes)])
    print_table(["system", "enqueue/s", "drain/s", "end-to-end/s", "claim ms p50/p99",
                 "CPU us/task client/pg/valkey", "tasks per PG CPU-s", "left", "notes"], rows)
    f = result.figures()
    say(f"tierq / bare: end-to-end {fmt_ratio(f['ratio_vs_bare'])}, PostgreSQL CPU per task "
        f"{fmt_ratio(f['pg_cpu_vs_bare'])} (enqueue {fmt_ratio(f['enqueue_ratio_vs_bare'])}, "
        f"drain {fmt_ratio(f['drain_ratio_vs_bare'])})")
    for letter, name in result.sketch_names.items():
        if f"sketch_{letter}_ratio_vs_bare" in f:
            say(f"design {letter.upper()} sketch / bare: end-to-end "
                f"{fmt_ratio(f[f'sketch_{letter}_ratio_vs_bare'])}, PostgreSQL CPU per task "
                f"{fmt_ratio(f[f'sketch_{letter}_pg_cpu_vs_bare'])}"
                + (" (with its work after the phases)"
                   if f[name]["pg_us_apart"] is not None else ""))
    for kind, (prefix, batch_rows) in FLOORS.items():
        if f"{prefix}_ratio_vs_bare" in f:
            say(f"two-store floor ({kind}) / bare: end-to-end "
                f"{fmt_ratio(f[f'{prefix}_ratio_vs_bare'])}, PostgreSQL CPU per task "
                f"{fmt_ratio(f[f'{prefix}_pg_cpu_vs_bare'])}"
                + (" (with its sweep after the phases)"
                   if batch_rows and f[TwoStoreFloor(batch_rows=True).name]["pg_us_apart"]
                   is not None else ""))


def print_summary(results: list[ShapeResult]) -> None:
    rows = []
    for result in results:
        f = result.figures()
        mine, bare = f[TIERQ], f[BARE]
        rows.append([
            result.shape.name, fmt_rate(mine["e2e_per_s"]), fmt_rate(bare["e2e_per_s"]),
            fmt_ratio(f["ratio_vs_bare"]),
            f"{fmt_num(mine['cpu_us_per_task']['postgres'], 0)} / "
            f"{fmt_num(bare['cpu_us_per_task']['postgres'], 0)}",
            fmt_ratio(f["pg_cpu_vs_bare"]),
            f"{fmt_rate(mine['tasks_per_pg_cpu_s'])} / {fmt_rate(bare['tasks_per_pg_cpu_s'])}",
            f"{fmt_num(mine['claim_ms_p50'])}/{fmt_num(mine['claim_ms_p99'])}",
            f"{fmt_num(bare['claim_ms_p50'])}/{fmt_num(bare['claim_ms_p99'])}",
        ])
    print_table(["shape", "tierq e2e/s", "bare e2e/s", "ratio", "PG us/task tierq / bare",
                 "PG ratio", "tasks per PG CPU-s tierq / bare", "claim ms tierq",
                 "claim ms bare"], rows)


def run_shape(shape: Shape, stores: Stores, *, total: int, repeat: int, timeout: float,
              statements: bool, profile_root: Path | None,
              sketches: Sequence[str] = (), bare_client_us: float = 0.0,
              bare_custom_plans: bool = False, ack_claims: int = 1,
              tierq_settings: dict[str, Any] | None = None,
              sketch_settings: dict[str, Any] | None = None,
              ack_and_claim: bool = False, floors: Sequence[str] = ()) -> ShapeResult:
    systems: list[System] = [TierqEngine(workload=shape.workload),
                             BareTable(workload=shape.workload)]
    sketched = [SKETCHES[letter](sketch_settings, workload=shape.workload,
                                 named_settings=True) for letter in sketches]
    systems += sketched
    if bare_client_us:
        systems.append(BareTable(workload=shape.workload, client_us=bare_client_us))
    if bare_custom_plans:
        systems.append(BareTable(workload=shape.workload, custom_plans=True))
    if ack_claims > 1:
        systems.append(TierqEngine(tierq_settings, workload=shape.workload,
                                   ack_claims=ack_claims, named_settings=True))
    if tierq_settings:
        systems.append(TierqEngine(tierq_settings, workload=shape.workload,
                                   named_settings=True))
    if ack_and_claim:
        systems.append(TierqEngine(tierq_settings, workload=shape.workload,
                                   ack_and_claim=True, named_settings=True))
    systems += [TwoStoreFloor(workload=shape.workload, batch_rows=FLOORS[kind][1])
                for kind in floors]
    say(f"-- shape {shape.name}: {shape.title}")
    runs = alternate(systems, stores, workers=shape.workers, total=total, repeat=repeat,
                     timeout=timeout, statements=statements, detail=True,
                     by_role=profile_root is not None)  # (--breakdown)
    profiled: dict[str, tuple[Path, SystemRun]] = {}
    if profile_root is not None:
        for system in systems:
            where = profile_root / shape.name / system.name
            where.mkdir(parents=True, exist_ok=True)
            say(f"-- {system.name}, {shape.workers} worker process(es), profiled run "
                "(end-to-end only; its rates are not figures)")
            try:
                profiled[system.name] = (where, run_system(
                    system, stores, workers=shape.workers, total=total, timeout=timeout,
                    statements=statements, phases=("e2e",), profile_dir=where))
            except PhaseFailed as exc:
                say(f"  the profiled run of {system.name} failed: {exc}")
    return ShapeResult(shape, runs, profiled,
                       {letter: system.name for letter, system in zip(sketches, sketched,
                                                                      strict=True)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.vs_bare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=None,
                        help="tasks per phase (20000; 2000 with --quick)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="alternating runs of each system per shape (3; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="2,000 tasks, 1 run")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--breakdown", action="store_true",
                        help="also where a task's microseconds go (one more, profiled, run "
                             "of each system per shape)")
    parser.add_argument("--profile-dir", type=Path, default=None,
                        help="keep the profiles of --breakdown here (<shape>/<system>/"
                             "e2e-<role>.prof; default: a temporary directory)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per phase before a system is stopped (600; 60 --quick)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--sketch", action="append", nargs="?", const="a",
                        choices=list(SKETCHES), default=[],
                        help="also run a design's writes sketched into tierq's engine, "
                             "taking turns with the other two: a (design A, "
                             "bench/systems/hot_sketch.py; the default), b (design B, "
                             "bench/systems/log_sketch.py), c (design C, "
                             "bench/systems/batch_sketch.py) or d (design D, "
                             "bench/systems/append_sketch.py); repeat for several")
    parser.add_argument("--bare-client-us", type=float, default=0.0, metavar="N",
                        help="also run the bare table with clients spending N µs more CPU "
                             "per task (bench/systems/bare_table.py)")
    parser.add_argument("--bare-custom-plans", action="store_true",
                        help="also run the bare table with every statement planned for its "
                             "parameters (plan_cache_mode = force_custom_plan; "
                             "bench/systems/bare_table.py)")
    parser.add_argument("--ack-claims", type=int, default=1, metavar="N",
                        help="also run tierq's engine whose consumers ack N claims at once "
                             "(what acks of several workers committed together would cost "
                             "PostgreSQL), with --tierq-setting's settings")
    parser.add_argument("--tierq-setting", action="append", default=[],
                        metavar="FIELD=VALUE",
                        help="also run tierq's engine with this setting (a field of "
                             "tierq.config.Settings); repeat for several in that one system")
    parser.add_argument("--sketch-setting", action="append", default=[],
                        metavar="FIELD=VALUE",
                        help="run the sketches (--sketch) with this setting (a field of "
                             "tierq.config.Settings; repeat for several), named "
                             "<sketch>+<field>=<value>")
    parser.add_argument("--ack-and-claim", action="store_true",
                        help="also run tierq's engine whose consumers ack a batch and claim "
                             "the next in one call (Tierq.ack_and_claim)")
    parser.add_argument("--floor", action="append", nargs="?", const="rows",
                        choices=list(FLOORS), default=[],
                        help="also run the least any queue with PostgreSQL as its system of "
                             "record and Valkey as its dispatcher does per task "
                             "(bench/systems/two_store_floor.py), with a row per task "
                             "(rows, the default) or per enqueued batch (batches); repeat "
                             "for both")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    total = args.tasks or (2_000 if args.quick else 20_000)
    repeat = args.repeat or (1 if args.quick else 3)
    timeout = args.timeout or (60.0 if args.quick else 600.0)
    if total < 1 or repeat < 1:
        parser.error("--tasks and --repeat must be positive")
    if args.ack_claims < 1:
        parser.error(f"--ack-claims must be 1 or more, got {args.ack_claims}")
    if args.bare_client_us < 0:
        parser.error(f"--bare-client-us must be 0 or more, got {args.bare_client_us:g}")
    tierq_settings = parsed_settings(parser, args.tierq_setting)
    sketch_settings = parsed_settings(parser, args.sketch_setting, "--sketch-setting")
    if sketch_settings and not args.sketch:
        parser.error("--sketch-setting needs a sketch (--sketch)")
    shapes = [SHAPES[name] for name in SHAPES if name in args.shapes]
    sketches = list(dict.fromkeys(args.sketch))
    # one fork server for the systems' worker processes, holding their modules
    process_context(tuple(dict.fromkeys(
        TierqEngine.preload + BareTable.preload
        + (TwoStoreFloor.preload if args.floor else ())
        + tuple(m for letter in sketches for m in SKETCHES[letter].preload))))

    with tempfile.TemporaryDirectory(prefix="tierq-vs-bare-") as scratch:
        profile_root = None
        if args.breakdown:
            profile_root = args.profile_dir or Path(scratch)
        with opened_stores(args) as stores:
            statements = enable_pg_stat_statements(stores)
            info = machine_info(stores)
            print_machine(info)
            say(f"tierq vs the bare table: {total:,} no-op tasks per phase, {repeat} "
                f"alternating run(s) per system, shapes {[s.name for s in shapes]}; "
                f"statements counted by "
                f"{'pg_stat_statements' if statements else '(unavailable)'}")
            results = [run_shape(shape, stores, total=total, repeat=repeat, timeout=timeout,
                                 statements=statements, profile_root=profile_root,
                                 sketches=sketches, bare_client_us=args.bare_client_us,
                                 bare_custom_plans=args.bare_custom_plans,
                                 ack_claims=args.ack_claims,
                                 tierq_settings=tierq_settings,
                                 sketch_settings=sketch_settings,
                                 ack_and_claim=args.ack_and_claim,
                                 floors=list(dict.fromkeys(args.floor)))
                       for shape in shapes]
        for result in results:
            print_shape(result)
        say("")
        say(f"summary: rates in tasks/s (median of {repeat} run(s), {total:,} tasks per phase); "
            "CPU in microseconds per task of the end-to-end phase; tasks per PG CPU-s = "
            "10^6 / PostgreSQL us per task; claim ms p50/p99 over the end-to-end claims that "
            "returned tasks")
        print_summary(results)
        details = []
        if args.breakdown:
            for result in results:
                details.append(breakdown.report(result.shape.name, result.runs,
                                                result.profiled))
    write_json(args.json, {
        "machine": info, "tasks": total, "repeat": repeat,
        "shapes": {r.shape.name: {"title": r.shape.title, "workers": r.shape.workers,
                                  **r.figures()} for r in results},
        "runs": [run.summary() for r in results for runs in r.runs.values() for run in runs],
        "breakdown": details})
    lines = []
    for r in results:
        f = r.figures()
        for name, short in ((TIERQ, "tierq"), (BARE, "bare")):
            lines.append(f"claim_ms_p50_p99_{short}_{r.shape.name}="
                         f"{fmt_num(f[name]['claim_ms_p50'])}/{fmt_num(f[name]['claim_ms_p99'])}")
        for name, short in ((TIERQ, "tierq"), (BARE, "bare")):
            value = f[name]["tasks_per_pg_cpu_s"]
            lines.append(f"tasks_per_pg_cpu_s_{short}_{r.shape.name}="
                         + ("nan" if value is None else f"{value:.0f}"))
    for key in [f"sketch_{letter}_{figure}" for letter in SKETCHES
                for figure in ("ratio_vs_bare", "pg_cpu_vs_bare")]:
        for r in results:
            if key in r.figures():
                value = r.figures()[key]
                lines.append(f"{key}_{r.shape.name}="
                             + ("nan" if value is None else f"{value:.2f}"))
    for key in [f"{prefix}_{figure}" for prefix, _ in FLOORS.values()
                for figure in ("ratio_vs_bare", "pg_cpu_vs_bare")]:
        for r in results:
            if key in r.figures():
                value = r.figures()[key]
                lines.append(f"{key}_{r.shape.name}="
                             + ("nan" if value is None else f"{value:.2f}"))
    for key in ("ratio_vs_bare", "pg_cpu_vs_bare"):
        for r in results:
            value = r.figures()[key]
            lines.append(f"{key}_{r.shape.name}=" + ("nan" if value is None else f"{value:.2f}"))
    left = sum(run.left for r in results for runs in r.runs.values() for run in runs)
    if left:
        say(f"WARNING: {left} tasks were left unfinished")
    print_figures(*lines)
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
