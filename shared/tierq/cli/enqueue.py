"""``tierq enqueue``: add tasks to a queue over the HTTP API, from arguments or from a
JSON-lines file (with a progress bar)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
import typer
from pydantic import ValidationError
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tierq.cli.api_options import (
    JsonOption,
    RegionOption,
    SigV4Option,
    TokenOption,
    UrlOption,
    api_client,
    out,
    parse_json,
    print_json,
    usage_error,
)
from tierq.cli.common import console
from tierq.client.errors import field_path
from tierq.client.http import MAX_BATCH
from tierq.errors import TierqError
from tierq.models import EnqueueOutcome, TaskIn
from tierq.models.tasks import MAX_TIMEOUT_SECONDS

MAX_LINE_ERRORS = 20


def read_lines(source: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, text) of the non-blank lines of a file, or of stdin for ``-``."""
    stream = sys.stdin.buffer if str(source) == "-" else source.open("rb")
    try:
        for number, line in enumerate(stream, start=1):
            line = line.strip()
            if line:
                yield number, line
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def load_file(source: Path, defaults: dict[str, Any], payloads_only: bool) -> list[TaskIn]:
    """Every task of the file, validated; exit 2 listing the bad lines (nothing is sent)."""
    if str(source) != "-" and not source.is_file():
        usage_error(f"--file: no such file: {source}")
    tasks: list[TaskIn] = []
    errors: list[str] = []
    for number, line in read_lines(source):
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            errors.append(f"line {number}: not valid JSON ({exc})")
            continue
        if payloads_only:
            fields = {**defaults, "payload": value}
        elif not isinstance(value, dict):
            errors.append(f"line {number}: expected a task object like "
                          '{"payload": ..., "key": ...} (use --payloads for bare payloads)')
            continue
        else:
            fields = {**defaults, **value}
        try:
            tasks.append(TaskIn.model_validate(fields))
        except ValidationError as exc:
            for error in exc.errors():
                message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
                errors.append(f"line {number}: {field_path(tuple(error['loc']))}: {message}")
        if len(errors) >= MAX_LINE_ERRORS:
            errors.append("… (stopped after the first errors)")
            break
    if errors:
        console.print(f"[red]error:[/] {source}: invalid task(s); nothing was enqueued",
                      highlight=False)
        for problem in errors:
            console.print(f"  - {problem}", highlight=False)
        raise typer.Exit(2)
    if not tasks:
        usage_error(f"{source}: no tasks in the file")
    return tasks


def summary_table(outcomes: list[EnqueueOutcome]) -> Table:
    table = Table(title=f"{len(outcomes):,} task(s)")
    table.add_column("outcome")
    table.add_column("state")
    table.add_column("tasks", justify="right")
    for (outcome, state), n in sorted(Counter((o.outcome, o.state) for o in outcomes).items()):
        table.add_row(outcome, state, f"{n:,}")
    return table


def outcomes_table(outcomes: list[EnqueueOutcome]) -> Table:
    table = Table()
    for column in ("id", "outcome", "state", "tenant", "key"):
        table.add_column(column)
    for o in outcomes:
        table.add_row(str(o.id), o.outcome, o.state, o.tenant, o.key or "")
    return table


def register(app: typer.Typer) -> None:
    @app.command()
    def enqueue(
        queue: Annotated[str, typer.Argument(help="The queue.")],
        payloads: Annotated[list[str] | None, typer.Argument(
            help="Payloads as JSON, one task each (e.g. '{\"to\": \"a@b.c\"}' or '\"text\"').",
            show_default=False)] = None,
        file: Annotated[Path | None, typer.Option(
            "--file", "-f", help="JSON-lines file of tasks ({\"payload\": …, \"key\": …, "
                                 "\"priority\": …}), `-` for stdin.", show_default=False)] = None,
        payloads_only: Annotated[bool, typer.Option(
            "--payloads", help="Each line of --file is a bare payload, not a task object.")]
            = False,
        key: Annotated[str | None, typer.Option(
            help="Idempotency key (one task only).", show_default=False)] = None,
        priority: Annotated[int | None, typer.Option(
            help="0..9; 9 is claimed first.", show_default=False)] = None,
        delay: Annotated[float | None, typer.Option(
            "--delay", help="Seconds before the task can be claimed.", show_default=False)]
            = None,
        run_at: Annotated[datetime | None, typer.Option(
            "--run-at", help="When the task can be claimed (ISO 8601, UTC unless given).",
            show_default=False, formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S",
                                          "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"])] = None,
        tenant: Annotated[str | None, typer.Option(help="Tenant (default '_').",
                                                   show_default=False)] = None,
        max_attempts: Annotated[int | None, typer.Option(
            help="Attempts before the task is dead (default: the queue's).",
            show_default=False)] = None,
        on_conflict: Annotated[Literal["ignore", "replace"] | None, typer.Option(
            "--on-conflict", help="When a live task has the key: keep it, or update it in "
                                  "place.", show_default=False)] = None,
        timeout: Annotated[int | None, typer.Option(
            "--timeout", min=1, max=MAX_TIMEOUT_SECONDS,
            help="The longest one attempt may run, in seconds (default: the queue's "
                 "timeout_seconds, if any).", show_default=False)] = None,
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Enqueue tasks from JSON arguments or a JSON-lines file.

        PAYLOADS are JSON values, one task each; --file takes one task object per line
        (validated entirely first: a bad line enqueues nothing) and shows a progress bar.
        Options apply to every task (for a file, to the lines that do not set them).
        Exit 0 when all were accepted, 1 when the API refused them, 2 for bad input."""
        if bool(payloads) == (file is not None):
            usage_error("give PAYLOADS or --file (one of them)")
        defaults: dict[str, Any] = {
            name: value for name, value in {
                "key": key, "priority": priority, "delay_seconds": delay, "run_at": run_at,
                "tenant": tenant, "max_attempts": max_attempts, "on_conflict": on_conflict,
                "timeout_seconds": timeout,
            }.items() if value is not None}
        if file is not None:
            if key is not None:
                usage_error("--key names one task; put keys in the file's lines")
            tasks = load_file(file, defaults, payloads_only)
        else:
            assert payloads is not None
            if key is not None and len(payloads) > 1:
                usage_error("--key names one task; give one payload with it")
            tasks = []
            for i, text in enumerate(payloads, start=1):
                fields = {**defaults, "payload": parse_json(text, f"payload #{i}")}
                try:
                    tasks.append(TaskIn.model_validate(fields))
                except ValidationError as exc:
                    first = exc.errors()[0]
                    usage_error(f"{field_path(tuple(first['loc']))}: "
                                f"{str(first['msg']).removeprefix('Value error, ')}")

        outcomes: list[EnqueueOutcome] = []
        with api_client(url, token, sigv4, aws_region) as api:
            if file is None or len(tasks) <= MAX_BATCH:
                outcomes = api.enqueue(queue, tasks)
            else:
                with Progress(TextColumn("enqueue [bold]{task.description}"), BarColumn(),
                              MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                              console=console) as progress:
                    bar = progress.add_task(queue, total=len(tasks))
                    for start in range(0, len(tasks), MAX_BATCH):
                        batch = tasks[start:start + MAX_BATCH]
                        try:
                            outcomes.extend(api.enqueue(queue, batch))
                        except TierqError:
                            console.print(f"enqueued {len(outcomes):,} of {len(tasks):,} "
                                          "task(s) (lines up to that point) before the error",
                                          highlight=False)
                            raise
                        progress.advance(bar, len(batch))
        if as_json:
            print_json([o.model_dump(mode="json") for o in outcomes])
        elif file is not None:
            out.print(summary_table(outcomes))
        else:
            out.print(outcomes_table(outcomes))
