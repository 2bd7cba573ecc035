"""``tierq demo``: tierq end to end on a local stack of its own, with live progress and a
summary (the demo itself is :mod:`tierq.local.demo`)."""

from __future__ import annotations

from typing import Annotated

import typer

from tierq.cli.common import console


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(
        tasks: Annotated[int, typer.Option(min=1, help="Tasks in the burst.")] = 20_000,
        warm_max: Annotated[int, typer.Option(min=1, help="The demo queue's warm tier cap.")]
            = 1_000,
        workers: Annotated[int, typer.Option(min=1, max=16, help="Workers, each with its "
                                                                  "own threads.")] = 2,
        concurrency: Annotated[int, typer.Option(min=1, max=256, help="Threads per worker.")]
            = 32,
        work_ms: Annotated[float, typer.Option(min=0, help="Pretend work per burst task.")]
            = 1.0,
        timeout: Annotated[float, typer.Option(min=10, help="Give up after this many "
                                                            "seconds.")] = 180.0,
        port: Annotated[int | None, typer.Option(help="Port of the local API (default: a "
                                                      "free one).", show_default=False)]
            = None,
        keep_running: Annotated[bool, typer.Option(
            "--keep-running", help="Leave the stack and dashboard up after the summary, "
                                   "until Ctrl-C.")] = False,
    ) -> None:
        """Run tierq end to end on the local stack with live progress and a summary.

        A burst far above warm_max, workers draining it through the hysteresis, a delayed
        task and a schedule firing, a failing task dead-lettered and replayed; the
        dashboard's address is printed while it runs. Exit 0 when everything was seen."""
        # imported here: the client, the worker and rich's live display are for this command
        from tierq.local.demo import DemoPlan, demo_on_local_stack

        plan = DemoPlan(tasks=tasks, warm_max=warm_max, workers=workers,
                        concurrency=concurrency, work_ms=work_ms, timeout=timeout)
        code = demo_on_local_stack(plan, out=console, port=port, keep_running=keep_running)
        if code:
            raise typer.Exit(code)
