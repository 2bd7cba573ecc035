"""Groups beside plain tasks: claim + ack of ``--tasks`` tasks (100,000 by default) spread
over ``--groups`` groups (1,000) of one at a time, by ``--workers`` threads (4) claiming
``--claim`` (100) at a time, against the same tasks without groups. Each ack of a grouped
task releases the next task of its group (logic/groups.py: one short transaction after the
ack's commit, then the released tasks made ready), which is what this measures.

    .venv/bin/python -m bench.groups                          # 100,000 tasks, 3 repeats
    .venv/bin/python -m bench.groups --quick                  # 10,000 tasks, 1 repeat

A fresh database and an empty Valkey per run; the tasks are enqueued 500 per request
(task i in group i mod groups, so each group's line is tasks/groups long), then the
workers start together and claim until the queue is empty. Only the claim + ack phase is
timed. Runs alternate plain and grouped; the figures are the medians. Each grouped run
checks that every group's tasks were claimed in enqueue order. The last line is
``ratio_groups_vs_plain=<x>`` (grouped tasks per second over plain ones; target ≥ 0.8).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.report import print_figures, print_machine, say, write_json
from bench.stores import Stores, add_store_arguments, machine_info, opened_stores

QUEUE = "bench_groups"
ENQUEUE = 500


def run(stores: Stores, tasks: int, groups: int, workers: int, claim: int,
        grouped: bool) -> dict[str, Any]:
    """One run: enqueue, then claim + ack everything; its rate and checks."""
    from tierq.config import Settings
    from tierq.engine import Tierq
    from tierq.logic.context import OffsetClock

    url = stores.fresh_tierq("bench_groups")
    settings = Settings(database_url=url, valkey_url=stores.valkey_url,
                        warm_max=max(2000, 2 * groups), lease_seconds=600)
    engines = [Tierq(settings=settings, clock=OffsetClock()) for _ in range(workers)]
    try:
        for at in range(0, tasks, ENQUEUE):
            engines[0].enqueue(QUEUE, [
                {"payload": i, **({"group": f"g{i % groups}"} if grouped else {})}
                for i in range(at, min(tasks, at + ENQUEUE))])
        seen: dict[int, list[int]] = defaultdict(list)
        counts = [0] * workers
        lock = threading.Lock()
        start = threading.Barrier(workers + 1)

        def work(n: int) -> None:
            tq = engines[n]
            start.wait()
            idle = 0
            while idle < 3:
                got = tq.claim(QUEUE, max=claim)
                if not got:
                    idle += 1
                    time.sleep(0.01)
                    continue
                idle = 0
                if grouped:
                    with lock:
                        for task in got:
                            seen[task.payload % groups].append(task.payload)
                acked = tq.ack(QUEUE, got)
                counts[n] += len(acked.acked)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
        for thread in threads:
            thread.start()
        start.wait()
        began = time.perf_counter()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - began
        done = sum(counts)
        assert done == tasks, f"acked {done} of {tasks}"
        for group, payloads in seen.items():
            assert payloads == sorted(payloads), f"group {group} out of order"
        return {"grouped": grouped, "seconds": seconds, "tasks_per_s": tasks / seconds}
    finally:
        for tq in engines:
            tq.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.groups", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--claim", type=int, default=100, help="tasks per claim")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="10,000 tasks, one repeat")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.repeats = 10_000, 1
    for name in ("tasks", "groups", "workers", "claim", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        say(f"groups bench: {args.tasks:,} tasks over {args.groups:,} groups of one at a "
            f"time, {args.workers} workers, claims of {args.claim}, {args.repeats} repeats")
        runs: list[dict[str, Any]] = []
        for _ in range(args.repeats):
            for grouped in (False, True):
                result = run(stores, args.tasks, args.groups, args.workers, args.claim,
                             grouped)
                say(f"  {'groups' if grouped else 'plain '}: "
                    f"{result['tasks_per_s']:,.0f} tasks/s ({result['seconds']:.2f} s)")
                runs.append(result)
        plain = statistics.median(r["tasks_per_s"] for r in runs if not r["grouped"])
        grouped_rate = statistics.median(r["tasks_per_s"] for r in runs if r["grouped"])
        ratio = grouped_rate / plain
        write_json(args.json, {"machine": info, "runs": runs, "plain_tasks_per_s": plain,
                               "groups_tasks_per_s": grouped_rate, "ratio": ratio})
        print_figures(f"plain_tasks_per_s={plain:.0f}", f"groups_tasks_per_s={grouped_rate:.0f}",
                      f"ratio_groups_vs_plain={ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
