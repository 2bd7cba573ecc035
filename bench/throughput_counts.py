"""Throughput counts benchmark: what counting enqueued and acked tasks per second costs the
hot paths (dal/throughput.py), on Valkey alone.

    .venv/bin/python -m bench.throughput_counts            # 20,000 calls per variant
    .venv/bin/python -m bench.throughput_counts --quick    # 3,000

Median µs per call, the variants interleaved in rounds (so drift in the machine's load
falls on all of them alike):

- an ack's lease drop, 1 and 400 leases: ``ZREM`` alone (no count) vs ``ZREM`` with the
  count in the same pipeline (``WarmTier.release(…, acked=n)``);
- an enqueue's count (its own pipelined call), for 1 and 5 tenants, beside a ``PING``
  round trip for scale;
- reading a queue's 15 minutes, of 1 tenant and summed over 100 tenants.

The last line is ``ack_count_overhead_us=N``: what the count adds to an ack of one lease.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bench.report import print_figures, say, write_json
from bench.stores import add_store_arguments, opened_stores
from tierq.dal.throughput import rate_key, tenants_key
from tierq.dal.warm_tier import WarmTier

QUEUE = "bench-throughput"
ROUNDS = 10
VIEW_TENANTS = 100


def timed(call: Callable[[], object], times: int, into: list[float]) -> None:
    for _ in range(times):
        started = time.perf_counter()
        call()
        into.append(time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput_counts",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=None, help="calls per variant (20000)")
    parser.add_argument("--quick", action="store_true", help="3,000 calls per variant")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    calls = args.calls or (3_000 if args.quick else 20_000)
    if calls < ROUNDS:
        parser.error(f"--calls must be at least {ROUNDS}")

    with opened_stores(args) as stores:
        warm = WarmTier.from_url(stores.valkey_url)
        try:
            one = ["t0-id|t0~x~1~0"]
            many = [f"t{i}-id|t0~x~1~{i}" for i in range(400)]
            tenants = [f"t{i}" for i in range(VIEW_TENANTS)]
            warm.throughput.record(QUEUE, {t: (1, 1) for t in tenants})  # a view to read
            direct = warm.calls

            def ping() -> object:
                return direct.command("PING") if direct is not None else warm.client.ping()

            variants: dict[str, Callable[[], object]] = {
                "ack 1 lease: ZREM alone": lambda: warm.release(QUEUE, "t0", one),
                "ack 1 lease: ZREM + count": lambda: warm.release(QUEUE, "t0", one, acked=1),
                "ack 400 leases: ZREM alone": lambda: warm.release(QUEUE, "t0", many),
                "ack 400 leases: ZREM + count":
                    lambda: warm.release(QUEUE, "t0", many, acked=400),
                "enqueue count, 1 tenant": lambda: warm.throughput.record_enqueued(
                    QUEUE, ["t0"]),
                "enqueue count, 5 tenants": lambda: warm.throughput.record_enqueued(
                    QUEUE, tenants[:5]),
                "PING round trip": ping,
                "read 15 min, 1 tenant": lambda: warm.throughput.read(QUEUE, ["t0"]),
                f"read 15 min, {VIEW_TENANTS} tenants summed":
                    lambda: warm.throughput.read(QUEUE),
            }
            say(f"throughput counts bench: {calls:,} calls per variant in {ROUNDS} rounds")
            seconds: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(ROUNDS):
                for name, call in variants.items():
                    timed(call, calls // ROUNDS, seconds[name])
            medians = {name: statistics.median(xs) * 1e6 for name, xs in seconds.items()}
            for name, us in medians.items():
                say(f"  {name:<40} {us:8.1f} µs")
            overhead = (medians["ack 1 lease: ZREM + count"]
                        - medians["ack 1 lease: ZREM alone"])
            write_json(args.json, {"calls": calls, "median_us": medians})
        finally:
            client = warm.client
            client.delete(tenants_key(QUEUE), *(rate_key(QUEUE, t) for t in ("t0", *tenants)))
            warm.close()
    print_figures(f"ack_count_overhead_us={overhead:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
