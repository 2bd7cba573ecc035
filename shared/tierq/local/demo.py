"""The demo behind ``tierq demo`` (the command is :mod:`tierq.cli.demo`): tierq end to end on
the local stack, over HTTP.

It starts PostgreSQL and Valkey (private servers unless DATABASE_URL / VALKEY_URL answer)
and the local stack (``tierq dev``: the HTTP API and the scheduled maintenance functions of
template.yaml) in a child process, prints the dashboard's address, and then, with the
Python client and :class:`~tierq.client.worker.Worker` s:

1. creates a schedule firing every 5 s, a delayed task and a task that keeps failing;
2. enqueues a burst far above the queue's ``warm_max``: the warm tier fills to the cap, the
   queue turns cold, the rest waits in PostgreSQL;
3. starts workers: they drain the warm tier while the cold backlog is promoted through the
   hysteresis (promotion below 90 %, back to warm mode once the cold line is drained), the
   delayed task and the schedule's occurrences fire on time (priority 9, ahead of the
   backlog), and the failing task reaches the dead letters after its attempts;
4. "deploys a fix" and replays the dead letter, which then succeeds;
5. meanwhile a second queue, ``demo-push``, names a **Lambda consumer** and a **rate
   limit** of ``PUSH_RATE`` tasks a second. The consumer is :func:`push_consumer`, a
   Powertools ``BatchProcessor`` handler written for SQS, called in-process by the local
   dispatcher with SQS-shaped batches. Its tasks reach the function no faster than the
   limit, the items the function reports in ``batchItemFailures`` run again, and every task
   is acked without a worker;
6. shows live progress all along and ends with a summary table, then stops everything it
   started (``--keep-running`` leaves the stack and dashboard up until Ctrl-C).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierq.extras import MissingExtraError

try:
    from rich.console import Console, Group
    from rich.live import Live
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.table import Table
    from rich.text import Text
except ModuleNotFoundError as error:
    raise MissingExtraError.from_error(error, "local", "the demo (tierq.local.demo)") from error

from tierq.client import Client
from tierq.client.errors import NotFoundError
from tierq.client.worker import Worker, WorkerStats
from tierq.errors import TierqError
from tierq.models import ClaimedTask

QUEUE = "demo"
# The per-state counts shown, in the order and names of ``tierq stats`` (cli/stats.py, not
# imported: the demo runs with the ``local`` extra alone, without typer).
COUNTS = ("warm", "cold", "waiting", "held", "delayed", "leased", "dead")
PUSH_QUEUE = "demo-push"
PUSH_RATE = 100.0  # tasks a second handed to the consumer (the queue's rate limit)
PUSH_BURST = 20
PUSH_FAIL_EVERY = 50  # the consumer fails the first run of one task in this many
SCHEDULE = "demo-every-5s"
SCHEDULE_EVERY = 5.0
DELAY_SECONDS = 8.0
FLAKY_ATTEMPTS = 2
# The local stack's settings during the demo: maintenance ticks every fraction of a second
# so the hysteresis, the delayed task and the schedule show within a minute, and a database
# pool for one process serving every function at once (template.yaml sizes it for a Lambda
# environment, which serves one request at a time).
DEMO_ENV = {"TIERQ_COLD_TO_WARM_EVERY": "0.5", "TIERQ_DELAYED_EVERY": "0.5",
            "TIERQ_REAPER_EVERY": "1", "TIERQ_CRON_EVERY": "1", "TIERQ_DB_POOL_MAX": "16"}


@dataclass
class DemoPlan:
    tasks: int = 20_000
    warm_max: int = 1_000
    workers: int = 2
    concurrency: int = 32
    work_ms: float = 1.0
    timeout: float = 180.0
    push_tasks: int = 500


@dataclass
class DemoProgress:
    """What the handlers and the monitor saw; shared between threads."""

    started: float = field(default_factory=time.monotonic)
    burst_total: int = 0
    burst_ids: set[str] = field(default_factory=set)
    burst_runs: int = 0
    delayed_due: float | None = None
    delayed_ran: float | None = None
    cron_runs: list[float] = field(default_factory=list)
    flaky_failures: int = 0
    flaky_dead_at: float | None = None
    fixed: threading.Event = field(default_factory=threading.Event)
    replayed_at: float | None = None
    flaky_ok_at: float | None = None
    workers_started: float | None = None
    burst_drained: float | None = None
    peak_warm: int = 0
    peak_cold: int = 0
    modes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    events: deque[str] = field(default_factory=lambda: deque(maxlen=14))
    push_started: float | None = None
    push_done_at: float | None = None
    push: dict[str, int] = field(default_factory=dict)  # GET /v1/metrics/consumers' row
    lock: threading.Lock = field(default_factory=threading.Lock)

    def at(self) -> float:
        return time.monotonic() - self.started

    def event(self, text: str) -> None:
        with self.lock:
            self.events.append(f"[dim]+{self.at():5.1f}s[/] {text}")

    @property
    def burst_done(self) -> int:
        with self.lock:
            return len(self.burst_ids)


class DemoFailure(RuntimeError):
    pass


def push_consumer(event: dict[str, Any], context: Any) -> Any:
    """The consumer of ``demo-push``: a Lambda handler written for an SQS event source with
    Powertools, unchanged. It fails the first run of one task in ``PUSH_FAIL_EVERY``."""
    from aws_lambda_powertools.utilities.batch import (
        BatchProcessor,
        EventType,
        process_partial_response,
    )

    def record_handler(record: Any) -> None:
        n = record.json_body["n"]
        first = record.attributes.approximate_receive_count == "1"
        if n % PUSH_FAIL_EVERY == 0 and first:
            raise ValueError(f"task {n} fails its first run")

    return process_partial_response(event=event, record_handler=record_handler,
                                    processor=BatchProcessor(event_type=EventType.SQS),
                                    context=context)


def start_push(api: Client, plan: DemoPlan, progress: DemoProgress) -> None:
    """The queue with a Lambda consumer and a rate limit, and its tasks."""
    api.put_queue(PUSH_QUEUE, {
        "consumer": {"function": "tierq.local.demo:push_consumer", "batch_size": 10,
                     "max_concurrency": 2},
        "rate": {"per_second": PUSH_RATE, "burst": PUSH_BURST},
        "backoff": {"kind": "fixed", "base_seconds": 0.5, "cap_seconds": 0.5, "jitter": 0}})
    progress.push_started = progress.at()
    for start in range(0, plan.push_tasks, 500):
        api.enqueue(PUSH_QUEUE, [{"payload": {"n": n}} for n in range(
            start, min(plan.push_tasks, start + 500))])
    progress.event(f"{plan.push_tasks} tasks for a Lambda consumer (rate limit "
                   f"{PUSH_RATE:g}/s, 1 in {PUSH_FAIL_EVERY} fails once)")


def sample_push(api: Client, plan: DemoPlan, progress: DemoProgress) -> None:
    if progress.push_started is None or progress.push_done_at is not None:
        return
    rows = api.request("GET", "/v1/metrics/consumers") or {}
    for row in rows.get("consumers", []):
        if row["queue"] == PUSH_QUEUE:
            progress.push = {k: v for k, v in row.items() if isinstance(v, int)}
    if progress.push.get("acked", 0) >= plan.push_tasks:
        progress.push_done_at = progress.at()
        took = progress.push_done_at - progress.push_started
        progress.event(f"Lambda consumer: {plan.push_tasks} tasks acked in {took:.1f}s "
                       f"({plan.push_tasks / took:,.0f}/s, limit {PUSH_RATE:g}/s), "
                       f"{progress.push.get('retried', 0)} retried")


def make_handler(progress: DemoProgress, work_seconds: float) -> Callable[[ClaimedTask], Any]:
    def handle(task: ClaimedTask) -> Any:
        payload = task.payload if isinstance(task.payload, dict) else {}
        kind = payload.get("kind")
        if kind == "burst":
            if work_seconds:
                time.sleep(work_seconds)
            with progress.lock:
                progress.burst_ids.add(str(task.id))
                progress.burst_runs += 1
            return None
        if kind == "delayed":
            progress.delayed_ran = progress.at()
            progress.event(f"delayed task ran (due at +{progress.delayed_due or 0:.1f}s), "
                           "ahead of the backlog at priority 9")
            return {"ran_at": progress.delayed_ran}
        if kind == "cron":
            with progress.lock:
                progress.cron_runs.append(progress.at())
                n = len(progress.cron_runs)
            progress.event(f"schedule {SCHEDULE!r}: occurrence #{n} ran")
            return None
        if kind == "flaky":
            if not progress.fixed.is_set():
                with progress.lock:
                    progress.flaky_failures += 1
                    n = progress.flaky_failures
                progress.event(f"flaky task failed (attempt {task.attempt} of "
                               f"{task.max_attempts})")
                raise RuntimeError(f"payment gateway refused the charge (attempt {n})")
            progress.flaky_ok_at = progress.at()
            progress.event("replayed task succeeded after the fix")
            return {"charged": True}
        return None

    return handle


def counts_table(progress: DemoProgress, warm_max: int) -> Table:
    table = Table(title=f"queue {QUEUE!r}  (warm_max {warm_max:,})", title_justify="left")
    for column in ("mode", *COUNTS, "peak warm", "peak cold"):
        table.add_column(column, justify="right")
    c = progress.counts
    mode = c.get("mode_cold", 0)
    table.add_row("[blue]cold[/]" if mode else "[dark_orange]warm[/]",
                  *(f"{c.get(state, 0):,}" for state in COUNTS),
                  f"{progress.peak_warm:,}", f"{progress.peak_cold:,}")
    return table


def view(progress: DemoProgress, bar: Progress, warm_max: int,
         dashboard_url: str | None = None) -> Group:
    with progress.lock:
        events = list(progress.events)
    header = Text.from_markup(f"dashboard: {dashboard_url}" if dashboard_url else "",
                              style="dim")
    return Group(header, bar, counts_table(progress, warm_max),
                 Text.from_markup("\n".join(events) or "[dim]…[/]"))


def sample(api: Client, progress: DemoProgress) -> None:
    queue = api.get_queue(QUEUE)
    c = queue.counts
    progress.counts = {"warm": c.warm, "cold": c.cold, "waiting": c.waiting,
                       "held": c.held, "delayed": c.delayed, "leased": c.leased,
                       "dead": c.dead, "mode_cold": int(queue.mode == "cold")}
    progress.peak_warm = max(progress.peak_warm, c.warm)
    progress.peak_cold = max(progress.peak_cold, c.cold)
    if not progress.modes or progress.modes[-1] != queue.mode:
        if progress.modes:
            detail = (f"(warm tier full at {c.warm:,}; new work waits in PostgreSQL)"
                      if queue.mode == "cold" else "(cold line drained, warm tier ≤ 80 %)")
            progress.event(f"queue turned [bold]{queue.mode}[/] {detail}")
        progress.modes.append(queue.mode)


def run_demo(api: Client, plan: DemoPlan, *, out: Console,
             dashboard_url: str | None = None) -> tuple[DemoProgress, list[WorkerStats]]:
    """The demo over an API that is up (the queue ``demo`` should be empty)."""
    progress = DemoProgress()
    api.put_queue(QUEUE, {"warm_max": plan.warm_max, "lease_seconds": 30,
                          "max_attempts": 5, "paused": False,
                          "backoff": {"kind": "fixed", "base_seconds": 0.5,
                                      "cap_seconds": 0.5, "jitter": 0}})
    with suppress(NotFoundError):
        api.delete_schedule(SCHEDULE)
    api.put_schedule(SCHEDULE, {"queue": QUEUE, "payload": {"kind": "cron"}, "priority": 9,
                                "every_seconds": SCHEDULE_EVERY, "horizon": 3})
    progress.event(f"schedule {SCHEDULE!r} created: every {SCHEDULE_EVERY:g}s, priority 9")
    api.enqueue(QUEUE, [
        {"payload": {"kind": "delayed"}, "delay_seconds": DELAY_SECONDS, "priority": 9,
         "key": "demo-delayed"},
        {"payload": {"kind": "flaky"}, "priority": 9, "max_attempts": FLAKY_ATTEMPTS,
         "key": "demo-flaky"},
    ])
    progress.delayed_due = progress.at() + DELAY_SECONDS
    progress.event(f"delayed task enqueued (runs in {DELAY_SECONDS:g}s) and a task that "
                   f"fails ({FLAKY_ATTEMPTS} attempts)")
    start_push(api, plan, progress)

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=out)
    enqueue_bar = bar.add_task("burst enqueued", total=plan.tasks)
    drain_bar = bar.add_task("burst acked   ", total=plan.tasks)
    progress.burst_total = plan.tasks
    workers: list[Worker] = []
    threads: list[threading.Thread] = []
    stats: list[WorkerStats] = []
    handler = make_handler(progress, plan.work_ms / 1000)
    deadline = time.monotonic() + plan.timeout
    with Live(view(progress, bar, plan.warm_max, dashboard_url), console=out, refresh_per_second=4,
              transient=False) as live:
        def refresh() -> None:
            sample(api, progress)
            sample_push(api, plan, progress)
            if progress.burst_drained is None and progress.burst_done >= plan.tasks:
                progress.burst_drained = progress.at()
                progress.event(f"burst drained: {plan.tasks:,} tasks acked")
            bar.update(drain_bar, completed=progress.burst_done)
            live.update(view(progress, bar, plan.warm_max, dashboard_url))

        try:
            for start in range(0, plan.tasks, 500):
                n = min(500, plan.tasks - start)
                api.enqueue(QUEUE, [{"payload": {"kind": "burst", "n": start + i}}
                                    for i in range(n)])
                bar.advance(enqueue_bar, n)
                refresh()
            progress.event(f"burst of {plan.tasks:,} tasks enqueued: {progress.peak_warm:,} "
                           f"warm (the cap), {progress.counts.get('cold', 0):,} cold")
            for i in range(plan.workers):
                worker = Worker(api, QUEUE, handler, concurrency=plan.concurrency,
                                wait_seconds=1, grace_seconds=10, name=f"demo-worker-{i + 1}",
                                install_signal_handlers=False)
                workers.append(worker)
                threads.append(threading.Thread(target=lambda w=worker: stats.append(w.run()),
                                                daemon=True, name=f"demo-worker-{i + 1}"))
            for thread in threads:
                thread.start()
            progress.workers_started = progress.at()
            progress.event(f"{plan.workers} workers x {plan.concurrency} threads started")
            while time.monotonic() < deadline:
                refresh()
                if progress.counts.get("dead") and progress.replayed_at is None:
                    progress.flaky_dead_at = progress.at()
                    progress.event("flaky task is in the dead letters; deploying a fix and "
                                   "replaying it")
                    progress.fixed.set()
                    replayed = api.dlq_replay(QUEUE, all=True)
                    progress.replayed_at = progress.at()
                    progress.event(f"replayed {len(replayed.replayed)} dead letter(s)")
                if finished(progress):
                    break
                time.sleep(0.25)
            else:
                progress.event("[red]timed out[/] before everything ran")
        finally:
            # the schedule first (its pending occurrences go with it), then the workers,
            # which finish what they hold
            with suppress(TierqError):  # the summary matters more than this cleanup
                api.delete_schedule(SCHEDULE)
            for worker in workers:
                worker.stop()
            for thread in threads:
                thread.join(timeout=30)
            refresh()
    return progress, stats


def finished(progress: DemoProgress) -> bool:
    c = progress.counts
    return (progress.burst_done >= progress.burst_total
            and progress.push_done_at is not None
            and progress.delayed_ran is not None
            and len(progress.cron_runs) >= 1
            and progress.flaky_ok_at is not None
            and "cold" in progress.modes and progress.modes[-1] == "warm"
            and not (c.get("warm") or c.get("cold") or c.get("leased") or c.get("dead")))


def summary(progress: DemoProgress, stats: list[WorkerStats], plan: DemoPlan) -> Table:
    elapsed = progress.at()
    table = Table(title="tierq demo: summary", title_justify="left")
    table.add_column("what")
    table.add_column("seen", justify="right")
    table.add_column("", justify="center")

    def row(what: str, seen: str, ok: bool) -> None:
        table.add_row(what, seen, "[green]✓[/]" if ok else "[red]✗[/]")

    done = progress.burst_done
    row("burst tasks acked (distinct)", f"{done:,} / {plan.tasks:,}", done == plan.tasks)
    row("handler runs for the burst (at-least-once)", f"{progress.burst_runs:,}",
        progress.burst_runs >= done)
    row("peak warm ready set (never above warm_max)",
        f"{progress.peak_warm:,} ≤ {plan.warm_max:,}", progress.peak_warm <= plan.warm_max)
    row("peak cold backlog", f"{progress.peak_cold:,}",
        progress.peak_cold > 0 or plan.tasks <= plan.warm_max)
    row("tier modes", " → ".join(progress.modes) or "-",
        "cold" in progress.modes and progress.modes[-1:] == ["warm"])
    late = (None if progress.delayed_ran is None or progress.delayed_due is None
            else progress.delayed_ran - progress.delayed_due)
    row("delayed task ran (s after due)", "-" if late is None else f"{late:+.1f}",
        late is not None and late >= -0.5)
    row(f"schedule occurrences run (every {SCHEDULE_EVERY:g}s)", str(len(progress.cron_runs)),
        len(progress.cron_runs) >= 1)
    row("flaky task: failures → dead letter → replay → success",
        f"{progress.flaky_failures} → "
        f"{'dead' if progress.flaky_dead_at is not None else '-'} → "
        f"{'replayed' if progress.replayed_at is not None else '-'} → "
        f"{'ok' if progress.flaky_ok_at is not None else '-'}",
        progress.flaky_ok_at is not None and progress.flaky_failures >= FLAKY_ATTEMPTS)
    push_took = None if progress.push_done_at is None or progress.push_started is None \
        else progress.push_done_at - progress.push_started
    # the limit lets the burst go at once, then PUSH_RATE a second (retries count too)
    fastest = (plan.push_tasks + progress.push.get("retried", 0) - PUSH_BURST) / PUSH_RATE
    row(f"Lambda consumer under a {PUSH_RATE:g}/s rate limit: acked / retried, seconds",
        f"{progress.push.get('acked', 0):,} / {progress.push.get('retried', 0)}, "
        + ("-" if push_took is None else f"{push_took:.1f} s ≥ {fastest:.1f}"),
        push_took is not None and push_took >= fastest * 0.95
        and progress.push.get("acked") == plan.push_tasks
        and progress.push.get("retried", 0) >= plan.push_tasks // PUSH_FAIL_EVERY)
    totals = WorkerStats()
    for s in stats:
        for name, value in s.as_dict().items():
            setattr(totals, name, getattr(totals, name) + value)
    row("workers: claimed / acked / retried / dead",
        f"{totals.claimed:,} / {totals.acked:,} / {totals.retried:,} / {totals.dead:,}",
        totals.report_failures == 0)
    c = progress.counts
    left = sum(c.get(state, 0) for state in ("warm", "cold", "waiting", "held", "leased",
                                             "dead"))
    row("left in the queue (warm + cold + waiting + held + leased + dead)", f"{left:,}",
        left == 0)
    table.add_row("elapsed", f"{elapsed:.1f} s", "")
    if progress.burst_drained is not None and progress.workers_started is not None:
        drain = max(progress.burst_drained - progress.workers_started, 1e-6)
        table.add_row("burst drained in (claim → run → ack over HTTP)",
                      f"{drain:.1f} s, {done / drain:,.0f} tasks/s", "")
    return table


def succeeded(progress: DemoProgress, plan: DemoPlan) -> bool:
    return finished(progress) and progress.peak_warm <= plan.warm_max


# -- the local stack -------------------------------------------------------------------


@contextmanager
def local_stack(port: int | None, log_path: Path) -> Iterator[str]:
    """Private (or given) PostgreSQL and Valkey, and ``tierq dev`` on ``port`` (default: a
    free one) in a child process; yields the API's URL and stops everything on the way out."""
    from tierq.config import Settings
    from tierq.engine import Tierq
    from tierq.local.gateway.child import start_gateway_child
    from tierq.local.services import ensure_services, repo_root

    root = repo_root()
    if not (root / "template.yaml").is_file():
        raise DemoFailure(f"no template.yaml at {root}: run `tierq demo` from the repository")
    services = ensure_services()
    try:
        with Tierq(settings=Settings(database_url=services.postgres.url,
                                     valkey_url=services.valkey.url)) as tq:
            tq.migrate()
            tq.purge_queue(QUEUE)  # a fresh start on every run
            tq.purge_queue(PUSH_QUEUE)
            from tierq.logic.dispatch import counters_key

            tq.ctx.warm.client.delete(counters_key(PUSH_QUEUE))  # its counters start at 0
        env = {**os.environ, **services.env(), **DEMO_ENV}
        stack = start_gateway_child(env, log_path, cwd=root, port=port,
                                    args=("--quiet", "--schedule-period", "1",
                                          "--template", str(root / "template.yaml")))
        try:
            yield stack.url
        finally:
            stack.stop(timeout=20)
    finally:
        services.stop()


def demo_on_local_stack(plan: DemoPlan, *, out: Console, port: int | None = None,
                        keep_running: bool = False) -> int:
    """``tierq demo``: the demo on a local stack of its own, printed on ``out``; the exit
    status (0 when everything was seen, 1 when not or when the stack could not start, 130
    on Ctrl-C). The stack's log is kept only when something went wrong."""
    from tierq.local.gateway import GatewayStackError
    from tierq.local.services import LocalServicesError

    log_dir = Path(tempfile.mkdtemp(prefix="tierq-demo-"))
    log_path = log_dir / "stack.log"
    try:
        with local_stack(port, log_path) as url:
            out.print(f"[bold]local stack up[/]: API {url}  (log: {log_path})")
            out.print(f"[bold]dashboard[/]: [link={url}/dashboard]{url}/dashboard[/]  "
                      "(open it while the demo runs)")
            with Client(url) as api:
                progress, stats = run_demo(api, plan, out=out,
                                           dashboard_url=f"{url}/dashboard")
            out.print()
            out.print(summary(progress, stats, plan))
            out.print(f"dashboard: {url}/dashboard")
            if keep_running:
                out.print("the stack stays up; Ctrl-C to stop")
                with suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(1)
    except (DemoFailure, GatewayStackError, LocalServicesError) as exc:
        out.print(f"[red]error:[/] {exc}")
        return 1
    except KeyboardInterrupt:
        out.print("interrupted; stopping the local stack")
        return 130
    if not succeeded(progress, plan):
        out.print(f"the local stack's log: {log_path}")
        return 1
    shutil.rmtree(log_dir, ignore_errors=True)
    return 0
