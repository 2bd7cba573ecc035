"""PostgreSQL's work a task with batch rows (``TIERQ_BATCH_ROWS``) on and off, by the size
of an enqueue: from which size on a batch row costs less than a row per task.

    .venv/bin/python -m bench.batch_row_size                  # sizes 1 to 64, 5 rounds
    .venv/bin/python -m bench.batch_row_size --sizes 1 8 --rounds 1 --tasks 200

One process, one ``Tierq`` engine per layout on one fresh, migrated database and one Valkey:
*rows* (``batch_rows=False``: a row of ``tierq_tasks`` per task, deleted by its ack) and
*batch rows* (``batch_rows=True``, ``batch_rows_min=1``: an enqueue's tasks, however few, in
one row of ``tierq_batches``, a plain ack appending an end, the reaper's sweep deleting the
batch row with its ends and pairs' rows). For each round, each enqueue size n and each
layout in turn (the layout that goes first changes every round), one cycle of ``--tasks``
tasks runs on a queue of its own:

1. *enqueue*: enqueues of n tasks each (``{"payload": {"i": i}}``);
2. *ack*: claims of up to 100 (leases of 300 s), each acked whole (``tq.ack(queue, tasks)``);
3. *sweep*: reaper passes (``tq.run_reaper()``) until the batch sweep has deleted every
   batch row of the cycle (one pass for rows, which has none);
4. *vacuum*: ``VACUUM`` of every tierq table.

Between the steps the tables are checked (``Cycle.check``): after the enqueue the queue's
tasks are rows of ``tierq_tasks`` and no batch row, or batch rows and no row, as the layout
says; after the acks every task is gone or ended by a plain ack; after the sweep no batch
row, end or pair's row is left. A check that fails stops the benchmark.

What is measured per step: PostgreSQL's CPU, the sum over every process of the server (the
postmaster and its children: the database's backends, the walwriter, the checkpointer and
background writer; ``PgProcesses`` of bench/measure.py, which samples each child's
``/proc/<pid>/schedstat`` every 20 ms, a process born during the step from zero). Autovacuum
is off on the tierq tables: the cycle's own ``VACUUM`` (step 4) cleans what the cycle left
dead. Otherwise an autovacuum worker would fall into whichever step, and layout, was running
when it woke. WAL bytes are ``pg_current_wal_insert_lsn()`` before and after the step (the
whole server). Private servers (the default) run nothing else. On given servers
(``--database-url``) the postmaster is the parent of the benchmark's backend in ``/proc``
(the server must run on this machine), and whatever else that server does is counted too.

A warm-up cycle of each layout (8 tasks an enqueue) runs first and is not counted. The
table gives medians over the rounds, in microseconds a task: each step's median and the
median of each round's total; then batch rows ÷ rows of the totals, of CPU and of WAL, and
the least and most of the rounds' own CPU ratios (how far one round is from the next). The
last lines are ``batch_vs_rows_n<size>=X.XX`` (CPU, batch rows ÷ rows) for each size and
``smallest_batch_row_that_pays=N``: the smallest size from which on every size measured
has a ratio below 1.00 as printed (``none`` when the largest has not).
"""

from __future__ import annotations

import argparse
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from bench.measure import PG_KINDS, PgProcesses, percentile
from bench.report import print_figures, print_machine, print_table, say, write_json
from bench.stores import Stores, add_store_arguments, machine_info, opened_stores

if TYPE_CHECKING:
    from tierq import Tierq

SIZES = (1, 2, 4, 8, 16, 32, 64)
LAYOUTS = {"rows": False, "batch rows": True}  # name: Settings.batch_rows
STEPS = ("enqueue", "ack", "sweep", "vacuum")
CLAIM_MAX = 100
LEASE_SECONDS = 300
MAX_ENQUEUE = 500  # the most tasks one enqueue takes
MAX_REAPER_PASSES = 50  # a sweep that needs more has stalled: the benchmark stops
WARM_UP_SIZE, WARM_UP_TASKS = 8, 200
TABLES = """
    SELECT tablename FROM pg_tables
    WHERE schemaname = current_schema() AND tablename LIKE 'tierq\\_%'
    ORDER BY tablename"""
COUNTS = """
    SELECT (SELECT count(*) FROM tierq_tasks WHERE queue = %(queue)s),
           (SELECT count(*) FROM tierq_batches WHERE queue = %(queue)s),
           (SELECT coalesce(sum(tasks), 0) FROM tierq_batches WHERE queue = %(queue)s)"""
# the places of the queue's batch rows that have an end, each once, and how many of those
# ends a move out wrote (a plain ack writes none)
ENDED = """
    SELECT count(DISTINCT (e.batch, p)), count(*) FILTER (WHERE e.moved)
    FROM tierq_batch_ends e JOIN tierq_batches b ON b.id = e.batch, unnest(e.places) AS p
    WHERE b.queue = %(queue)s"""
LEFT_AFTER_SWEEP = """
    SELECT (SELECT count(*) FROM tierq_batches), (SELECT count(*) FROM tierq_batch_ends),
           (SELECT count(*) FROM tierq_batch_pairs WHERE queue = %(queue)s),
           (SELECT count(*) FROM tierq_tasks WHERE queue = %(queue)s)"""


@dataclass
class Step:
    """What one step of one cycle cost PostgreSQL, per task: CPU microseconds by process
    kind (``PG_KINDS``) and WAL bytes; and its wall time in seconds."""

    us_by_kind: dict[str, float]
    wal_bytes: float
    seconds: float

    @property
    def us(self) -> float:
        return sum(self.us_by_kind.values())

    def as_json(self) -> dict[str, Any]:
        return {"pg_us": self.us, "pg_us_by_kind": self.us_by_kind,
                "wal_bytes": self.wal_bytes, "seconds": self.seconds}


def postmaster_of(stores: Stores, conn: psycopg.Connection[Any]) -> int | None:
    """The postmaster's pid: the private server's, else the parent of ``conn``'s backend
    when that is a process of this machine; None when it cannot be read."""
    if stores.private and stores.services is not None:
        pid = stores.services.postgres.pid  # type: ignore[attr-defined]
        if pid:
            return int(pid)
    backend = conn.info.backend_pid
    try:
        title = Path(f"/proc/{backend}/cmdline").read_bytes()
        parent = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
        parent_title = Path(f"/proc/{parent}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    if not title.startswith(b"postgres:") or b"postgres" not in parent_title:
        return None  # (a pid of this machine that is not the server's backend)
    return parent


def engine(url: str, valkey_url: str, batch_rows: bool) -> Tierq:
    """An engine as bench/systems/tierq_engine.py builds one, ready as a long-running
    worker is (its scripts registered, both servers connected)."""
    from bench.systems import quiet_logs
    from bench.systems.tierq_engine import tierq_engine

    quiet_logs()
    tq = tierq_engine({"database_url": url, "valkey_url": valkey_url,
                       "settings": {"batch_rows": batch_rows, "batch_rows_min": 1}})
    tq.warm.ping()
    tq.warm_up()
    return tq


class Cycle:
    """The database, the two engines and the measurement of a step."""

    def __init__(self, stores: Stores, url: str) -> None:
        from tierq.dal.migrate import migrate

        migrate(url)
        if stores.private:
            stores.clear_valkey()
        self.database = urlsplit(url).path.lstrip("/")
        self.conn = psycopg.connect(url, autocommit=True)
        self.tables = [str(name) for (name,) in self.conn.execute(TABLES).fetchall()]
        for table in self.tables:
            self.conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(
                sql.Identifier(table)))
        postmaster = postmaster_of(stores, self.conn)
        if postmaster is None:
            raise SystemExit("bench.batch_row_size reads the PostgreSQL server's processes "
                             "in /proc: run it on the server's machine (private servers, "
                             "the default, are)")
        self.postmaster = postmaster
        self.engines = {name: engine(url, stores.valkey_url, on)
                        for name, on in LAYOUTS.items()}
        self.run_tag = uuid.uuid4().hex[:6]  # (queues of an earlier run on a given Valkey)

    def close(self) -> None:
        for tq in self.engines.values():
            tq.close()
        self.conn.close()

    def wal_lsn(self) -> int:
        row = self.conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"
                                ).fetchone()
        assert row is not None
        return int(row[0])

    def measured(self, tasks: int, work: Callable[[], Any]) -> tuple[Any, Step]:
        """``work()`` with PostgreSQL's CPU and WAL around it: (what it returned, the step
        per task)."""
        wal = self.wal_lsn()
        sampler = PgProcesses(self.postmaster, self.database).start()
        sampler.mark()
        began = time.perf_counter()
        try:
            out = work()
        finally:
            seconds = time.perf_counter() - began
            sampler.stop()
        wal = self.wal_lsn() - wal
        by_kind = {kind: s * 1e6 / tasks for kind, s in sampler.seconds_by_kind().items()}
        return out, Step(by_kind, wal / tasks, seconds)

    def check(self, layout: str, queue: str, after: str, expected: tuple[int, ...],
              query: str) -> None:
        """Stop the benchmark unless ``query`` finds ``expected`` for ``queue``."""
        row = self.conn.execute(query, {"queue": queue}).fetchone()
        found = tuple(int(v) for v in row) if row is not None else ()
        if found != expected:
            raise RuntimeError(f"{layout}, queue {queue}, after the {after}: expected "
                               f"{expected}, found {found} ({' '.join(query.split())})")

    def run(self, layout: str, size: int, tasks: int, queue: str, label: str
            ) -> dict[str, Any]:
        """One cycle of ``tasks`` tasks of ``layout`` in enqueues of ``size``, each step
        measured and checked; printed under ``label``."""
        from tierq import ClaimRequest

        tq = self.engines[layout]
        batched = LAYOUTS[layout]
        enqueues = math.ceil(tasks / size)
        tq.queue_settings(queue)  # (its settings read and cached before the clock)
        steps: dict[str, Step] = {}

        def enqueue() -> None:
            for lo in range(0, tasks, size):
                tq.enqueue(queue, [{"payload": {"i": i}}
                                   for i in range(lo, min(lo + size, tasks))])

        _, steps["enqueue"] = self.measured(tasks, enqueue)
        self.check(layout, queue, "enqueue", (0, enqueues, tasks) if batched
                   else (tasks, 0, 0), COUNTS)
        say(f"{label} enqueue: {enqueues:,} calls in {steps['enqueue'].seconds:.2f} s, "
            f"{describe(steps['enqueue'])}")

        def claim_and_ack() -> tuple[int, int]:
            request = ClaimRequest(max=CLAIM_MAX, lease_seconds=LEASE_SECONDS)
            acked = claims = 0
            while acked < tasks:
                got = tq.claim(queue, request)
                if not got:
                    break
                claims += 1
                result = tq.ack(queue, got)
                if result.rejected:
                    raise RuntimeError(f"{layout}, queue {queue}: acks refused: "
                                       f"{result.rejected[:3]}")
                acked += len(result.acked)
            return acked, claims

        (acked, claims), steps["ack"] = self.measured(tasks, claim_and_ack)
        if acked != tasks:
            raise RuntimeError(f"{layout}, queue {queue}: {acked} of {tasks} tasks acked")
        self.check(layout, queue, "acks", (0, enqueues, tasks) if batched else (0, 0, 0),
                   COUNTS)
        if batched:  # (every member ended by its plain ack, none moved out)
            self.check(layout, queue, "acks", (tasks, 0), ENDED)
        say(f"{label} ack: {claims} claims in {steps['ack'].seconds:.2f} s, "
            f"{describe(steps['ack'])}")

        def sweep() -> tuple[int, int]:
            swept = passes = 0
            while True:
                summary = tq.run_reaper()
                passes += 1
                swept += summary.batch_tasks_swept
                if swept >= (tasks if batched else 0):
                    return passes, swept
                if passes >= MAX_REAPER_PASSES:
                    raise RuntimeError(f"{layout}, queue {queue}: {passes} reaper passes "
                                       f"swept {swept} of {tasks} tasks' batch rows")

        (passes, swept), steps["sweep"] = self.measured(tasks, sweep)
        self.check(layout, queue, "sweep", (0, 0, 0, 0), LEFT_AFTER_SWEEP)
        say(f"{label} sweep: {passes} reaper pass{'es' if passes > 1 else ''}, "
            f"{swept:,} tasks' batch rows swept in {steps['sweep'].seconds:.2f} s, "
            f"{describe(steps['sweep'])}")

        def vacuum() -> None:
            self.conn.execute(sql.SQL("VACUUM {}").format(
                sql.SQL(", ").join(map(sql.Identifier, self.tables))))

        _, steps["vacuum"] = self.measured(tasks, vacuum)
        say(f"{label} vacuum: {len(self.tables)} tables in "
            f"{steps['vacuum'].seconds:.2f} s, {describe(steps['vacuum'])}")
        return {"layout": layout, "size": size, "queue": queue, "tasks": tasks,
                "enqueues": enqueues, "claims": claims, "reaper_passes": passes,
                "steps": {name: step.as_json() for name, step in steps.items()}}


def spread(ratios: Sequence[float]) -> str:
    """The least and the most of the rounds' ratios."""
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def describe(step: Step) -> str:
    return (f"PostgreSQL {step.us:.1f} us a task (backends "
            f"{step.us_by_kind['backends']:.1f}), WAL {step.wal_bytes:,.0f} B a task")


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def summarise(cycles: list[dict[str, Any]], sizes: Sequence[int]) -> dict[str, Any]:
    """Medians over the rounds per size and layout: each step's CPU and WAL a task, each
    round's total, the totals by process kind; and the ratios of the totals."""
    out: dict[str, Any] = {}
    for size in sizes:
        per: dict[str, Any] = {}
        for layout in LAYOUTS:
            mine = [c for c in cycles if c["size"] == size and c["layout"] == layout]
            per[layout] = {
                "pg_us": {s: median([c["steps"][s]["pg_us"] for c in mine]) for s in STEPS},
                "wal_bytes": {s: median([c["steps"][s]["wal_bytes"] for c in mine])
                              for s in STEPS},
                "pg_us_total": median([sum(c["steps"][s]["pg_us"] for s in STEPS)
                                       for c in mine]),
                "wal_bytes_total": median([sum(c["steps"][s]["wal_bytes"] for s in STEPS)
                                           for c in mine]),
                "pg_us_total_by_kind": {k: median([sum(c["steps"][s]["pg_us_by_kind"][k]
                                                       for s in STEPS) for c in mine])
                                        for k in PG_KINDS},
                "rounds": len(mine)}
        rows, batch = per["rows"], per["batch rows"]
        per["batch_vs_rows"] = batch["pg_us_total"] / rows["pg_us_total"]
        per["batch_vs_rows_by_round"] = round_ratios(
            [c for c in cycles if c["size"] == size])
        per["batch_vs_rows_wal"] = batch["wal_bytes_total"] / rows["wal_bytes_total"]
        out[str(size)] = per
    return out


def round_ratios(cycles: list[dict[str, Any]]) -> list[float]:
    """Each round's total CPU a task of batch rows ÷ that of rows, in round order."""
    totals: dict[int, dict[str, float]] = {}
    for c in cycles:
        totals.setdefault(c["round"], {})[c["layout"]] = sum(
            c["steps"][s]["pg_us"] for s in STEPS)
    return [t["batch rows"] / t["rows"] for _, t in sorted(totals.items())]


def smallest_that_pays(ratios: dict[int, float]) -> int | None:
    """The smallest size from which on every size has a ratio below 1.00 as printed (two
    decimals: 0.996 is 1.00, not a gain); None when not even the largest has."""
    pays = None
    for size in sorted(ratios, reverse=True):
        if round(ratios[size], 2) >= 1.0:
            break
        pays = size
    return pays


def print_results(summary: dict[str, Any], sizes: Sequence[int], rounds: int,
                  tasks: int) -> None:
    def cell(figures: dict[str, Any]) -> str:
        return " / ".join(f"{figures['pg_us'][s]:.1f}" for s in STEPS) + \
            f" = {figures['pg_us_total']:.1f}"

    say("")
    say(f"PostgreSQL CPU and WAL a task, {tasks:,} tasks a cycle, medians of {rounds} "
        f"round{'s' if rounds > 1 else ''} (total: the median of each round's sum)")
    head = " / ".join(STEPS) + " = total us"
    print_table(["n", f"rows: {head}", "WAL B", f"batch rows: {head}", "WAL B",
                 "batch / rows CPU", "rounds' CPU", "WAL"],
                [[str(n), cell(summary[str(n)]["rows"]),
                  f"{summary[str(n)]['rows']['wal_bytes_total']:,.0f}",
                  cell(summary[str(n)]["batch rows"]),
                  f"{summary[str(n)]['batch rows']['wal_bytes_total']:,.0f}",
                  f"{summary[str(n)]['batch_vs_rows']:.2f}",
                  spread(summary[str(n)]["batch_vs_rows_by_round"]),
                  f"{summary[str(n)]['batch_vs_rows_wal']:.2f}"] for n in sizes])
    say("")
    say("the totals by PostgreSQL process, us a task (medians)")
    print_table(["n", "layout", *PG_KINDS],
                [[str(n), layout, *(f"{summary[str(n)][layout]['pg_us_total_by_kind'][k]:.1f}"
                                    for k in PG_KINDS)]
                 for n in sizes for layout in LAYOUTS])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_row_size", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                        help="tasks an enqueue (1 2 4 8 16 32 64)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    parser.add_argument("--tasks", type=int, default=2_000,
                        help="tasks a cycle of one size and layout (2000)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    sizes = sorted(set(args.sizes))
    if args.rounds < 1 or args.tasks < 1:
        parser.error("--rounds and --tasks must be positive")
    if not all(1 <= n <= MAX_ENQUEUE for n in sizes):
        parser.error(f"--sizes must be 1 to {MAX_ENQUEUE}")
    began = time.monotonic()
    cycles: list[dict[str, Any]] = []
    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        bench = Cycle(stores, stores.fresh_database("batch_row_size"))
        try:
            for layout in LAYOUTS:
                bench.run(layout, WARM_UP_SIZE, WARM_UP_TASKS,
                          f"brs{bench.run_tag}_warm_{layout.replace(' ', '_')}",
                          f"[warm-up, n={WARM_UP_SIZE}, {layout}]")
            for r in range(args.rounds):
                order = list(LAYOUTS) if r % 2 == 0 else list(reversed(LAYOUTS))
                for size in sizes:
                    for layout in order:
                        queue = f"brs{bench.run_tag}_r{r}_n{size}_{layout.replace(' ', '_')}"
                        cycle = bench.run(layout, size, args.tasks, queue,
                                          f"[round {r + 1}/{args.rounds}, n={size}, {layout}]")
                        cycles.append({"round": r, **cycle})
        finally:
            bench.close()
    summary = summarise(cycles, sizes)
    print_results(summary, sizes, args.rounds, args.tasks)
    ratios = {n: float(summary[str(n)]["batch_vs_rows"]) for n in sizes}
    pays = smallest_that_pays(ratios)
    seconds = time.monotonic() - began
    say(f"wall time: {seconds:.0f} s")
    write_json(args.json, {"machine": info, "sizes": sizes, "rounds": args.rounds,
                           "tasks": args.tasks, "seconds": seconds, "cycles": cycles,
                           "medians": summary, "batch_vs_rows": ratios,
                           "smallest_batch_row_that_pays": pays})
    print_figures(*[f"batch_vs_rows_n{n}={ratios[n]:.2f}" for n in sizes],
                  f"smallest_batch_row_that_pays={'none' if pays is None else pays}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
