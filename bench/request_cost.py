"""Request cost against someone else's scale: one page of running leases beside a pair of
100k leases, and one queue-wide claim pass beside 4,000 idle tenants.

    .venv/bin/python -m bench.request_cost              # 100,000 leases, 4,000 idle tenants
    .venv/bin/python -m bench.request_cost --quick      # 10,000 leases, 4,000 idle tenants

A fresh database and an empty Valkey. The pair is seeded in bulk: ``--leases`` tasks of
``--task-bytes`` written by the bulk load path (COPY, 10,000 rows a write, cold), then
claimed 500 at a time (leases of an hour; the claims' inline refills and, when they run
dry, the cold -> warm mover bring the cold rows warm). Then, ``--repeat`` times each
(medians printed, after one unmeasured run):

- ``running page``: the logic call behind ``GET /v1/metrics/queues/running``
  (``logic/queues.pair_leases``, a page of 1,000 — the route's default — from the start of
  the pair), and the same page from a cursor in the middle of the pair;
- ``every lease`` (for scale, not a request path): ``WarmTier.leases``, the whole pair in
  one read, what a page cost before pages were read from the ``started`` set;
- ``queue view``: the admin's view of the queue (``Tierq.get_queue``) and the tenant's own
  (``Tierq.tenant_queue``), beside the 100k leases.

Then ``--idle-tenants`` tenants are registered on another queue (one INSERT … SELECT FROM
generate_series; each pair's meta in warm mode, as a drained pair leaves it) and entered
in its ready-tenant index, as right after they all went idle;
each repeat enters them again and times one queue-wide claim (``Tierq.claim``, no tenant):
the claim finds nothing, visits one window of the index (``ready_tenants.CLAIM_WINDOW``)
and takes those tenants out. Also timed: the same claim once the index is empty (the steady
state). The last two lines are ``running_page_ms_at_<N>k_leases=`` and
``admin_claim_ms_at_<M>k_idle_tenants=`` (the worst case: a full window of idle tenants).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.report import print_figures, print_machine, print_table, say, write_json
from bench.stores import Stores, add_store_arguments, machine_info, opened_stores

QUEUE = "big"
TENANT = "_"
IDLE_QUEUE = "many"
CLAIM = 500  # tasks per claim while seeding (the largest claim)
WRITE = 10_000  # rows per bulk write
PAGE = 1000  # the running route's default page


def median_ms(action: Callable[[], Any], repeat: int) -> float:
    """The median of ``repeat`` timed runs, after one unmeasured run."""
    action()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def seed_leases(tq: Any, leases: int, task_bytes: int) -> None:
    """``leases`` leased tasks of ``task_bytes`` in one pair, loaded in bulk then claimed."""
    from tierq.logic import bulk

    started = time.perf_counter()
    pad = "x" * max(0, task_bytes - 40)
    with tq.bulk_load(QUEUE, rows=leases, tenants=[TENANT]) as load, \
            tq.bulk_writer(load) as writer:
        for at in range(0, leases, WRITE):
            rows = [(i, TENANT, f"k{i}", 0, orjson.dumps({"i": i, "pad": pad}).decode(),
                     None) for i in range(at, min(leases, at + WRITE))]
            writer.write(bulk.copy_text(rows), tenants=[TENANT])
            say(f"  loaded {min(leases, at + WRITE):,}/{leases:,} "
                f"({time.perf_counter() - started:.0f} s)")
    tq.bulk_warm_up(QUEUE, [TENANT])
    held = 0
    step = max(1, leases // CLAIM // 10)
    claims = 0
    while held < leases:
        got = tq.claim(QUEUE, max=min(CLAIM, leases - held), tenant=TENANT,
                       lease_seconds=3600, worker=f"bench-{claims % 8}")
        if not got:
            if not tq.run_cold_to_warm().promoted:
                raise RuntimeError(f"nothing left to claim after {held:,} leases")
            continue
        held += len(got)
        claims += 1
        if claims % step == 0:
            say(f"  leased {held:,}/{leases:,} ({time.perf_counter() - started:.0f} s)")


def register_idle(tq: Any, url: str, tenants: int) -> list[str]:
    """``tenants`` tenants registered on IDLE_QUEUE, none with a task, each pair's warm
    tier as a drained pair leaves it (its meta in warm mode)."""
    import psycopg

    from tierq.dal.warm_tier import PairKeys

    names = [f"idle-{i:05d}" for i in range(tenants)]
    for at in range(0, tenants, 1000):
        tq.ctx.warm.pipeline([("HSET", PairKeys.of(IDLE_QUEUE, name).meta, "mode", "warm")
                              for name in names[at:at + 1000]])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO tierq_queue_tenants (queue, tenant, created_at, last_seen)"
                     " SELECT %s, 'idle-' || lpad(g::text, 5, '0'), now(), now()"
                     " FROM generate_series(0, %s - 1) AS g", (IDLE_QUEUE, tenants))
        conn.execute("ANALYZE tierq_queue_tenants")
    return names


def run(stores: Stores, leases: int, task_bytes: int, idle: int,
        repeat: int) -> dict[str, Any]:
    from tierq.config import Settings
    from tierq.engine import Tierq
    from tierq.logic import queues as queue_logic
    from tierq.logic import ready_tenants
    from tierq.logic.context import OffsetClock

    url = stores.fresh_tierq("bench_request_cost")
    try:
        settings = Settings(database_url=url, valkey_url=stores.valkey_url,
                            warm_max=2 * leases, warm_max_bytes=4 * leases * (task_bytes + 200),
                            lease_seconds=3600)
        tq = Tierq(settings=settings, clock=OffsetClock())
        try:
            say(f"-- seed: {leases:,} leases of {task_bytes:,}-byte tasks in one pair (bulk)")
            started = time.perf_counter()
            seed_leases(tq, leases, task_bytes)
            seed_s = time.perf_counter() - started
            say(f"  seeded in {seed_s:.0f} s")
            pair = (QUEUE, TENANT)
            middle = list(itertools.islice(queue_logic.pair_leases(tq.ctx, pair),
                                           leases // 2, leases // 2 + 1))
            cursor = queue_logic.lease_key(middle[0])

            def first_page() -> None:
                page = list(itertools.islice(queue_logic.pair_leases(tq.ctx, pair), PAGE))
                assert len(page) == min(PAGE, leases)

            def middle_page() -> None:
                page = list(itertools.islice(queue_logic.pair_leases(tq.ctx, pair, cursor),
                                             PAGE))
                assert len(page) == min(PAGE, leases - leases // 2 - 1)

            say(f"-- requests beside the pair, {repeat} times each")
            figures = {
                "running page (first 1,000)": median_ms(first_page, repeat),
                "running page (1,000 from the middle)": median_ms(middle_page, repeat),
                "queue view (admin)": median_ms(lambda: tq.get_queue(QUEUE), repeat),
                "queue view (the tenant's)": median_ms(
                    lambda: tq.tenant_queue(QUEUE, TENANT), repeat),
                "every lease of the pair (for scale)": median_ms(
                    lambda: tq.ctx.warm.leases(QUEUE, TENANT), max(1, repeat // 4)),
            }
            for name, ms in figures.items():
                say(f"  {name}: {ms:.2f} ms")

            say(f"-- a queue-wide claim beside {idle:,} idle tenants, {repeat} times")
            names = register_idle(tq, url, idle)

            def idle_window() -> None:
                tq.ctx.warm.note_ready_tenants(IDLE_QUEUE, names)

            times = []
            for _ in range(repeat + 1):
                idle_window()  # as right after they all went idle
                began = time.perf_counter()
                assert tq.claim(IDLE_QUEUE, max=10) == []
                times.append((time.perf_counter() - began) * 1000)
            claim_ms = statistics.median(times[1:])
            tq.ctx.warm.forget_ready_tenants(IDLE_QUEUE, names)
            steady_ms = median_ms(lambda: tq.claim(IDLE_QUEUE, max=10), repeat)
            figures["admin claim (a window of idle tenants)"] = claim_ms
            figures["admin claim (index empty)"] = steady_ms
            say(f"  a window of {ready_tenants.CLAIM_WINDOW} idle tenants: {claim_ms:.2f} ms; "
                f"none left: {steady_ms:.2f} ms")
        finally:
            tq.close()
    finally:
        stores.drop_database(url)
    return {"leases": leases, "task_bytes": task_bytes, "idle_tenants": idle,
            "repeat": repeat, "seed_s": seed_s, "window": ready_tenants.CLAIM_WINDOW,
            "figures_ms": figures}


def _k(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.request_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leases", type=int, default=None, help="leases in the pair (100000)")
    parser.add_argument("--task-bytes", type=int, default=1024, help="bytes per task (1024)")
    parser.add_argument("--idle-tenants", type=int, default=4000,
                        help="idle tenants registered on the claimed queue (4000)")
    parser.add_argument("--repeat", type=int, default=20, help="runs of each request (20)")
    parser.add_argument("--quick", action="store_true", help="10,000 leases")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    leases = args.leases or (10_000 if args.quick else 100_000)
    if leases < 2 or args.repeat < 1 or args.task_bytes < 64 or args.idle_tenants < 1:
        parser.error("--leases at least 2, --repeat and --idle-tenants at least 1, "
                     "--task-bytes at least 64")

    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        say(f"request cost bench: {leases:,} leases in one pair, {args.idle_tenants:,} idle "
            f"tenants, {args.repeat} runs of each request")
        result = run(stores, leases, args.task_bytes, args.idle_tenants, args.repeat)
        say("")
        say("median ms per request")
        print_table(["request", "ms"], [[name, f"{ms:.2f}"]
                                        for name, ms in result["figures_ms"].items()])
        write_json(args.json, {"machine": info, **result})
        figures = result["figures_ms"]
        print_figures(
            f"running_page_ms_at_{_k(leases)}_leases="
            f"{figures['running page (first 1,000)']:.2f}",
            f"admin_claim_ms_at_{_k(args.idle_tenants)}_idle_tenants="
            f"{figures['admin claim (a window of idle tenants)']:.2f}")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
