"""A fan-out released by one ack: ``--children`` tasks (10,000 by default, a parent's most)
wait for one parent; the parent is claimed and acked with a result, and that ack's
transaction settles the parent's edges and releases every child in slices of 1,000 (one
statement each: logic/flows.py), then makes them ready. Printed: how long the ack took
(the release inside it) and how long until every child was claimed and acked.

    .venv/bin/python -m bench.flows                   # 10,000 children
    .venv/bin/python -m bench.flows --children 500    # a quick check

A fresh database and an empty Valkey. The children are enqueued 500 per request (each
naming the parent), then the parent is acked; the children are claimed 500 at a time
until all are out, each checked to carry the parent's result. The last line is
``fan_out_release_ms=<x>``: the ack, release included.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.report import print_figures, print_machine, say, write_json
from bench.stores import Stores, add_store_arguments, machine_info, opened_stores

QUEUE_PARENT = "parents"
QUEUE_CHILD = "children"
ENQUEUE = 500
CLAIM = 500


def run(stores: Stores, children: int) -> dict[str, Any]:
    from tierq.config import Settings
    from tierq.engine import Tierq
    from tierq.logic.context import OffsetClock

    url = stores.fresh_tierq("bench_flows")
    settings = Settings(database_url=url, valkey_url=stores.valkey_url,
                        warm_max=max(1000, 2 * children), lease_seconds=600)
    tq = Tierq(settings=settings, clock=OffsetClock())
    try:
        [parent] = tq.enqueue(QUEUE_PARENT, [{"payload": "parent"}])
        started = time.perf_counter()
        for at in range(0, children, ENQUEUE):
            tq.enqueue(QUEUE_CHILD, [{"payload": i, "after": [parent.id]}
                                     for i in range(at, min(children, at + ENQUEUE))])
        enqueue_s = time.perf_counter() - started
        say(f"enqueued {children:,} waiting children in {enqueue_s:.2f} s")
        [task] = tq.claim(QUEUE_PARENT)
        started = time.perf_counter()
        acked = tq.ack(QUEUE_PARENT, [{"id": task.id, "lease_token": task.lease_token,
                                       "result": {"rows": 42}}])
        ack_ms = (time.perf_counter() - started) * 1000
        assert acked.acked == [task.id], acked
        say(f"the parent's ack (its {children:,} children released inside): {ack_ms:.0f} ms")
        claimed = 0
        while True:
            got = tq.claim(QUEUE_CHILD, max=CLAIM)
            if not got:
                break
            for child in got:
                assert child.parents and child.parents[0].result == {"rows": 42}, child
            claimed += len(got)
            tq.ack(QUEUE_CHILD, got)
        all_ms = (time.perf_counter() - started) * 1000
        assert claimed == children, f"claimed {claimed} of {children}"
        say(f"every child claimed and acked {all_ms:.0f} ms after the ack began")
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM tierq_task_waits").fetchone()
            assert row is not None and row[0] == 0
        return {"children": children, "enqueue_s": enqueue_s, "ack_ms": ack_ms,
                "all_claimed_ms": all_ms}
    finally:
        tq.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flows", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--children", type=int, default=10_000,
                        help="children waiting for the one parent (10000, the most)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.children <= 10_000:
        parser.error("--children must be 1 to 10000 (a parent's most)")
    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        say(f"flows bench: one parent, {args.children:,} children waiting for it")
        result = run(stores, args.children)
        write_json(args.json, {"machine": info, **result})
        print_figures(f"all_children_claimed_ms={result['all_claimed_ms']:.0f}",
                      f"fan_out_release_ms={result['ack_ms']:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
