"""Cron tick benchmark: what one pass of the cron tick costs against the number of schedules
there are, when only a few are due.

    .venv/bin/python -m bench.cron_tick            # 10k and 100k idle schedules, 10 repeats
    .venv/bin/python -m bench.cron_tick --quick    # 1k and 10k

For each size, a fresh database holds that many idle schedules (daily, spread over 1,000
tenants), each with one installed occurrence (a delayed task a day ahead and its ledger
row), written with one INSERT … SELECT FROM generate_series per table, plus ``--due``
schedules put through the engine that fire every minute. Each repeat moves the clock a
minute on and times one cron tick pass: it must visit exactly the due schedules and install
one occurrence for each (the benchmark fails otherwise); then a second pass, with nothing
due, is timed as the idle pass. Five unmeasured repeats come first (connections, prepared
statements). For comparison, the selection query the tick ran before migration 0016 (every
schedule, every occurrence) is timed on the same database. It prints, per size, the medians
of the repeats; the last line is ``cron_tick_ms_at_<largest size>_schedules=N``, the due
pass at the largest size, ``cron_tick_ms_at_100k_schedules`` by default (the target is at
most 50 ms).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.report import print_figures, print_machine, print_table, say, write_json
from bench.stores import Stores, add_store_arguments, machine_info, opened_stores

TENANTS = 1000  # idle schedules are spread over this many tenants
DUE_QUEUE = "cron-due"
WARM_UP = 5  # psycopg prepares a statement at its fifth run, as in a scheduled function
DAY_MS = 86_400_000

# The tick's selection before migration 0016 (tierq 2026-11-27), for comparison only: every
# enabled schedule, with an EXISTS over its occurrences, and every occurrence joined back.
PRE_0016_QUERY = """
SELECT s.tenant, s.name FROM tierq_schedules s
WHERE s.enabled
  AND (s.installed_hash IS DISTINCT FROM s.config_hash
       OR s.installed_through_ms IS NULL
       OR s.installed_through_ms - %(lookahead_ms)s <= %(now_ms)s
       OR EXISTS (SELECT 1 FROM tierq_schedule_occurrences o
                  WHERE o.tenant = s.tenant AND o.schedule = s.name
                    AND o.fire_at_ms <= %(now_ms)s))
UNION
SELECT o.tenant, o.schedule FROM tierq_schedule_occurrences o
LEFT JOIN tierq_schedules s ON s.tenant = o.tenant AND s.name = o.schedule
WHERE s.name IS NULL OR NOT s.enabled OR o.config_hash <> s.config_hash
ORDER BY 1, 2
"""


class SteppedClock:
    """Time that moves only when the benchmark moves it, from half a minute past a minute
    mark: each step of a minute passes exactly one instant of the due schedules, however
    long a pass takes."""

    def __init__(self) -> None:
        self.at = time.time() // 60 * 60 + 30

    def now(self) -> float:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += seconds


@dataclass
class Repeat:
    due_pass_ms: float
    idle_pass_ms: float
    visited: int
    installed: int
    pre_0016_query_ms: float


@dataclass
class SizeResult:
    schedules: int
    seed_seconds: float
    repeats: list[Repeat] = field(default_factory=list)

    def median(self, name: str) -> float:
        return statistics.median(getattr(r, name) for r in self.repeats)


def label(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 and n >= 1000 else str(n)


def seed_idle_schedules(url: str, n: int, now_ms: int) -> float:
    """``n`` daily schedules, installed, next due a day from ``now_ms``, each with one
    occurrence installed (a delayed task and its ledger row)."""
    started = time.perf_counter()
    fire = now_ms + DAY_MS
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tierq_schedules (name, queue, tenant, payload, every_ms, config_hash,"
            " installed_hash, installed_through_ms, tick_at_ms, last_tick_at, created_at,"
            " updated_at)"
            " SELECT 'idle-' || g, 'idle-q', 'tenant-' || (g %% %(tenants)s), '{\"n\": 1}',"
            " %(day)s, 'h' || g, 'h' || g, %(fire)s, %(fire)s, now(), now(), now()"
            " FROM generate_series(0, %(n)s - 1) AS g",
            {"tenants": TENANTS, "day": DAY_MS, "fire": fire, "n": n})
        conn.execute(
            "WITH v AS (SELECT g, gen_random_uuid() AS id FROM generate_series(0, %(n)s - 1)"
            "           AS g),"
            " t AS (INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state,"
            "       run_at, run_at_initially, max_attempts, seq, created_at, state_since)"
            "       SELECT id, 'idle-q', 'tenant-' || (g %% %(tenants)s),"
            "              'idle-' || g || '/h' || g || '/' || %(fire)s, 0, '{\"n\": 1}',"
            "              'delayed', to_timestamp(%(fire)s / 1000.0),"
            "              to_timestamp(%(fire)s / 1000.0), 5, nextval('tierq_task_seq'),"
            "              now(), now() FROM v)"
            " INSERT INTO tierq_schedule_occurrences (schedule, config_hash, fire_at_ms,"
            "                                         task_id, queue, tenant)"
            " SELECT 'idle-' || g, 'h' || g, %(fire)s, id, 'idle-q',"
            "        'tenant-' || (g %% %(tenants)s) FROM v",
            {"tenants": TENANTS, "fire": fire, "n": n})
        conn.execute("ANALYZE tierq_schedules, tierq_schedule_occurrences, tierq_tasks")
    return time.perf_counter() - started


def time_pre_0016_query(url: str, now_ms: int, lookahead_ms: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(PRE_0016_QUERY, {"now_ms": now_ms, "lookahead_ms": lookahead_ms}
                     ).fetchall()
        return (time.perf_counter() - started) * 1000


def one_repeat(tq: Any, url: str, due: int) -> Repeat:
    from tierq.logic import schedules
    from tierq.logic.context import to_ms
    from tierq.maintenance import cron_tick

    tq.ctx.clock.advance(60.0)
    started = time.perf_counter()
    summary = cron_tick.run(tq.ctx)
    due_pass_ms = (time.perf_counter() - started) * 1000
    if (summary.schedules, summary.failed, summary.busy) != (due, [], 0) \
            or summary.installed != due:
        raise RuntimeError(f"the pass visited {summary.schedules} schedule(s) and installed "
                           f"{summary.installed} (failed {summary.failed}, busy "
                           f"{summary.busy}); expected {due} and {due}")
    started = time.perf_counter()
    idle = cron_tick.run(tq.ctx)
    idle_pass_ms = (time.perf_counter() - started) * 1000
    if idle.schedules:
        raise RuntimeError(f"a pass with nothing due visited {idle.schedules} schedule(s)")
    old_ms = time_pre_0016_query(url, to_ms(tq.ctx.now()), schedules.lookahead_ms(tq.ctx))
    return Repeat(due_pass_ms, idle_pass_ms, summary.schedules, summary.installed, old_ms)


def run_size(stores: Stores, n: int, due: int, repeats: int) -> SizeResult:
    from tierq.config import Settings
    from tierq.engine import Tierq
    from tierq.logic.context import to_ms

    url = stores.fresh_tierq("bench_cron")
    try:
        settings = Settings(database_url=url, valkey_url=stores.valkey_url)
        tq = Tierq(settings=settings, clock=SteppedClock())
        try:
            seconds = seed_idle_schedules(url, n, to_ms(tq.ctx.now()))
            say(f"  seeded {n:,} idle schedules (and {n:,} occurrences) in {seconds:.2f}s")
            for i in range(due):
                tq.put_schedule(f"due-{i}", {"queue": DUE_QUEUE, "payload": {"i": i},
                                             "every_seconds": 60})
            result = SizeResult(n, seconds)
            for _ in range(WARM_UP):
                one_repeat(tq, url, due)
            for i in range(repeats):
                r = one_repeat(tq, url, due)
                result.repeats.append(r)
                say(f"  repeat {i + 1}/{repeats}: due pass {r.due_pass_ms:.1f} ms "
                    f"({r.visited} visited, {r.installed} installed), idle pass "
                    f"{r.idle_pass_ms:.1f} ms; pre-0016 selection query "
                    f"{r.pre_0016_query_ms:.1f} ms")
        finally:
            tq.close()
        return result
    finally:
        stores.drop_database(url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cron_tick", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="idle schedules per run (10000 100000)")
    parser.add_argument("--due", type=int, default=5,
                        help="schedules due at each pass, put through the engine (5)")
    parser.add_argument("--repeat", type=int, default=10,
                        help="measured passes per size; medians are reported (10)")
    parser.add_argument("--quick", action="store_true", help="sizes 1000 and 10000")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    sizes = args.sizes or ([1_000, 10_000] if args.quick else [10_000, 100_000])
    if any(n < 1 for n in sizes) or args.repeat < 1 or args.due < 1:
        parser.error("--sizes, --due and --repeat must be positive")
    sizes = sorted(sizes)

    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        say(f"cron tick bench: idle schedules {[label(n) for n in sizes]}, plus {args.due} "
            f"due at each pass; {args.repeat} measured repeat(s) per size (after {WARM_UP} "
            f"warm-up passes), medians reported")
        results = []
        for n in sizes:
            say(f"-- {n:,} idle schedules")
            results.append(run_size(stores, n, args.due, args.repeat))
        say("")
        say("one pass, medians (ms): with the due schedules, with nothing due; the selection "
            "query of before migration 0016 on the same database")
        print_table(
            ["idle schedules", "due pass ms", "idle pass ms", "visited", "installed",
             "pre-0016 query ms", "seed s"],
            [[f"{r.schedules:,}", f"{r.median('due_pass_ms'):.1f}",
              f"{r.median('idle_pass_ms'):.1f}", f"{r.median('visited'):.0f}",
              f"{r.median('installed'):.0f}", f"{r.median('pre_0016_query_ms'):.1f}",
              f"{r.seed_seconds:.2f}"]
             for r in results])
        write_json(args.json, {
            "machine": info, "repeat": args.repeat, "due": args.due,
            "sizes": [{"schedules": r.schedules, "seed_seconds": r.seed_seconds,
                       "due_pass_ms": r.median("due_pass_ms"),
                       "idle_pass_ms": r.median("idle_pass_ms"),
                       "pre_0016_query_ms": r.median("pre_0016_query_ms"),
                       "repeats": [asdict(x) for x in r.repeats]} for r in results],
        })
        largest = results[-1]
        print_figures(f"cron_tick_ms_at_{label(largest.schedules)}_schedules="
                      f"{largest.median('due_pass_ms'):.0f}")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
