"""``tierq flow FILE.json``: create a flow (tasks that wait for each other) over the HTTP API
in one request, all or nothing (``POST /v1/flows``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer
from pydantic import ValidationError
from rich.table import Table

from tierq.cli.api_options import (
    JsonOption,
    RegionOption,
    SigV4Option,
    TokenOption,
    UrlOption,
    api_client,
    out,
    print_json,
    usage_error,
)
from tierq.client.errors import field_path
from tierq.models.flows import FlowIn, FlowResult


def load_flow(source: Path) -> FlowIn:
    """The flow of a JSON file (``{"tenant": …, "tasks": [...]}``, or the list of tasks
    alone), or of stdin for ``-``; exit 2 naming what is wrong (nothing is sent)."""
    if str(source) != "-" and not source.is_file():
        usage_error(f"FILE: no such file: {source}")
    text = sys.stdin.buffer.read() if str(source) == "-" else source.read_bytes()
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        usage_error(f"{source}: not valid JSON ({exc})")
    if isinstance(value, list):
        value = {"tasks": value}
    try:
        return FlowIn.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        usage_error(f"{source}: {field_path(tuple(first['loc']))}: "
                    f"{str(first['msg']).removeprefix('Value error, ')}")


def result_table(result: FlowResult) -> Table:
    table = Table(title=f"flow of tenant {result.tenant}: {len(result.tasks)} task(s)")
    for column in ("ref", "id", "queue", "state"):
        table.add_column(column)
    for ref, task in result.tasks.items():
        table.add_row(ref, str(task.id), task.queue, task.state)
    return table


def register(app: typer.Typer) -> None:
    @app.command()
    def flow(
        file: Annotated[Path, typer.Argument(
            help="JSON file: {\"tenant\": …, \"tasks\": [{\"ref\": …, \"queue\": …, "
                 "\"payload\": …, \"after\": [refs or ids]}, …]}, or `-` for stdin.")],
        tenant: Annotated[str | None, typer.Option(
            help="Tenant of every task (overrides the file's).", show_default=False)] = None,
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Create a flow: tasks that wait for each other, in one request, all or nothing.

        Each task names its queue and a ref unique in the file; `after` lists refs of the
        file or ids of existing tasks it waits for. Prints each ref's task id and state.
        Exit 0 when created, 1 when the API refused it (a cycle, an unknown ref or id: the
        field is named), 2 for bad input."""
        model = load_flow(file)
        with api_client(url, token, sigv4, aws_region) as api:
            result = api.flow(model.tasks, tenant=tenant or model.tenant)
        if as_json:
            print_json(result.model_dump(mode="json"))
        else:
            out.print(result_table(result))
