"""The cost of limits on claims: a backlog claimed and acked through the ``Tierq`` engine with
generous limits set (max_leased, rate, tenant_max_leased, tenant_rate all far above what
the run reaches) and with none, back to back, in one process.

    .venv/bin/python -m bench.limits            # 8,000 tasks, 9 repeats, claims of 10 and 100
    .venv/bin/python -m bench.limits --quick    # 2,000 tasks, 3 repeats

A queue without limits pays nothing for them: the claim script gets zeros. With limits, a
claim also takes the queue-wide capacity before its pops (lua/capacity_take.lua): one
entry per claim in the queue's pool, however many tasks, and tokens. An ack gives its units
back (lua/capacity_free.lua). Where each step runs:

| step                        | one server                              | cluster mode      |
| --------------------------- | --------------------------------------- | ----------------- |
| a claim's take              | inside its first pair's claim script    | a call of its own |
| giving back unused units    | one more call, only when there are some | the same          |
| an ack's give-back          | a script in its lease drop's round trip | a call after it   |

Each repeat drains a fresh backlog of 4 tenants in each mode, the order of the modes
alternating. The figures are medians over the repeats, with the CPU the client process and
the Valkey server spent per task. The last line is ``limits_ratio=R``. For each claim size
it is the median over the repeats of the claim+ack rate with limits over the rate without in
the same repeat; back to back, a busy machine's drift cancels out. The headline is the
LOWEST of these over the claim sizes run (the costliest size); each size's own ratio is
printed before it.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import redis

from bench.report import fmt_rate, print_figures, print_machine, print_table, say
from bench.stores import add_store_arguments, machine_info, opened_stores
from tierq.config import Settings
from tierq.engine import Tierq

TENANTS = 4
ENQUEUE_BATCH = 500
# Far above what one process reaches here, so that only their cost is measured.
GENEROUS = {
    "max_leased": 1_000_000,
    "rate": {"per_second": 1_000_000, "burst": 1_000_000},
    "tenant_max_leased": 1_000_000,
    "tenant_rate": {"per_second": 1_000_000, "burst": 1_000_000},
}


def drain(tq: Tierq, queue: str, total: int, batch: int) -> tuple[float, float]:
    """Claim and ack until ``total`` tasks are done; (seconds claiming, seconds acking)."""
    claiming = acking = 0.0
    done = 0
    while done < total:
        start = time.perf_counter()
        got = tq.claim(queue, max=batch)
        middle = time.perf_counter()
        if not got:
            raise SystemExit(f"the backlog ran dry after {done} of {total} tasks")
        result = tq.ack(queue, got)
        end = time.perf_counter()
        if result.rejected:
            raise SystemExit(f"acks refused: {result.rejected[:3]}")
        claiming += middle - start
        acking += end - middle
        done += len(got)
    return claiming, acking


def valkey_cpu(client: redis.Redis) -> float:
    """Seconds of CPU the Valkey server has used (user + system)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def one_run(tq: Tierq, valkey: redis.Redis, total: int, batch: int,
            limits: dict[str, Any] | None) -> dict[str, float]:
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    tq.put_queue(queue, {"warm_max": total, **(limits or {})})
    per_tenant = total // TENANTS
    for tenant in range(TENANTS):
        for start in range(0, per_tenant, ENQUEUE_BATCH):
            tq.enqueue(queue, [{"payload": i, "tenant": f"t{tenant}"}
                               for i in range(start, min(per_tenant, start + ENQUEUE_BATCH))])
    n = per_tenant * TENANTS
    server_before, client_before = valkey_cpu(valkey), time.process_time()
    claiming, acking = drain(tq, queue, n, batch)
    server_us = (valkey_cpu(valkey) - server_before) / n * 1e6
    client_us = (time.process_time() - client_before) / n * 1e6
    return {"claim": n / claiming, "both": n / (claiming + acking), "valkey_us": server_us,
            "client_us": client_us}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.limits", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=None, help="tasks per run (8000)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats (9)")
    parser.add_argument("--batches", type=int, nargs="+", default=[10, 100],
                        help="claim sizes (10 100)")
    parser.add_argument("--quick", action="store_true", help="2,000 tasks, 3 repeats")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    total = args.tasks or (2_000 if args.quick else 8_000)
    repeats = args.repeats or (3 if args.quick else 9)
    if total < TENANTS or repeats < 1 or any(b < 1 or b > 500 for b in args.batches):
        raise SystemExit("--tasks >= 4, --repeats >= 1 and claim sizes 1..500")
    with opened_stores(args) as stores:
        print_machine(machine_info(stores))
        url = stores.fresh_database("tierq_bench_limits")
        from tierq.dal.migrate import migrate
        migrate(url)
        settings = Settings(database_url=url, valkey_url=stores.valkey_url,
                            settings_cache_seconds=60.0)
        rows = []
        ratios: dict[int, float] = {}
        valkey = redis.Redis.from_url(stores.valkey_url)
        with Tierq(settings=settings) as tq:
            one_run(tq, valkey, min(total, 2000), args.batches[0], None)  # warm up
            for batch in args.batches:
                rates: dict[str, list[dict[str, float]]] = {"none": [], "limits": []}
                for repeat in range(repeats):
                    order = ["none", "limits"] if repeat % 2 == 0 else ["limits", "none"]
                    for mode in order:
                        rates[mode].append(one_run(tq, valkey, total, batch,
                                                   GENEROUS if mode == "limits" else None))
                    say(f"claims of {batch}, repeat {repeat + 1}/{repeats}: "
                        f"none {rates['none'][-1]['both']:,.0f}/s, "
                        f"limits {rates['limits'][-1]['both']:,.0f}/s")
                med = {mode: {k: statistics.median(r[k] for r in runs)
                              for k in ("claim", "both", "valkey_us", "client_us")}
                       for mode, runs in rates.items()}
                # paired: each repeat's two modes ran back to back, so the median of the
                # per-repeat ratios is steadier than a ratio of medians on a busy machine
                ratios[batch] = statistics.median(
                    lim["both"] / none["both"]
                    for lim, none in zip(rates["limits"], rates["none"], strict=True))
                rows.append([str(batch), fmt_rate(med["none"]["claim"]),
                             fmt_rate(med["limits"]["claim"]),
                             f"{med['limits']['claim'] / med['none']['claim']:.2f}",
                             fmt_rate(med["none"]["both"]), fmt_rate(med["limits"]["both"]),
                             f"{ratios[batch]:.2f}",
                             f"{med['none']['client_us']:.0f} / {med['limits']['client_us']:.0f}",
                             f"{med['none']['valkey_us']:.1f} / "
                             f"{med['limits']['valkey_us']:.1f}"])
        valkey.close()
        print_table(["claim size", "claims/s none", "claims/s limits", "ratio",
                     "claim+ack/s none", "claim+ack/s limits", "paired ratio",
                     "client CPU us/task none / limits", "Valkey CPU us/task none / limits"],
                    rows)
        worst = min(ratios, key=lambda b: ratios[b])
        say(f"limits cost the most at claims of {worst}")
        print_figures(*[f"limits_ratio_claims_of_{b}={r:.3f}" for b, r in ratios.items()],
                      f"limits_ratio={ratios[worst]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
