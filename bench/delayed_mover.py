"""Delayed mover benchmark: what its passes move a second when one pair has rows due and when
many have, how soon a pair's one row due behind another pair's backlog moves, what a pass
costs with nothing due, and what a delayed task costs to write, all beside a delayed
backlog that is not due.

    .venv/bin/python -m bench.delayed_mover            # a backlog of 1M rows over 10k pairs
    .venv/bin/python -m bench.delayed_mover --quick    # 100k rows over 1k pairs

One fresh database holds the backlog: rows not due for a day, spread evenly over its pairs
(100 tenants a queue), written by one INSERT … SELECT FROM generate_series (timed: the index
entries of delayed rows are in it). Then, each on its own and its rows deleted afterwards
(the rows due are written as the backlog is, after one enqueue of each of their pairs, so
each pair's mode is known in Valkey as a pair that had delayed tasks enqueued):

| case       | rows due                                    | measured                          |
| ---------- | ------------------------------------------- | --------------------------------- |
| idle       | none                                        | a pass (median of ``--repeat``)   |
| enqueue    | none: tasks delayed a day, by ``enqueue``   | microseconds a task, 500 a batch  |
| one pair   | ``--due`` rows of one pair                  | passes until none is left: rows/s |
| many pairs | ``--due`` rows over ``--pairs`` pairs, due  | the same                          |
|            | in turn (100 tenants a queue)               |                                   |
| behind     | ``--due`` rows of one pair at T, one row of | batches of one pass each before   |
|            | another pair at T + 1 ms                    | that row moves                    |

Passes run with the mover's defaults (batches of 1000, 50 a pass, a budget of 2.5 s). It runs
the tierq it imports, so ``PYTHONPATH`` chooses the tree to measure. The last lines are the
figures: ``delayed_idle_pass_ms``, ``delayed_enqueue_us_per_task``,
``delayed_backlog_insert_us_per_row``, ``delayed_batches_behind_a_backlog``,
``delayed_rows_per_s_one_pair`` and, last, ``delayed_rows_per_s_many_pairs``.
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

INSERT = ("INSERT INTO tierq_tasks (id, queue, tenant, priority, payload, state, run_at,"
          " run_at_initially, max_attempts, seq, created_at, state_since)"
          " SELECT gen_random_uuid(), {queue}, {tenant}, 0, jsonb_build_object('i', g),"
          " 'delayed', {run_at}, {run_at}, 5, {seq}, now(), now()"
          " FROM generate_series(0, %s - 1) AS g")
TENANTS = 100  # the pairs of a case or of the backlog: this many tenants a queue
ENQUEUE_TASKS = 20_000
ENQUEUE_BATCH = 500
BEHIND_CAP = 500  # batches: the case gives up there


@dataclass
class Drain:
    """Passes until no row of the case was left delayed."""

    rows: int
    pairs: int
    passes: list[tuple[int, float]] = field(default_factory=list)  # (moved, seconds)

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.passes)

    @property
    def rows_per_s(self) -> float:
        return sum(m for m, _ in self.passes) / self.seconds if self.seconds else 0.0


@dataclass
class Result:
    backlog_rows: int
    backlog_pairs: int
    backlog_insert_s: float
    index_bytes: dict[str, int]
    idle_pass_ms: float
    enqueue_us_per_task: float
    one_pair: Drain
    many_pairs: Drain
    batches_behind: int


def delayed_left(conn: psycopg.Connection[Any], queue_like: str) -> int:
    row = conn.execute("SELECT count(*) FROM tierq_tasks WHERE state = 'delayed'"
                       " AND queue LIKE %s", (queue_like,)).fetchone()
    assert row is not None
    return int(row[0])


def clear(conn: psycopg.Connection[Any], queue_like: str) -> None:
    """Forget a case's rows (the backlog stays; what its pairs pushed to Valkey stays too)."""
    conn.execute("DELETE FROM tierq_tasks WHERE queue LIKE %s", (queue_like,))
    conn.execute("VACUUM ANALYZE tierq_tasks")


def seed_backlog(conn: psycopg.Connection[Any], rows: int, pairs: int) -> float:
    started = time.perf_counter()
    conn.execute(INSERT.format(
        queue=f"'later-' || (g %% {pairs} / {TENANTS})", tenant=f"'t' || (g %% {TENANTS})",
        run_at="now() + interval '1 day' + g * interval '1 ms'", seq="1000000000 + g"),
        (rows,))
    seconds = time.perf_counter() - started
    conn.execute("VACUUM ANALYZE tierq_tasks")
    return seconds


def seed_due(tq: Any, conn: psycopg.Connection[Any], case: str, rows: int,
             pairs: int) -> None:
    """``rows`` due over ``pairs`` pairs (``TENANTS`` tenants a queue ``<case>-N``), due in
    turn (the oldest rows of every pair first). Each pair is first used by an enqueue of
    one task, as a pair with delayed rows was (its mode is known, warm, in Valkey)."""
    for i in range(pairs):
        tq.enqueue(f"{case}-{i // TENANTS}", [{"payload": "first"}], tenant=f"t{i % TENANTS}")
    conn.execute(INSERT.format(
        queue=f"'{case}-' || (g %% {pairs} / {TENANTS})", tenant=f"'t' || (g %% {TENANTS})",
        run_at="now() - interval '1 hour' + g * interval '1 ms'", seq="g"), (rows,))
    conn.execute("ANALYZE tierq_tasks")


def drain(tq: Any, conn: psycopg.Connection[Any], queue: str, rows: int,
          pairs: int) -> Drain:
    from tierq.maintenance import delayed_mover

    result = Drain(rows, pairs)
    while delayed_left(conn, f"{queue}-%"):
        started = time.perf_counter()
        moved = delayed_mover.run(tq.ctx).moved
        result.passes.append((moved, time.perf_counter() - started))
        say(f"  pass {len(result.passes)}: {moved:,} moved in "
            f"{result.passes[-1][1] * 1000:.0f} ms")
        if not moved:
            raise RuntimeError(f"a pass moved nothing of {queue}'s due rows")
    return result


def batches_behind(tq: Any, conn: psycopg.Connection[Any], rows: int) -> int:
    """Batches (one a pass) until the one row due 1 ms after another pair's ``rows`` moves."""
    from tierq.maintenance import delayed_mover

    for queue in ("behind-a", "behind-b"):
        tq.enqueue(queue, [{"payload": "first"}])
    conn.execute(INSERT.format(
        queue="'behind-a'", tenant="'_'", run_at="now() - interval '1 hour'", seq="g"),
        (rows,))
    conn.execute(INSERT.format(
        queue="'behind-b'", tenant="'_'",
        run_at="now() - interval '1 hour' + interval '1 ms'", seq="2000000000 + g"), (1,))
    conn.execute("ANALYZE tierq_tasks")
    for batch in range(1, BEHIND_CAP + 1):
        delayed_mover.run(tq.ctx, max_batches=1)
        if not delayed_left(conn, "behind-b"):
            return batch
    return BEHIND_CAP + 1


def enqueue_cost(tq: Any) -> float:
    """Microseconds per task of ``enqueue`` of tasks delayed a day, 500 a batch (the median
    batch)."""
    per_task = []
    for b in range(ENQUEUE_TASKS // ENQUEUE_BATCH):
        tasks = [{"payload": {"i": b * ENQUEUE_BATCH + i}, "delay_seconds": 86_400}
                 for i in range(ENQUEUE_BATCH)]
        started = time.perf_counter()
        tq.enqueue("enq", tasks, tenant=f"t{b % 10}")
        per_task.append((time.perf_counter() - started) * 1e6 / ENQUEUE_BATCH)
    return statistics.median(per_task[2:])  # (the first batches register the pairs)


def index_bytes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return {name: int(size) for name, size in conn.execute(
        "SELECT relname, pg_relation_size(oid) FROM pg_class"
        " WHERE relname LIKE 'tierq\\_tasks\\_delayed%' ORDER BY relname")}


def run(stores: Stores, args: argparse.Namespace) -> Result:
    from tierq.config import Settings
    from tierq.engine import Tierq
    from tierq.logic.context import OffsetClock
    from tierq.maintenance import delayed_mover

    url = stores.fresh_tierq("bench_delayed")  # (Valkey emptied once: each case has its pairs)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            say(f"-- the backlog: {args.backlog:,} rows not due over {args.backlog_pairs:,} "
                "pairs")
            insert_s = seed_backlog(conn, args.backlog, args.backlog_pairs)
            sizes = index_bytes(conn)
            say(f"  written in {insert_s:.2f} s; indexes {sizes}")
            settings = Settings(database_url=url, valkey_url=stores.valkey_url)
            tq = Tierq(settings=settings, clock=OffsetClock())
            try:
                idle = []
                for _ in range(5 + args.repeat):  # (the first five prepare the statements)
                    started = time.perf_counter()
                    delayed_mover.run(tq.ctx)
                    idle.append((time.perf_counter() - started) * 1000)
                idle_ms = statistics.median(idle[5:])
                say(f"-- idle: a pass with nothing due takes {idle_ms:.1f} ms")
                enqueue_us = enqueue_cost(tq)
                say(f"-- enqueue: {enqueue_us:.1f} µs a delayed task")
                clear(conn, "enq")
                say(f"-- one pair: {args.due:,} rows due")
                seed_due(tq, conn, "one", args.due, 1)
                one = drain(tq, conn, "one", args.due, 1)
                clear(conn, "one-%")
                say(f"-- many pairs: {args.due:,} rows due over {args.pairs:,} pairs")
                seed_due(tq, conn, "many", args.due, args.pairs)
                many = drain(tq, conn, "many", args.due, args.pairs)
                clear(conn, "many-%")
                say(f"-- behind: one row due 1 ms after {args.due:,} of another pair")
                behind = batches_behind(tq, conn, args.due)
                say(f"  it moved in batch {behind}")
                clear(conn, "behind-%")
            finally:
                tq.close()
        return Result(args.backlog, args.backlog_pairs, insert_s, sizes, idle_ms, enqueue_us,
                      one, many, behind)
    finally:
        stores.drop_database(url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.delayed_mover", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, default=None,
                        help="rows not due (1,000,000; --quick 100,000)")
    parser.add_argument("--backlog-pairs", type=int, default=None,
                        help="pairs of the backlog (10,000; --quick 1,000)")
    parser.add_argument("--due", type=int, default=None,
                        help="rows due in each case (100,000; --quick 20,000)")
    parser.add_argument("--pairs", type=int, default=1000,
                        help="pairs of the many-pairs case (1,000)")
    parser.add_argument("--repeat", type=int, default=50, help="idle passes measured (50)")
    parser.add_argument("--quick", action="store_true", help="the smaller sizes")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    args.backlog = args.backlog or (100_000 if args.quick else 1_000_000)
    args.backlog_pairs = args.backlog_pairs or (1_000 if args.quick else 10_000)
    args.due = args.due or (20_000 if args.quick else 100_000)
    if min(args.backlog, args.backlog_pairs, args.due, args.pairs, args.repeat) < 1:
        parser.error("sizes and --repeat must be positive")

    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        result = run(stores, args)
        say("")
        print_table(["case", "rows due", "pairs", "passes", "seconds", "rows/s"],
                    [[name, f"{d.rows:,}", f"{d.pairs:,}", str(len(d.passes)),
                      f"{d.seconds:.2f}", f"{d.rows_per_s:,.0f}"]
                     for name, d in (("one pair", result.one_pair),
                                     ("many pairs", result.many_pairs))])
        write_json(args.json, {"machine": info, **asdict(result)})
        print_figures(
            f"delayed_idle_pass_ms={result.idle_pass_ms:.1f}",
            f"delayed_enqueue_us_per_task={result.enqueue_us_per_task:.1f}",
            f"delayed_backlog_insert_us_per_row="
            f"{result.backlog_insert_s * 1e6 / result.backlog_rows:.2f}",
            f"delayed_batches_behind_a_backlog={result.batches_behind}",
            f"delayed_rows_per_s_one_pair={result.one_pair.rows_per_s:.0f}",
            f"delayed_rows_per_s_many_pairs={result.many_pairs.rows_per_s:.0f}")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
