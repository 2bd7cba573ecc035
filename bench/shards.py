"""Shards benchmark: enqueue -> claim -> ack with one shard and with two shards on two
PostgreSQL servers (tierq.sharded), side by side in one run.

    .venv/bin/python -m bench.shards            # 40,000 tasks, 4 workers, 3 repeats
    .venv/bin/python -m bench.shards --quick    # 4,000 tasks, 1 repeat (a smoke run)

Two private PostgreSQL servers and a private Valkey start under ``--state-dir``. Each run
gets fresh databases: "1 shard" is today's engine (``Tierq``) on server A; "2 shards" is
``ShardedTierq`` over one database on server A and one on server B. ``--workers`` processes
each enqueue batches of 100 tasks over ``--tenants`` tenants and claim and ack them
(producers and consumers at once) until every task is acked. Runs alternate and repeat;
medians are printed, with each server's CPU per task (postmaster, backends, exited ones)
and how evenly the tasks split between the shards.

On this 2-core machine both servers, Valkey and the workers share the cores, so two
shards cannot run faster than one here: the figure that carries to a bigger machine is the
PostgreSQL CPU per task on each server, which sharding halves per server.

Last lines: ``tasks_per_s_1_shard=``, ``tasks_per_s_2_shards=``, ``shard_ratio=`` (2/1) and
``shard_balance=`` (max/min tasks per shard).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench.measure import child_pids, process_cpu
from bench.report import load_average, print_figures, print_table, say
from tierq.config import Settings
from tierq.dal.migrate import migrate
from tierq.dal.shards import ShardSpec, tag_of
from tierq.engine import Tierq
from tierq.local.services import PrivatePostgres, ensure_services
from tierq.sharded import ShardedTierq

DEFAULT_STATE_DIR = Path(f"/tmp/tierq-bench-shards-{os.getuid()}")
BATCH = 100
QUEUE = "bench"


@dataclass
class Run:
    shards: int
    seconds: float
    tasks: int
    cpu_per_task_us: list[float]  # per server (A, B)
    per_shard: list[int]          # tasks acked on each shard (by their ids' tags)

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds


def server_cpu(postmaster: int) -> float:
    return process_cpu(postmaster, reaped_children=True) + sum(
        process_cpu(child) for child in child_pids(postmaster))


def engine(specs: list[ShardSpec], valkey_url: str) -> Tierq | ShardedTierq:
    settings = Settings(valkey_url=valkey_url, settings_cache_seconds=5.0)
    if len(specs) == 1:
        return Tierq(database_url=specs[0].url, settings=settings)
    return ShardedTierq(specs, settings=settings)


def worker(specs: list[ShardSpec], valkey_url: str, tasks: int, total: int, tenants: int,
           seed: int, done: Any, per_shard: Any) -> None:
    """Enqueue ``tasks`` in batches, claiming and acking between them (any worker's tasks),
    until ``total`` tasks are acked by all the workers together."""
    rng = random.Random(seed)
    tq = engine(specs, valkey_url)
    shard_of_tag = {spec.tag: i for i, spec in enumerate(specs)}
    try:
        sent = 0
        while done.value < total:
            if sent < tasks:
                n = min(BATCH, tasks - sent)
                tq.enqueue(QUEUE, [{"payload": {"i": sent + i},
                                    "tenant": f"t{rng.randrange(tenants)}"}
                                   for i in range(n)])
                sent += n
            claimed = tq.claim(QUEUE, max=BATCH)
            if claimed:
                tq.ack(QUEUE, claimed)
                with done.get_lock():
                    done.value += len(claimed)
                    for task in claimed:  # (one shard: every tag maps nowhere, index 0)
                        per_shard[shard_of_tag.get(tag_of(str(task.id)), 0)] += 1
            elif sent >= tasks:
                time.sleep(0.01)
    finally:
        tq.close()


def run_once(shards: int, servers: list[tuple[str, int]], valkey_url: str, *, tasks: int,
             workers: int, tenants: int, label: str) -> Run:
    """One run on fresh databases (one per shard, server A first)."""
    names = []
    for i in range(shards):
        admin, _ = servers[i]
        name = f"tierq_bench_shard_{i}_{os.getpid()}_{int(time.time() * 1000)}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        names.append((admin, name))
    specs = [ShardSpec(f"s{i}", admin.rsplit("/", 1)[0] + "/" + name)
             for i, (admin, name) in enumerate(names)]
    try:
        for spec in specs:
            migrate(spec.url)
        if shards > 1:
            with ShardedTierq(specs, settings=Settings(valkey_url=valkey_url)) as setup:
                setup.sync_homes()
        redis.Redis.from_url(valkey_url).flushdb()  # (the benchmark's private server)
        done = multiprocessing.Value("q", 0)
        acked_per_shard = multiprocessing.Array("q", len(specs), lock=False)
        per_worker = tasks // workers
        total = per_worker * workers
        cpu_before = [server_cpu(pid) for _, pid in servers]
        started = time.monotonic()
        procs = [multiprocessing.Process(target=worker, args=(
            specs, valkey_url, per_worker, total, tenants, seed, done, acked_per_shard))
            for seed in range(workers)]
        for proc in procs:
            proc.start()
        last = 0.0
        while any(p.is_alive() for p in procs):
            time.sleep(0.2)
            if any(p.exitcode for p in procs):  # the others would wait for its tasks forever
                for proc in procs:
                    proc.terminate()
                raise SystemExit(f"[{label}] a worker failed (its error is above)")
            if time.monotonic() - last >= 5:
                last = time.monotonic()
                say(f"  [{label}] {done.value:,}/{total:,} acked")
        seconds = time.monotonic() - started
        if any(p.exitcode for p in procs):
            raise SystemExit(f"[{label}] a worker failed")
        cpu = [server_cpu(pid) - before for (_, pid), before in zip(servers, cpu_before,
                                                                     strict=True)]
        return Run(shards, seconds, total, [c / total * 1e6 for c in cpu],
                   list(acked_per_shard))
    finally:
        for admin, name in names:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--tenants", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="4,000 tasks, 1 repeat")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.repeats = 4000, 1
    if args.tasks < args.workers or args.workers < 1 or args.repeats < 1:
        parser.error("--tasks must be at least --workers, both and --repeats at least 1")
    args.state_dir.mkdir(parents=True, exist_ok=True)
    args.state_dir.chmod(0o755)
    say(f"shards benchmark: {args.tasks:,} tasks, {args.workers} workers, {args.tenants} "
        f"tenants, {args.repeats} repeat(s); load {load_average()}")
    with ensure_services(args.state_dir / "a", want_private=True) as local:
        second = PrivatePostgres(args.state_dir / "b")
        second.start()
        try:
            pid_a, pid_b = local.postgres.pid, second.pid  # type: ignore[attr-defined]
            if not pid_a or not pid_b:
                raise SystemExit("the private PostgreSQL servers did not start")
            servers = [(local.postgres.url, pid_a), (second.url, pid_b)]
            runs: dict[int, list[Run]] = {1: [], 2: []}
            for repeat in range(1, args.repeats + 1):
                for shards in (1, 2):
                    label = f"{shards} shard{'s' if shards > 1 else ''}, run {repeat}"
                    say(f"[{label}] starting")
                    run = run_once(shards, servers, local.valkey.url, tasks=args.tasks,
                                   workers=args.workers, tenants=args.tenants, label=label)
                    say(f"[{label}] {run.rate:,.0f} tasks/s in {run.seconds:.1f}s; PG CPU/task "
                        + " / ".join(f"{c:.0f} µs" for c in run.cpu_per_task_us)
                        + f"; tasks per shard {run.per_shard}")
                    runs[shards].append(run)
        finally:
            second.stop()
    rows = []
    medians: dict[int, float] = {}
    for shards, measured in runs.items():
        medians[shards] = statistics.median(r.rate for r in measured)
        cpu_a = statistics.median(r.cpu_per_task_us[0] for r in measured)
        cpu_b = statistics.median(r.cpu_per_task_us[1] for r in measured)
        split = measured[-1].per_shard
        rows.append([str(shards), f"{medians[shards]:,.0f}", f"{cpu_a:.0f}", f"{cpu_b:.0f}",
                     f"{cpu_a + cpu_b:.0f}", " / ".join(f"{n:,}" for n in split)])
    print_table(["shards", "tasks/s (median)", "PG A µs CPU/task", "PG B µs CPU/task",
                 "PG total µs/task", "tasks per shard (last run)"], rows)
    balances = [max(r.per_shard) / max(1, min(r.per_shard)) for r in runs[2]]
    print_figures(f"tasks_per_s_1_shard={medians[1]:.0f}",
                  f"tasks_per_s_2_shards={medians[2]:.0f}",
                  f"shard_ratio={medians[2] / medians[1]:.2f}",
                  f"shard_balance={statistics.median(balances):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
