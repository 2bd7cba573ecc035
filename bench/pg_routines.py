"""What PostgreSQL spends on tierq's hottest statements behind RDS Proxy, where nothing is
prepared, and what their PL/pgSQL functions (migration 0029) give back.

    .venv/bin/python -m bench.pg_routines                  # 3 rounds
    .venv/bin/python -m bench.pg_routines --rounds 1 --scale 0.25   # a quick, coarse run

Behind RDS Proxy the engine sends no prepared statement (one pins the client to a
database connection), so PostgreSQL parses and plans each statement on every execution;
a function's statements keep their plans in the backend. Three ways of running the same
named statements through ``TaskStore``, each on its own connection of one database, taking
turns step by step in each round (the order changes from round to round):

| way          | connection                          | what runs                           |
| ------------ | ----------------------------------- | ----------------------------------- |
| ``prepared`` | direct, psycopg prepares after 5    | the statement (what the benchmarks  |
|              | uses (``Database()``)               | of the engine measure)              |
| ``proxy``    | nothing prepared, no functions      | the statement, parsed and planned   |
|              | (``Database(prepare=False,          | each time (behind RDS Proxy before  |
|              | routines=False)``)                  | migration 0029)                     |
| ``routine``  | nothing prepared                    | its function (behind RDS Proxy now) |
|              | (``Database(prepare=False)``)       |                                     |

Steps (the batch size is what one request of the HTTP API or one worker's call sends):
an enqueue of 1, 10 and 500 tasks (``insert_tasks_uniform``; and ``insert_tasks_keyless``
for 10 tasks, each with its own state), an ack of 1, 10 and 100 tasks of one tenant
(``ack_delete``), and of 10 and 100 over 10 tenants (``ack_delete_by_attempt``). The rows
an ack deletes are inserted before it is measured. Each figure is the backend's CPU time
(``/proc/<pid>/schedstat``) per task, commits included, summed over the rounds.

The last lines are ``routine_vs_proxy_<step>=`` (routine ÷ proxy: what the functions save
behind the proxy) and ``routine_vs_prepared_<step>=`` for every step. Runs on a private
server (``tierq.local.services``) or one given by ``--database-url`` whose processes this
user can read in ``/proc``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench.measure import schedstat_ns
from bench.report import print_figures, print_machine, print_table, say, write_json
from bench.stores import add_store_arguments, machine_info, opened_stores

QUEUE = "bench"
WAYS = ("prepared", "proxy", "routine")
TENANTS = [f"t{i}" for i in range(10)]


@dataclass(frozen=True)
class StepSpec:
    name: str
    kind: str  # insert_uniform, insert_keyless, ack_delete, ack_delete_by_attempt
    batch: int
    tasks: int  # per round and way, at --scale 1


STEPS = (
    StepSpec("enqueue 1", "insert_uniform", 1, 1_000),
    StepSpec("enqueue 10", "insert_uniform", 10, 5_000),
    StepSpec("enqueue 10, each its own state", "insert_keyless", 10, 5_000),
    StepSpec("enqueue 500", "insert_uniform", 500, 20_000),
    StepSpec("ack 1", "ack_delete", 1, 1_000),
    StepSpec("ack 10", "ack_delete", 10, 5_000),
    StepSpec("ack 100", "ack_delete", 100, 20_000),
    StepSpec("ack 10 over tenants", "ack_delete_by_attempt", 10, 5_000),
    StepSpec("ack 100 over tenants", "ack_delete_by_attempt", 100, 20_000),
)


def key_of(step: StepSpec) -> str:
    return "_".join(step.name.replace(",", "").split())


class Way:
    """One way of running the statements: its store, on a connection of its own."""

    def __init__(self, name: str, url: str) -> None:
        from tierq.dal.postgres import Database
        from tierq.dal.task_store import TaskStore

        prepare = name == "prepared"
        self.name = name
        self.db = Database(url, min_size=1, max_size=1, prepare=prepare,
                           routines=name == "routine", session_settings=prepare)
        self.store = TaskStore(self.db)
        with self.db.connection() as conn:
            self.backend = conn.info.backend_pid

    def close(self) -> None:
        self.db.close()


def uniform(ids: Sequence[str], tenants: Sequence[str]) -> dict[str, Any]:
    from tierq.dal.postgres import uuid_array

    return {"ids": uuid_array(ids), "tenants": orjson.dumps(list(tenants)).decode(),
            "priorities": "{" + ",".join("0" for _ in ids) + "}",
            "payloads": orjson.dumps([{"i": i} for i in range(len(ids))]).decode(),
            "state": "warm", "run_at": time.time(), "max_attempts": 3, "timeout": None}


def keyless(ids: Sequence[str], tenants: Sequence[str]) -> dict[str, Any]:
    columns = uniform(ids, tenants)
    n = len(ids)
    del columns["state"], columns["run_at"], columns["max_attempts"], columns["timeout"]
    now = time.time()
    return {**columns, "states": "{" + ",".join("warm" if i % 2 else "cold"
                                                for i in range(n)) + "}",
            "run_ats": "{" + ",".join(repr(now) for _ in range(n)) + "}",
            "max_attempts": "{" + ",".join("3" for _ in range(n)) + "}",
            "grps": orjson.dumps([None] * n).decode(), "timeouts": "{}", "traces": "[]"}


def new_ids(n: int) -> list[str]:
    from tierq.core.ids import uuid7_strings

    return uuid7_strings(n)


def run_step(way: Way, step: StepSpec, tasks: int, rng: random.Random) -> int:
    """Run ``step`` for ``tasks`` tasks on ``way``; the backend's CPU nanoseconds it took."""
    store = way.store
    now = datetime.now(UTC)
    batches = [new_ids(min(step.batch, tasks - lo)) for lo in range(0, tasks, step.batch)]
    over_tenants = step.kind == "ack_delete_by_attempt"
    tenants_of = [[rng.choice(TENANTS) if over_tenants else TENANTS[0] for _ in b]
                  for b in batches]
    if step.kind.startswith("ack"):  # (the rows to delete, written before the clock)
        for b, t in zip(batches, tenants_of, strict=True):
            store.insert_tasks_uniform(QUEUE, now, uniform(b, t))  # type: ignore[arg-type]
    run: Callable[[list[str], list[str]], Any]
    if step.kind == "insert_uniform":
        def run(b: list[str], t: list[str]) -> Any:
            return store.insert_tasks_uniform(QUEUE, now, uniform(b, t))  # type: ignore[arg-type]
    elif step.kind == "insert_keyless":
        def run(b: list[str], t: list[str]) -> Any:
            return store.insert_tasks_keyless(QUEUE, now, keyless(b, t))  # type: ignore[arg-type]
    elif step.kind == "ack_delete":
        def run(b: list[str], t: list[str]) -> Any:
            done = store.ack_delete(QUEUE, b, t, 1)
            assert len(done) == len(b), f"{way.name}: acked {len(done)} of {len(b)}"
    else:
        def run(b: list[str], t: list[str]) -> Any:
            done = store.ack_delete_by_attempt(QUEUE, b, t, [1] * len(b))
            assert len(done) == len(b), f"{way.name}: acked {len(done)} of {len(b)}"
    spent = 0
    for b, t in zip(batches, tenants_of, strict=True):
        before = schedstat_ns(way.backend)
        run(b, t)
        spent += schedstat_ns(way.backend) - before
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_routines", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the ways take turns (3)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="tasks per step: this times the step's own number (1.0)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    if args.rounds < 1 or not 0.01 <= args.scale <= 100:
        parser.error("--rounds must be at least 1 and --scale within 0.01..100")
    spent = {(key_of(s), w): 0 for s in STEPS for w in WAYS}
    moved = {(key_of(s), w): 0 for s in STEPS for w in WAYS}
    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        from tierq.dal.migrate import migrate

        url = stores.fresh_database("pg_routines")
        migrate(url)
        ways = [Way(name, url) for name in WAYS]
        rng = random.Random(29)
        try:
            for r in range(args.rounds):
                say(f"-- round {r + 1}/{args.rounds}")
                for i, step in enumerate(STEPS):
                    tasks = max(step.batch, int(step.tasks * args.scale))
                    order = ways[(r + i) % 3:] + ways[:(r + i) % 3]
                    for way in order:
                        spent[key_of(step), way.name] += run_step(way, step, tasks, rng)
                        moved[key_of(step), way.name] += tasks
                    say(f"  {step.name}: {tasks:,} tasks a way, done")
                with ways[0].db.connection() as conn:  # (the next round on a clean table)
                    conn.execute("VACUUM tierq_tasks")
            # (the routine way ran every statement as its function: a database without
            # migration 0029 would have measured the statements under its name)
            used = ways[2].store.routines_in_use
            ran = {"insert_tasks_uniform", "insert_tasks_keyless", "ack_delete",
                   "ack_delete_by_attempt"}
            if not ran <= used:
                raise SystemExit(f"the routine way ran {sorted(ran - used)} as statements: "
                                 "is migration 0029 applied to --database-url?")
        finally:
            for way in ways:
                way.close()
    us = {k: spent[k] / moved[k] / 1000 for k in spent}
    rows, lines = [], []
    for step in STEPS:
        k = key_of(step)
        p, x, f = us[k, "prepared"], us[k, "proxy"], us[k, "routine"]
        rows.append([step.name, f"{p:.1f}", f"{x:.1f}", f"{f:.1f}", f"{f / x:.2f}",
                     f"{f / p:.2f}"])
        lines += [f"routine_vs_proxy_{k}={f / x:.2f}", f"routine_vs_prepared_{k}={f / p:.2f}"]
    say("")
    say(f"the backend's CPU per task, commits included ({args.rounds} round(s), the ways "
        "taking turns, one connection each)")
    print_table(["step", "prepared us", "proxy us", "routine us", "routine / proxy",
                 "routine / prepared"], rows)
    write_json(args.json, {"machine": info, "rounds": args.rounds, "scale": args.scale,
                           "us_per_task": {f"{k}|{w}": v for (k, w), v in us.items()}})
    print_figures(*lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
