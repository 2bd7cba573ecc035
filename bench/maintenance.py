"""Maintenance benchmark: what one pass of the reaper and of the cold -> warm mover, and one
round of the reaper's queue gauges, cost against the number of (queue, tenant) pairs ever
seen.

    .venv/bin/python -m bench.maintenance            # 1k, 10k and 100k idle pairs, 5 repeats
    .venv/bin/python -m bench.maintenance --quick    # 1k and 10k

For each size, a fresh database holds that many registered pairs that are idle but within
the pair retention: no row of theirs is left, and none is due to be forgotten. One INSERT …
SELECT FROM generate_series writes them. Beside them are two live pairs: one whose only
lease has expired, and one with cold work waiting (in cold mode, with room in the warm set).
Each repeat times one reaper pass and one cold -> warm pass. Each must reap that lease and
promote that work (the benchmark fails otherwise), and the live state is made again before
the next repeat; five unmeasured repeats come first (connections, Lua scripts, prepared
statements). Right after the reaper pass, as in the reaper's scheduled tick when the
minute's gauges are due, a round of the queue gauges is timed on its own: it must gauge
the two live queues and no idle one (its blobs are counted, not printed). It prints, per
size, the medians of the repeats: the milliseconds of each pass, the pairs each visited
and the registry rows the reaper's forget walk read. The last two lines are
``idle_gauge_ms_at_<largest size>=N`` (the gauge round) and
``idle_pass_ms_at_<largest size>=N``: the two passes together at the largest size,
``idle_pass_ms_at_100k`` by default (the target is at most 200 ms).
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

LEASE_QUEUE = "live-lease"
COLD_QUEUE = "live-cold"
TENANTS = 1000  # idle pairs are spread over this many tenants (the per-tenant cap's default)
COLD_TASKS = 8
WARM_MAX_AT_ENQUEUE = 4  # half the cold queue's tasks go cold
# passes before the measured ones: psycopg prepares a statement at its fifth run, as it does
# in a scheduled function after its first ticks
WARM_UP = 5


@dataclass
class Repeat:
    reaper_ms: float
    cold_to_warm_ms: float
    reaper_pairs: int
    cold_to_warm_pairs: int
    expired: int
    promoted: int
    forget_rows: int
    gauge_ms: float
    gauged_queues: int


@dataclass
class SizeResult:
    pairs: int
    seed_seconds: float
    repeats: list[Repeat] = field(default_factory=list)

    def median(self, name: str) -> float:
        return statistics.median(getattr(r, name) for r in self.repeats)

    @property
    def idle_pass_ms(self) -> float:
        return statistics.median(r.reaper_ms + r.cold_to_warm_ms for r in self.repeats)

    @property
    def idle_gauge_ms(self) -> float:
        return self.median("gauge_ms")


def label(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 and n >= 1000 else str(n)


def seed_idle_pairs(url: str, n: int) -> float:
    """``n`` registered pairs without any row, seen now (within the retention)."""
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO tierq_queue_tenants (queue, tenant, created_at, last_seen)"
                     " SELECT 'idle-' || (g / %s), 'tenant-' || (g %% %s),"
                     " now() - interval '1 day', now()"
                     " FROM generate_series(0, %s - 1) AS g", (TENANTS, TENANTS, n))
        conn.execute("ANALYZE tierq_queue_tenants")
    return time.perf_counter() - started


def make_live_work(tq: Any) -> None:
    """A lease that has expired (the clock is moved past it) and cold work with room.

    Both queues are configured, so the gauge round emits each under its own name (a queue
    nobody configured is summed into ``~other``)."""
    tq.put_queue(LEASE_QUEUE, {"lease_seconds": 30})
    tq.enqueue(LEASE_QUEUE, [{"payload": {"live": "lease"}}])
    leased = tq.claim(LEASE_QUEUE, max=1, lease_seconds=1)
    if len(leased) != 1:
        raise RuntimeError(f"expected to lease one task of {LEASE_QUEUE}, got {len(leased)}")
    tq.put_queue(COLD_QUEUE, {"warm_max": WARM_MAX_AT_ENQUEUE})
    tq.enqueue(COLD_QUEUE, [{"payload": {"live": "cold", "i": i}} for i in range(COLD_TASKS)])
    tq.put_queue(COLD_QUEUE, {"warm_max": 1000})
    tq.ctx.clock.advance(2.0)


def clear_live_work(tq: Any) -> None:
    """Take every task of the live queues (so the next repeat starts them afresh)."""
    tq.run_delayed_mover()
    for queue in (LEASE_QUEUE, COLD_QUEUE):
        while tasks := tq.claim(queue, max=100):
            tq.ack(queue, tasks)


def one_repeat(tq: Any) -> Repeat:
    from tierq.maintenance import cold_to_warm, gauges, reaper

    make_live_work(tq)
    started = time.perf_counter()
    reaped = reaper.run(tq.ctx)
    reaper_ms = (time.perf_counter() - started) * 1000
    gauged: list[str] = []
    started = time.perf_counter()
    round_ = gauges.run(tq.ctx, gauges.GaugeRound(), lambda queue, _: gauged.append(queue),
                        now=tq.ctx.now())
    gauge_ms = (time.perf_counter() - started) * 1000
    if sorted(gauged) != sorted([LEASE_QUEUE, COLD_QUEUE]) or not round_.completed:
        raise RuntimeError(f"the gauge round gauged {gauged[:5]} (completed: "
                           f"{round_.completed}), expected the two live queues")
    started = time.perf_counter()
    moved = cold_to_warm.run(tq.ctx)
    cold_to_warm_ms = (time.perf_counter() - started) * 1000
    if reaped.expired != 1:
        raise RuntimeError(f"the reaper pass expired {reaped.expired} leases, expected 1")
    if moved.promoted < 1:
        raise RuntimeError("the cold -> warm pass promoted nothing of the cold work")
    if reaped.forgotten:
        raise RuntimeError(f"pairs within the retention were forgotten: {reaped.forgotten[:5]}")
    clear_live_work(tq)
    return Repeat(reaper_ms, cold_to_warm_ms, reaped.pairs, moved.pairs, reaped.expired,
                  moved.promoted, reaper.ReaperConfig().forget_slice, gauge_ms, len(gauged))


def run_size(stores: Stores, n: int, repeats: int) -> SizeResult:
    from tierq.config import Settings
    from tierq.engine import Tierq
    from tierq.logic.context import OffsetClock

    url = stores.fresh_tierq("bench_maint")
    try:
        seconds = seed_idle_pairs(url, n)
        say(f"  seeded {n:,} idle pairs in {seconds:.2f}s")
        result = SizeResult(n, seconds)
        settings = Settings(database_url=url, valkey_url=stores.valkey_url)
        tq = Tierq(settings=settings, clock=OffsetClock())
        try:
            for _ in range(WARM_UP):  # connections, scripts, prepared statements
                one_repeat(tq)
            for i in range(repeats):
                r = one_repeat(tq)
                result.repeats.append(r)
                say(f"  repeat {i + 1}/{repeats}: reaper {r.reaper_ms:.1f} ms "
                    f"({r.reaper_pairs} pair(s) visited, {r.expired} lease reaped), "
                    f"cold -> warm {r.cold_to_warm_ms:.1f} ms ({r.cold_to_warm_pairs} pair(s) "
                    f"visited, {r.promoted} promoted), gauges {r.gauge_ms:.1f} ms "
                    f"({r.gauged_queues} queue(s) gauged)")
        finally:
            tq.close()
        return result
    finally:
        stores.drop_database(url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.maintenance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="idle pairs per run (1000 10000 100000)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="measured passes per size; medians are reported (5)")
    parser.add_argument("--quick", action="store_true", help="sizes 1000 and 10000")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    sizes = args.sizes or ([1_000, 10_000] if args.quick else [1_000, 10_000, 100_000])
    if any(n < 1 for n in sizes) or args.repeat < 1:
        parser.error("--sizes and --repeat must be positive")
    sizes = sorted(sizes)

    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        say(f"maintenance bench: idle pairs {[label(n) for n in sizes]}, plus one expired "
            f"lease and one queue with cold work; {args.repeat} measured repeat(s) per size "
            f"(after {WARM_UP} warm-up passes), medians reported")
        results = []
        for n in sizes:
            say(f"-- {n:,} idle pairs")
            results.append(run_size(stores, n, args.repeat))
        say("")
        say("one pass each, medians (ms); pairs visited; registry rows read by the forget walk;"
            " one round of the queue gauges (ms) and the queues it gauged")
        print_table(
            ["idle pairs", "reaper ms", "cold -> warm ms", "both ms", "reaper pairs visited",
             "cold -> warm pairs visited", "forget rows read", "gauges ms", "queues gauged",
             "seed s"],
            [[f"{r.pairs:,}", f"{r.median('reaper_ms'):.1f}",
              f"{r.median('cold_to_warm_ms'):.1f}", f"{r.idle_pass_ms:.1f}",
              f"{r.median('reaper_pairs'):.0f}", f"{r.median('cold_to_warm_pairs'):.0f}",
              f"{min(r.pairs + 2, r.repeats[0].forget_rows):,}", f"{r.idle_gauge_ms:.1f}",
              f"{r.median('gauged_queues'):.0f}", f"{r.seed_seconds:.2f}"]
             for r in results])
        write_json(args.json, {
            "machine": info, "repeat": args.repeat,
            "sizes": [{"pairs": r.pairs, "seed_seconds": r.seed_seconds,
                       "idle_pass_ms": r.idle_pass_ms, "idle_gauge_ms": r.idle_gauge_ms,
                       "repeats": [asdict(x) for x in r.repeats]} for r in results],
        })
        largest = results[-1]
        print_figures(f"idle_gauge_ms_at_{label(largest.pairs)}={largest.idle_gauge_ms:.0f}",
                      f"idle_pass_ms_at_{label(largest.pairs)}={largest.idle_pass_ms:.0f}")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
