"""Push-path benchmark: how fast the dispatcher hands a backlog to a consumer function.

    .venv/bin/python -m bench.push                  # 10,000 tasks, 3 repeats
    .venv/bin/python -m bench.push --quick          # 2,000 tasks, 3 repeats
    .venv/bin/python -m bench.push --tasks 50000 --batch-size 100 --max-concurrency 16

Each repeat uses a fresh database and an empty Valkey, and a queue whose consumer is
:func:`noop_consumer`: a Lambda handler that does nothing and reports no failure. The local
consumer functions (tierq.local.consumers) call it in-process, exactly as the local stack
calls one. The backlog is enqueued first (not timed, in batches of 500 over ``--tenants``
tenants), then the dispatcher runs until every task is acked. Timed: from the
dispatcher's start to the last ack — claims, building the SQS-shaped events, the calls, and
acks in PostgreSQL and Valkey; a Lambda function's own invoke latency is not in it (see the
README's figures for what that adds). The benchmark fails unless every task was dispatched
once and acked. It prints each repeat, then ``push_tasks_per_s=N``: the median.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from bench.report import print_figures, print_machine, print_table, say, write_json
from bench.stores import Stores, add_store_arguments, machine_info, opened_stores

QUEUE = "push-bench"
ENQUEUE_BATCH = 500


def noop_consumer(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """A consumer that does nothing with its records and reports none failed."""
    return {"batchItemFailures": []}


def one_repeat(stores: Stores, args: argparse.Namespace) -> dict[str, float]:
    from tierq.config import Settings
    from tierq.engine import Tierq
    from tierq.local.consumers import LocalFunctions
    from tierq.maintenance.dispatcher import DispatcherConfig, dispatcher_of, forget_dispatcher

    url = stores.fresh_tierq("bench_push")
    try:
        settings = Settings(database_url=url, valkey_url=stores.valkey_url,
                            db_pool_max=max(4, args.max_concurrency + 2))
        with Tierq(settings=settings) as tq:
            tq.ctx.consumers = LocalFunctions()
            consumer: dict[str, Any] = {"function": "bench.push:noop_consumer",
                                        "batch_size": args.batch_size,
                                        "max_concurrency": args.max_concurrency}
            tq.put_queue(QUEUE, {"consumer": consumer})
            started = time.perf_counter()
            for start in range(0, args.tasks, ENQUEUE_BATCH):
                tq.enqueue(QUEUE, [{"payload": {"n": n, "pad": "x" * args.payload_bytes},
                                    "tenant": f"t{n % args.tenants}"}
                                   for n in range(start, min(args.tasks,
                                                             start + ENQUEUE_BATCH))])
            enqueue_s = time.perf_counter() - started
            dispatcher = dispatcher_of(tq.ctx, DispatcherConfig(
                max_in_flight=args.max_concurrency))
            try:
                started = time.perf_counter()
                deadline = time.monotonic() + args.timeout
                while dispatcher.counts().acked < args.tasks:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"not every task was acked within {args.timeout}s: "
                                           f"{dispatcher.counts()}")
                    dispatcher.run(until=time.monotonic() + 1.0, idle_seconds=5.0,
                                   should_stop=lambda: dispatcher.counts().acked >= args.tasks)
                dispatcher.drain()
                push_s = time.perf_counter() - started
                counts = dispatcher.counts()
            finally:
                forget_dispatcher(tq.ctx)
            left = tq.ctx.store.queue_view_state_totals(QUEUE)
            if counts.dispatched != args.tasks or counts.acked != args.tasks \
                    or left.cold or left.delayed or left.dead:
                raise RuntimeError(f"expected {args.tasks} tasks dispatched once and acked, "
                                   f"got {counts} (left: {left})")
        return {"enqueue_s": enqueue_s, "push_s": push_s,
                "push_tasks_per_s": args.tasks / push_s, "batches": counts.batches}
    finally:
        stores.drop_database(url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.push", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=10,
                        help="the consumer's batch_size (SQS's default is 10)")
    parser.add_argument("--max-concurrency", type=int, default=8,
                        help="the consumer's max_concurrency (and the dispatcher's threads)")
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--payload-bytes", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--quick", action="store_true", help="2,000 tasks")
    parser.add_argument("--json", type=Path, default=None)
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks = 2_000
    say(f"push path: {args.tasks:,} tasks, batch_size {args.batch_size}, max_concurrency "
        f"{args.max_concurrency}, {args.tenants} tenant(s), {args.repeats} repeats")
    with opened_stores(args) as stores:
        print_machine(machine_info(stores))
        results = []
        for i in range(args.repeats):
            r = one_repeat(stores, args)
            results.append(r)
            say(f"  repeat {i + 1}/{args.repeats}: {r['push_tasks_per_s']:,.0f} tasks/s "
                f"({r['push_s']:.2f}s, {r['batches']:.0f} invocations; enqueue "
                f"{r['enqueue_s']:.2f}s)")
    median = statistics.median(r["push_tasks_per_s"] for r in results)
    print_table(["repeat", "tasks/s", "seconds", "invocations"],
                [[str(i + 1), f"{r['push_tasks_per_s']:,.0f}", f"{r['push_s']:.2f}",
                  f"{r['batches']:.0f}"] for i, r in enumerate(results)])
    write_json(args.json, {"args": {k: str(v) for k, v in vars(args).items()},
                           "repeats": results, "push_tasks_per_s": median})
    print_figures(f"push_tasks_per_s={median:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
