"""``tierq claim``, ``tierq ack``, ``tierq nack`` and ``tierq heartbeat``: take, extend and
settle tasks by hand over the HTTP API, for debugging (a worker does this in a loop:
``tierq worker``); ``tierq running``: the current leases with their progress; ``tierq
wait``: wait for a task's end (``Client.wait``); ``tierq cancel``: cancel a task, running or
not (``Client.cancel``)."""

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
    parse_json,
    print_json,
    short_json,
)
from tierq.cli.common import console
from tierq.models import ClaimedTask, Rejection, RunningLease


def claims_table(tasks: list[ClaimedTask]) -> Table:
    table = Table()
    table.add_column("id", no_wrap=True)
    for column in ("tenant", "group", "priority", "attempt", "lease until"):
        table.add_column(column)
    table.add_column("lease_token", no_wrap=True)
    table.add_column("payload", overflow="fold")
    for t in tasks:
        table.add_row(str(t.id), t.tenant, t.group or "-", str(t.priority),
                      f"{t.attempt}/{t.max_attempts}",
                      t.lease_expires_at.strftime("%H:%M:%S"), t.lease_token,
                      short_json(t.payload))
    return table


def running_table(leases: list[RunningLease]) -> Table:
    table = Table()
    table.add_column("id", no_wrap=True)
    for column in ("queue", "tenant", "worker", "attempt", "running for", "lease until"):
        table.add_column(column)
    table.add_column("progress", overflow="fold")
    for r in leases:
        progress = "-" if r.progress is None else short_json(r.progress)
        if r.progress_at is not None:
            progress += f" ({r.progress_at.strftime('%H:%M:%S')})"
        table.add_row(str(r.id), r.queue, r.tenant, r.worker or "-", str(r.attempt),
                      f"{r.running_for_ms / 1000:.0f}s", r.lease_expires_at.strftime("%H:%M:%S"),
                      progress)
    return table


def refused(rejected: list[Rejection], what: str) -> None:
    for r in rejected:
        reason = ("the lease token is wrong or the lease expired" if r.reason == "not_owner"
                  else "the task no longer exists (cancelled, or already settled)")
        console.print(f"[red]{what} refused[/] for {r.id}: {r.reason} ({reason})",
                      highlight=False)
    fail(f"{len(rejected)} {what}(s) refused")


def print_claimed(queue: str, tasks: list[ClaimedTask], as_json: bool) -> None:
    """Claimed tasks with their lease tokens: JSON, a table, or that none was ready."""
    if as_json:
        print_json([t.model_dump(mode="json") for t in tasks])
    elif tasks:
        out.print(claims_table(tasks))
    else:
        console.print(f"no task ready in {queue!r}", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command()
    def claim(
        queue: Annotated[str, typer.Argument(help="The queue.")],
        max_tasks: Annotated[int, typer.Option("--max", min=1, max=500,
                                               help="How many tasks at most.")] = 1,
        lease_seconds: Annotated[int | None, typer.Option(
            help="Lease length (default: the queue's).", show_default=False)] = None,
        wait: Annotated[float, typer.Option(
            min=0, max=20, help="Long-poll up to this many seconds when none is ready.")] = 0,
        tenant: Annotated[str | None, typer.Option(
            help="Only this tenant's tasks.", show_default=False)] = None,
        worker: Annotated[str, typer.Option(help="Worker name shown on the lease.")] = "cli",
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Claim tasks with a lease (for debugging).

        Prints them with their lease tokens, for `tierq ack` / `tierq nack`. Exit 0 also
        when nothing was ready."""
        with api_client(url, token, sigv4, aws_region) as api:
            tasks = api.claim(queue, max=max_tasks, lease_seconds=lease_seconds,
                              tenant=tenant, worker=worker, wait_seconds=wait)
        print_claimed(queue, tasks, as_json)

    @app.command()
    def ack(
        queue: Annotated[str, typer.Argument(help="The queue.")],
        task_id: Annotated[str, typer.Argument(help="The task's id.")],
        lease_token: Annotated[str, typer.Argument(help="The lease token from the claim.")],
        result: Annotated[str | None, typer.Option(
            help="A result to keep with the task (JSON).", show_default=False)] = None,
        claim_next: Annotated[int | None, typer.Option(
            "--claim", min=1, max=500, help="Then claim up to this many tasks in the same "
                                            "request (printed as `tierq claim` prints them).",
            show_default=False)] = None,
        worker: Annotated[str, typer.Option(
            help="Worker name shown on the leases --claim takes.")] = "cli",
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Finish a claimed task, and with --claim claim the next ones in the same request.

        Exit 1 when the API refuses the ack (lease lost or expired); the tasks --claim took
        are printed first. A claim that failed after the ack is told, exit 0."""
        item = {"id": task_id, "lease_token": lease_token}
        if result is not None:
            item["result"] = parse_json(result, "--result")
        with api_client(url, token, sigv4, aws_region) as api:
            if claim_next is None:
                outcome = api.ack(queue, [item])
                tasks = None
            else:
                outcome = along = api.ack_and_claim(queue, [item], max=claim_next,
                                                    worker=worker)
                tasks = along.tasks
                if along.claim_error is not None:
                    console.print(f"[yellow]the claim failed[/] ({along.claim_error}); "
                                  "claim again later", highlight=False)
        if tasks is not None:
            print_claimed(queue, tasks, as_json)
        if outcome.rejected:
            refused(outcome.rejected, "ack")
        console.print(f"acked {task_id}", highlight=False)

    @app.command()
    def nack(
        queue: Annotated[str, typer.Argument(help="The queue.")],
        task_id: Annotated[str, typer.Argument(help="The task's id.")],
        lease_token: Annotated[str, typer.Argument(help="The lease token from the claim.")],
        error: Annotated[str, typer.Option(help="Why it failed (kept as last_error).")]
            = "failed (tierq nack)",
        retry_in: Annotated[float | None, typer.Option(
            "--retry-in", min=0, help="Retry after this many seconds (default: the queue's "
                                      "backoff).", show_default=False)] = None,
        dead: Annotated[bool, typer.Option("--dead", help="Dead-letter it now.")] = False,
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
    ) -> None:
        """Fail a claimed task.

        It is retried later, or dead at its last attempt (or with --dead). Exit 1 when the
        API refuses it."""
        item: dict[str, object] = {"id": task_id, "lease_token": lease_token, "error": error,
                                   "dead": dead}
        if retry_in is not None:
            item["retry_in_seconds"] = retry_in
        with api_client(url, token, sigv4, aws_region) as api:
            outcome = api.nack(queue, [item])
        if outcome.rejected:
            refused(outcome.rejected, "nack")
        state = "dead-lettered" if outcome.dead else "will be retried"
        console.print(f"nacked {task_id}: {state}", highlight=False)

    @app.command()
    def release(
        queue: Annotated[str, typer.Argument(help="The queue.")],
        task_id: Annotated[str, typer.Argument(help="The task's id.")],
        lease_token: Annotated[str, typer.Argument(help="The lease token from the claim.")],
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
    ) -> None:
        """Give a claimed task back unfinished.

        It returns to its old place in line, ready at once, and no attempt is counted.
        Exit 1 when the API refuses it (lease lost or expired)."""
        with api_client(url, token, sigv4, aws_region) as api:
            outcome = api.release(queue, [{"id": task_id, "lease_token": lease_token}])
        if outcome.rejected:
            refused(outcome.rejected, "release")
        console.print(f"released {task_id}: back in its place in line", highlight=False)

    @app.command()
    def heartbeat(
        queue: Annotated[str, typer.Argument(help="The queue.")],
        task_id: Annotated[str, typer.Argument(help="The task's id.")],
        lease_token: Annotated[str, typer.Argument(help="The lease token from the claim.")],
        extend: Annotated[int | None, typer.Option(
            min=1, help="Seconds from now (default: the queue's lease).",
            show_default=False)] = None,
        progress: Annotated[str | None, typer.Option(
            help="How far the task got, kept with its lease (JSON, at most 4 KiB).",
            show_default=False)] = None,
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
    ) -> None:
        """Extend a claimed task's lease, with its progress if given.

        Exit 1 when the API refuses it (lease lost or expired)."""
        item: dict[str, object] = {"id": task_id, "lease_token": lease_token}
        if extend is not None:
            item["extend_seconds"] = extend
        if progress is not None:
            item["progress"] = parse_json(progress, "--progress")
        with api_client(url, token, sigv4, aws_region) as api:
            outcome = api.heartbeat(queue, [item])
        if outcome.rejected:
            refused(outcome.rejected, "heartbeat")
        [extended] = outcome.extended
        console.print(f"extended {task_id} until {extended.lease_expires_at:%H:%M:%S}",
                      highlight=False)

    @app.command()
    def running(
        queue: Annotated[str | None, typer.Argument(
            help="Only this queue (default: every queue).", show_default=False)] = None,
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """List the tasks running now (their leases), oldest first, with each one's worker
        and last progress."""
        with api_client(url, token, sigv4, aws_region) as api:
            leases = api.running(queue)
        if as_json:
            print_json([lease.model_dump(mode="json") for lease in leases])
        else:
            out.print(running_table(leases))

    @app.command("wait")
    def wait_for(
        queue: Annotated[str, typer.Argument(help="The queue.")],
        task_id: Annotated[str, typer.Argument(help="The task's id.")],
        timeout: Annotated[float | None, typer.Option(
            min=0, help="Give up after this many seconds (default: wait until it ends).",
            show_default=False)] = None,
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Wait until a task is done, dead or cancelled, and print it.

        Woken by the task's end on the server (reads of up to 20 s each, no polling).
        Exit 0 when it is done; 1 when it is dead, cancelled, deleted (not found) or still
        running at --timeout."""
        with api_client(url, token, sigv4, aws_region) as api:
            task = api.wait(queue, task_id, timeout=timeout)
        if as_json:
            print_json(task.model_dump(mode="json"))
        else:
            console.print(f"{task.id}: {task.state} (attempts {task.attempts}/"
                          f"{task.max_attempts})"
                          + (f", group {task.group}" if task.group else ""), highlight=False)
            if task.result is not None:
                console.print(f"result: {short_json(task.result, 200)}", highlight=False)
            if task.last_error:
                console.print(f"last error: {task.last_error}", highlight=False)
            if task.progress is not None:
                at = f" (at {task.progress_at:%H:%M:%S})" if task.progress_at else ""
                console.print(f"progress: {short_json(task.progress, 200)}{at}",
                              highlight=False)
        if task.state in ("dead", "cancelled"):
            fail(f"task {task.id} is {task.state}")
        if task.state != "done":
            fail(f"task {task.id} did not end within {timeout:g} s (it is {task.state})"
                 if timeout is not None else f"task {task.id} is {task.state}")

    @app.command("cancel")
    def cancel(
        queue: Annotated[str, typer.Argument(help="The queue.")],
        task_id: Annotated[str, typer.Argument(help="The task's id.")],
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Cancel a task, running or not, and print it.

        It is kept as cancelled until its queue's retention ends. Waiting in line, it
        leaves at once; running, its worker is told at its next heartbeat (the handler's
        task.cancelled is set) and nothing is retried. Exit 0 when it is cancelled (or was
        already); 1 when it is done or dead already, or not found."""
        with api_client(url, token, sigv4, aws_region) as api:
            task = api.cancel(queue, task_id)
        if as_json:
            print_json(task.model_dump(mode="json"))
        else:
            console.print(f"cancelled {task.id} (attempts {task.attempts}/"
                          f"{task.max_attempts})", highlight=False)
