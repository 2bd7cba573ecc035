"""``tierq dlq list | replay | purge``: a queue's dead letters over the HTTP API."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from tierq.cli.api_options import (
    JsonOption,
    RegionOption,
    SigV4Option,
    TokenOption,
    UrlOption,
    api_client,
    fail,
    out,
    print_json,
    usage_error,
)
from tierq.cli.common import console
from tierq.models import TaskView
from tierq.models.envelopes import PurgeResult, ReplayResult

dlq_app = typer.Typer(help="Dead letters: list, replay, purge.", no_args_is_help=True)


def dead_table(tasks: list[TaskView], queue: str) -> Table:
    table = Table(title=f"dead letters of {queue!r}")
    table.add_column("id", no_wrap=True)
    table.add_column("tenant")
    table.add_column("group")
    table.add_column("attempts", justify="right")
    table.add_column("dead since")
    table.add_column("last error", overflow="fold", ratio=1)
    for t in tasks:
        first_line = (t.last_error or "").strip().splitlines()[:1]
        table.add_row(str(t.id), t.tenant, t.group or "-", f"{t.attempts}/{t.max_attempts}",
                      t.finished_at.strftime("%m-%d %H:%M:%S") if t.finished_at else "-",
                      first_line[0] if first_line else "-")
    return table


def selection(ids: list[str] | None, everything: bool) -> tuple[list[str] | None, bool]:
    if everything and ids:
        usage_error("give task IDS or --all, not both")
    if not everything and not ids:
        usage_error("give task IDS, or --all for every dead letter of the queue")
    return ids, everything


@dlq_app.command("list")
def list_dead(
    queue: Annotated[str, typer.Argument(help="The queue.")],
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's.",
                                               show_default=False)] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many at most.")] = 20,
    url: UrlOption = "http://127.0.0.1:3000",
    token: TokenOption = None,
    sigv4: SigV4Option = False,
    aws_region: RegionOption = None,
    as_json: JsonOption = False,
) -> None:
    """List dead letters, most recently dead first, with their last error."""
    with api_client(url, token, sigv4, aws_region) as api:
        page = api.dlq_list(queue, tenant=tenant, limit=limit)
    if as_json:
        print_json(page.model_dump(mode="json"))
        return
    if not page.tasks:
        console.print(f"no dead letters in {queue!r}", highlight=False)
        return
    out.print(dead_table(page.tasks, queue))
    if page.next_cursor:
        console.print(f"(more than {limit}; raise --limit to see more)", highlight=False)


@dlq_app.command()
def replay(
    queue: Annotated[str, typer.Argument(help="The queue.")],
    ids: Annotated[list[str] | None, typer.Argument(help="Task ids.", show_default=False)]
        = None,
    everything: Annotated[bool, typer.Option("--all", help="Every dead letter of the queue.")]
        = False,
    url: UrlOption = "http://127.0.0.1:3000",
    token: TokenOption = None,
    sigv4: SigV4Option = False,
    aws_region: RegionOption = None,
    as_json: JsonOption = False,
) -> None:
    """Make dead letters ready again.

    They go to the back of their line with fresh attempts. With --all the API answers a
    bounded slice per request; the command repeats it until none is left. Exit 1 when some
    of the given ids were skipped (not dead, or a live task holds the key)."""
    chosen, everything = selection(ids, everything)
    result = ReplayResult(replayed=[], skipped=[])
    with api_client(url, token, sigv4, aws_region) as api:
        for part in api.dlq_replay_slices(queue, chosen, all=everything):
            result.replayed.extend(part.replayed)
            result.skipped.extend(part.skipped)
            if part.more and not as_json:
                console.print(f"  replayed {len(result.replayed)} so far...", highlight=False)
    if as_json:
        print_json(result.model_dump(mode="json"))
    else:
        console.print(f"replayed {len(result.replayed)} task(s) of {queue!r}", highlight=False)
    if result.skipped:
        for task_id in result.skipped:
            console.print(f"  skipped {task_id}: not a dead letter (any more), or a live task "
                          "holds its key", highlight=False)
        if not everything:
            fail(f"{len(result.skipped)} task(s) not replayed")


@dlq_app.command()
def purge(
    queue: Annotated[str, typer.Argument(help="The queue.")],
    ids: Annotated[list[str] | None, typer.Argument(help="Task ids.", show_default=False)]
        = None,
    everything: Annotated[bool, typer.Option("--all", help="Every dead letter of the queue.")]
        = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
        = False,
    url: UrlOption = "http://127.0.0.1:3000",
    token: TokenOption = None,
    sigv4: SigV4Option = False,
    aws_region: RegionOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete dead letters for good."""
    chosen, everything = selection(ids, everything)
    if everything and not yes and not typer.confirm(
            f"delete every dead letter of {queue!r}?", err=True):
        fail("nothing deleted", 1)
    result = PurgeResult(purged=[])
    with api_client(url, token, sigv4, aws_region) as api:
        for part in api.dlq_purge_slices(queue, chosen, all=everything):
            result.purged.extend(part.purged)
            if part.more and not as_json:
                console.print(f"  deleted {len(result.purged)} so far...", highlight=False)
    if as_json:
        print_json(result.model_dump(mode="json"))
    else:
        console.print(f"deleted {len(result.purged)} dead letter(s) of {queue!r}",
                      highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(dlq_app, name="dlq")
