"""``tierq demo``: an end-to-end run of the engine on local servers — a burst far above
warm_max drained by workers while the warm tier stays capped and the cold backlog warms up
through the hysteresis; a delayed task; a failing task reaching the dead letters and
replayed. Live progress, then a summary table."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import typer
from rich.live import Live
from rich.table import Table

from tierq.cli.common import console
from tierq.config import Settings
from tierq.engine import Tierq
from tierq.models import TaskIn

QUEUE = "demo"


@dataclass
class DemoStats:
    acked: int = 0
    failed_once: int = 0
    peak_warm: int = 0
    modes_seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _worker(tq: Tierq, stats: DemoStats, stop: threading.Event, name: str) -> None:
    while not stop.is_set():
        tasks = tq.claim(QUEUE, max=50, worker=name, wait_seconds=0.5)
        done, failed = [], []
        for task in tasks:
            if isinstance(task.payload, dict) and task.payload.get("fail"):
                failed.append({"id": task.id, "lease_token": task.lease_token,
                               "error": "ValueError: this task always fails"})
            else:
                done.append({"id": task.id, "lease_token": task.lease_token})
        if done:
            result = tq.ack(QUEUE, done)
            with stats.lock:
                stats.acked += len(result.acked)
        if failed:
            tq.nack(QUEUE, [{**f, "retry_in_seconds": 0.2} for f in failed])
            with stats.lock:
                stats.failed_once += len(failed)


def _maintenance(tq: Tierq, stop: threading.Event) -> None:
    while not stop.is_set():
        tq.run_delayed_mover()
        tq.run_cold_to_warm()
        tq.run_reaper()
        time.sleep(0.25)


def _table(tq: Tierq, stats: DemoStats, enqueued: int, started: float) -> Table:
    view = tq.get_queue(QUEUE)
    stats.peak_warm = max(stats.peak_warm, view.counts.warm)
    if not stats.modes_seen or stats.modes_seen[-1] != view.mode:
        stats.modes_seen.append(view.mode)
    table = Table(title=f"queue {QUEUE!r}  (warm_max {view.settings.warm_max})")
    for column in ("mode", "warm", "cold", "delayed", "leased", "dead", "acked", "tasks/s"):
        table.add_column(column, justify="right")
    elapsed = max(time.monotonic() - started, 1e-6)
    c = view.counts
    table.add_row(view.mode, str(c.warm), str(c.cold), str(c.delayed), str(c.leased),
                  str(c.dead), f"{stats.acked}/{enqueued}", f"{stats.acked / elapsed:,.0f}")
    return table


def run_demo(tq: Tierq, *, tasks: int, warm_max: int, workers: int) -> DemoStats:
    tq.migrate()
    tq.put_queue(QUEUE, {"warm_max": warm_max, "max_attempts": 2, "lease_seconds": 30,
                         "backoff": {"kind": "fixed", "base_seconds": 0.2,
                                     "cap_seconds": 0.2, "jitter": 0}})
    stats = DemoStats()
    console.print(f"[bold]1.[/] burst of {tasks:,} tasks into a queue whose warm tier holds "
                  f"{warm_max:,}")
    started = time.monotonic()
    with Live(console=console, refresh_per_second=4) as live:
        enqueued = 0
        for start in range(0, tasks, 500):
            n = min(500, tasks - start)
            tq.enqueue(QUEUE, [TaskIn(payload={"n": start + i}, priority=(start + i) % 3)
                               for i in range(n)])
            enqueued += n
            live.update(_table(tq, stats, enqueued, started))
        tq.enqueue(QUEUE, [TaskIn(payload={"n": "delayed"}, delay_seconds=2),
                           TaskIn(payload={"fail": True}, key="always-fails")])
        enqueued += 2
        console.print(f"[bold]2.[/] {workers} workers drain it; a maintenance loop promotes "
                      "cold work, moves due delayed tasks and reaps leases")
        stop = threading.Event()
        threads = [threading.Thread(target=_worker, args=(tq, stats, stop, f"worker-{i}"))
                   for i in range(workers)]
        threads.append(threading.Thread(target=_maintenance, args=(tq, stop)))
        for t in threads:
            t.start()
        replayed = False
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            live.update(_table(tq, stats, enqueued, started))
            view = tq.get_queue(QUEUE)
            if view.counts.dead and not replayed:
                console.print("[bold]3.[/] the failing task reached the dead letters after "
                              "its attempts: replaying it once")
                tq.dlq_replay(QUEUE, all_dead=True)
                replayed = True
            c = view.counts
            if replayed and stats.acked >= enqueued - 1 and not (c.warm or c.cold or c.leased
                                                                 or c.delayed):
                break
            time.sleep(0.25)
        stop.set()
        for t in threads:
            t.join()
        live.update(_table(tq, stats, enqueued, started))
    elapsed = time.monotonic() - started
    summary = Table(title="summary")
    summary.add_column("what")
    summary.add_column("value", justify="right")
    summary.add_row("tasks enqueued", f"{enqueued:,}")
    summary.add_row("acked", f"{stats.acked:,}")
    summary.add_row("peak warm set (≤ warm_max)", f"{stats.peak_warm:,} (≤ {warm_max:,})")
    summary.add_row("tier modes seen", " → ".join(stats.modes_seen))
    summary.add_row("dead letters now", str(tq.get_queue(QUEUE).counts.dead))
    summary.add_row("elapsed", f"{elapsed:.1f} s")
    summary.add_row("throughput", f"{stats.acked / elapsed:,.0f} tasks/s")
    console.print(summary)
    return stats


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(
        tasks: int = typer.Option(20_000, help="How many tasks in the burst."),
        warm_max: int = typer.Option(1_000, help="The demo queue's warm tier capacity."),
        workers: int = typer.Option(4, help="Worker threads draining the queue."),
    ) -> None:
        """Run the engine end to end on local servers (reusing DATABASE_URL / VALKEY_URL when
        they answer, otherwise private servers that stop afterwards)."""
        from tierq.devstack import ensure_services

        with ensure_services() as services:
            os.environ.setdefault("DATABASE_URL", services.postgres.url)
            os.environ.setdefault("VALKEY_URL", services.valkey.url)
            settings = Settings(database_url=services.postgres.url,
                                valkey_url=services.valkey.url, reconcile_grace_seconds=5)
            with Tierq(settings=settings) as tq:
                tq.migrate()
                tq.purge_queue(QUEUE)  # a fresh start on every run
                stats = run_demo(tq, tasks=tasks, warm_max=warm_max, workers=workers)
        if stats.peak_warm > warm_max:
            raise typer.Exit(1)
