"""Task wait benchmark: how soon a wait (``GET …/tasks/{id}?wait_seconds=N``, logic/waits.py)
answers after the ack that ends its task, and what waking it costs each ack.

    .venv/bin/python -m bench.task_wait            # 50 waits
    .venv/bin/python -m bench.task_wait --quick    # 20

Each round enqueues a task, claims it, starts a wait in a thread, waits until the wait's
sharded subscription is in place (``PUBSUB SHARDNUMSUB``), acks the task and times the ack
to the wait's answer. Then it times the marker-and-publish call alone
(``lua/task_finished.lua``, one task, no subscriber): what each ack batch pays per pair,
and, taking turns with it, the same call under a tenant's bound (a cancel's or a delete's,
which reads the pair's room in its tenant's share; a lease drop's does not).

The last line is ``wait_wake_ms_median=N``; the bar is 100 ms (issue 32), and
``--max-ms`` makes the run fail above it.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.report import print_figures, say, write_json
from bench.stores import Stores, add_store_arguments, opened_stores

QUEUE = "bench-wait"
CALLS = 2_000  # marker-and-publish calls timed
BAR_MS = 100.0


def run(stores: Stores, waits: int) -> dict[str, Any]:
    from tierq.config import Settings
    from tierq.dal.warm_tier import PairKeys
    from tierq.engine import Tierq
    from tierq.logic import waits as wait_logic
    from tierq.logic.tenant_budget import TASK_CHARGE

    url = stores.fresh_tierq("bench_wait")
    tq = Tierq(settings=Settings(database_url=url, valkey_url=stores.valkey_url))
    try:
        woke_ms: list[float] = []
        for _ in range(waits):
            tq.enqueue(QUEUE, [{"payload": 1}])
            [task] = tq.claim(QUEUE)
            answer: list[Any] = []
            thread = threading.Thread(target=lambda t=task, out=answer: out.append(
                tq.get_task(QUEUE, t.id, wait_seconds=10)), daemon=True)
            thread.start()
            channel = f"{PairKeys.of(QUEUE, task.tenant).finished}:{task.id}"
            deadline = time.monotonic() + 10
            while int(tq.warm.client.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1]) < 1:
                if time.monotonic() > deadline:
                    raise SystemExit("a wait never subscribed")
                time.sleep(0.002)
            acked = time.perf_counter()
            tq.ack(QUEUE, [task])
            thread.join(15)
            woke_ms.append((time.perf_counter() - acked) * 1000)
            if not answer or answer[0].state != "done":
                raise SystemExit(f"a wait answered {answer!r}, not done")
        items = [(str(uuid.uuid4()), "done", 1)]
        calls_us: dict[int, list[float]] = {0: [], TASK_CHARGE: []}
        # (the bounded pair's allotment: room for every marker, as a busy pair has)
        tq.warm.client.hset(PairKeys.of(QUEUE, "bench-bound").meta, "allot", 1 << 30)
        for i in range(2 * CALLS):
            charge = TASK_CHARGE if i % 2 else 0
            started = time.perf_counter()
            tq.warm.task_finished(QUEUE, "bench-bound" if charge else "bench", items,
                                  ttl_ms=wait_logic.MARKER_TTL_MS,
                                  cap=wait_logic.MARKERS_PER_PAIR, charge=charge)
            calls_us[charge].append((time.perf_counter() - started) * 1e6)
    finally:
        tq.close()
        stores.drop_database(url)
    ordered = sorted(woke_ms)
    return {"waits": waits, "wake_ms_median": statistics.median(woke_ms),
            "wake_ms_p90": ordered[int(0.9 * (len(ordered) - 1))],
            "wake_ms_max": ordered[-1],
            "task_finished_us_median": statistics.median(calls_us[0]),
            "task_finished_bound_us_median": statistics.median(calls_us[TASK_CHARGE])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.task_wait", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--waits", type=int, default=None, help="waits timed (50)")
    parser.add_argument("--quick", action="store_true", help="20 waits")
    parser.add_argument("--max-ms", type=float, default=None,
                        help=f"fail when the median is above this (the bar: {BAR_MS:g})")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    waits = args.waits or (20 if args.quick else 50)
    with opened_stores(args) as stores:
        say(f"task wait bench: {waits} waits, each answered by its task's ack")
        result = run(stores, waits)
    say(f"  ack to answer: median {result['wake_ms_median']:.1f} ms, p90 "
        f"{result['wake_ms_p90']:.1f} ms, max {result['wake_ms_max']:.1f} ms")
    say(f"  marker and publish per ack batch and pair: median "
        f"{result['task_finished_us_median']:.0f} µs; under a tenant's bound (a cancel's, "
        f"reading the pair's room) {result['task_finished_bound_us_median']:.0f} µs")
    write_json(args.json, result)
    print_figures(f"wait_wake_ms_median={result['wake_ms_median']:.1f}")
    if args.max_ms is not None and result["wake_ms_median"] > args.max_ms:
        say(f"the median is above {args.max_ms:g} ms")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
