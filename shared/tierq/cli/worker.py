"""``tierq worker QUEUE module:function``: run a handler over a queue with
:class:`tierq.client.worker.Worker` until SIGTERM / Ctrl-C (or, with --burst, until the queue is
empty). A coroutine function (``async def``) runs with
:class:`tierq.client.worker.AsyncWorker` over an ``AsyncClient`` instead, ``--concurrency``
coroutines at once on one event loop.

When the stop abandoned tasks to their leases (their handlers still running past the grace),
the process ends with ``os._exit`` once its logs and stats are written: a normal exit would
wait for the handlers' non-daemon threads (a ``ThreadPoolExecutor``'s), and the task would
run on here after its lease ran out and another worker got it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.logging import RichHandler
from rich.table import Table

from tierq.cli.api_options import (
    RegionOption,
    SigV4Option,
    TokenOption,
    UrlOption,
    api_client,
    usage_error,
)
from tierq.cli.common import console
from tierq.client import AsyncClient
from tierq.client.worker import AsyncWorker, Worker, WorkerStats, is_coroutine_handler
from tierq.client.worker.loading import HandlerNotFound, load_handler
from tierq.client.worker.process import ISOLATIONS, check_picklable


def register(app: typer.Typer) -> None:
    @app.command()
    def worker(
        queue: Annotated[str, typer.Argument(help="The queue to work on.")],
        handler: Annotated[str, typer.Argument(
            help="The handler as module:function; it gets a ClaimedTask (payload, id, "
                 "attempt, …) and returns the result, or raises.")],
        concurrency: Annotated[int, typer.Option(
            "--concurrency", "-c", min=1, max=500,
            help="Handler threads (coroutines at once for an async handler).")] = 4,
        tenant: Annotated[str | None, typer.Option(
            help="Only this tenant's tasks (default: fairly across tenants).",
            show_default=False)] = None,
        lease_seconds: Annotated[int | None, typer.Option(
            min=1, help="Lease length (default: the queue's).", show_default=False)] = None,
        wait: Annotated[float, typer.Option(
            min=0, max=20, help="Long-poll seconds per claim.")] = 5.0,
        grace: Annotated[float, typer.Option(
            min=0, help="On SIGTERM/Ctrl-C, seconds running tasks may finish. Past it the "
                        "worker exits without them: their leases run out and the reaper "
                        "retries them (never another worker while they may still run).")
            ] = 25.0,
        burst: Annotated[bool, typer.Option(
            "--burst", help="Exit once no task is ready (delayed retries are not waited "
                            "for).")] = False,
        name: Annotated[str | None, typer.Option(
            help="Worker name shown on its leases (default host-pid-random).",
            show_default=False)] = None,
        isolation: Annotated[str, typer.Option(
            help="'thread', or 'process': each handler slot runs in a child process, killed "
                 "when its task reaches its time limit (or is cancelled and does not "
                 "return). Not for an async handler.")] = "thread",
        app_dir: Annotated[Path, typer.Option(
            help="Directory to import the handler's module from.")] = Path("."),
        log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR.")]
            = "INFO",
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
    ) -> None:
        """Run a handler (module:function) on the tasks of a queue.

        A coroutine function (async def) runs on an event loop, --concurrency at once. The
        handler's return value acks the task (kept as its result); RetryableError or
        any other exception retries it; PermanentError dead-letters it. SIGTERM or Ctrl-C:
        stop claiming, let running tasks finish for --grace seconds, release the tasks not
        started, and exit 0. Tasks still running past the grace are left to their leases,
        which run out (the reaper then counts the attempt and retries them): the process
        then ends at once (exit 0 too), whatever threads its handlers started, so nothing
        of those tasks runs here once another worker may get them. A second Ctrl-C ends
        the grace at once. Exit 2 when the handler cannot be loaded, 1 when the API refuses
        the worker."""
        level = logging.getLevelName(log_level.upper())
        if not isinstance(level, int):
            usage_error(f"--log-level: unknown level {log_level!r}")
        try:
            function = load_handler(handler, search_path=str(app_dir))
        except HandlerNotFound as exc:
            usage_error(str(exc))
        logging.basicConfig(level=level, format="%(message)s", datefmt="[%X]", force=True,
                            handlers=[RichHandler(console=console, show_path=False)])
        for noisy in ("httpx", "httpcore"):  # one line per request otherwise
            logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
        options: dict[str, Any] = {
            "concurrency": concurrency, "tenant": tenant, "lease_seconds": lease_seconds,
            "wait_seconds": wait, "grace_seconds": grace, "name": name, "burst": burst}
        if isolation not in ISOLATIONS:
            usage_error(f"--isolation: one of {', '.join(ISOLATIONS)}, not {isolation!r}")
        if is_coroutine_handler(function):
            if isolation != "thread":
                usage_error("--isolation process runs threads' handlers in processes; an "
                            "async handler's coroutines are cancelled at their limit anyway")
            asyncio.run(run_async(function, queue, options, url, token, sigv4, aws_region))
            return
        if isolation == "process":
            try:
                check_picklable(function)
            except ValueError as exc:
                usage_error(str(exc))
        with api_client(url, token, sigv4, aws_region) as api:
            runner = Worker(api, queue, function, isolation=isolation, **options)
            report(runner.name, runner.run())


async def run_async(function: Any, queue: str, options: dict[str, Any], url: str,
                    token: str | None, sigv4: bool, aws_region: str | None) -> None:
    """Run a coroutine handler with the AsyncWorker; the API's errors end the command as the
    other commands' do (:func:`tierq.cli.api_options.api_client`'s client is blocking, so
    its settings are checked there and an ``AsyncClient`` made with the same)."""
    with api_client(url, token, sigv4, aws_region) as checked:
        async with AsyncClient(checked.base_url, token=token, sigv4=sigv4,
                               aws_region=aws_region) as api:
            runner = AsyncWorker(api, queue, function, **options)
            report(runner.name, await runner.run())


def report(name: str, stats: WorkerStats) -> None:
    """Print what the worker did; end the process at once when it abandoned tasks (their
    handlers' threads must not outlive it: :func:`end_now`)."""
    table = Table(title=f"worker {name}")
    table.add_column("what")
    table.add_column("tasks", justify="right")
    for what, value in stats.as_dict().items():
        table.add_row(what.replace("_", " "), f"{value:,}")
    console.print(table)
    if stats.abandoned:
        end_now()


# The exit status of a worker that stopped with tasks abandoned to their leases: a stop as
# asked, like any other.
ABANDONED_EXIT = 0


def end_now() -> None:
    """End the process now (``os._exit``), its logs and output written first: the handlers of
    abandoned tasks may still run on threads the interpreter would wait for at exit
    (``ThreadPoolExecutor``'s are not daemons), and must not outlive their leases. (Child
    processes a handler started are not ended by this: see the Worker's docstring.)"""
    logging.shutdown()  # flushes every handler
    for stream in (sys.stdout, sys.stderr):
        # a stream closed or gone: nothing more can be written to it
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(ABANDONED_EXIT)
