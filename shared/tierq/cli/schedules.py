"""``tierq schedules …``: cron schedules whose occurrences are installed as keyed delayed
tasks (put, get, list, delete, and one tick by hand).

    tierq schedules put nightly --queue reports --daily 02:30 --timezone Europe/Berlin \\
        --payload '{"report": "sales"}'
    tierq schedules put minutely --file schedule.json      # the PUT body as JSON
    tierq schedules list
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from tierq.cli.common import console, engine
from tierq.models.schedules import ScheduleView


def _fail(field: str, message: str) -> typer.Exit:
    console.print(f"[red]error (invalid_input):[/] {field}: {message}")
    return typer.Exit(1)


def _read_body(file: Path | None) -> dict[str, Any]:
    if file is None:
        return {}
    try:
        body = json.loads(file.read_text("utf-8"))
    except OSError as exc:
        raise _fail("--file", f"cannot read {file}: {exc.strerror}") from exc
    except ValueError as exc:
        raise _fail("--file", f"{file} is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise _fail("--file", f"{file} must hold a JSON object (the PUT body)")
    return body


def _when(view: ScheduleView) -> str:
    if view.cron is not None:
        return f"cron {view.cron}"
    if view.every_seconds is not None:
        return f"every {view.every_seconds:g}s"
    return "daily " + ", ".join(view.daily or [])


def _print_json(data: Any) -> None:
    typer.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Cron schedules: next occurrences kept installed as keyed delayed tasks.",
        no_args_is_help=True,
    )
    app.add_typer(group, name="schedules")

    @group.command("put")
    def put(
        name: Annotated[str, typer.Argument(help="Schedule name (A-Z a-z 0-9 _ . -).")],
        file: Annotated[Path | None, typer.Option(
            "--file", "-f", help="The PUT body as a JSON file; options below override it.",
        )] = None,
        queue: Annotated[str | None, typer.Option(help="Queue of the occurrences.")] = None,
        payload: Annotated[str | None, typer.Option(
            help="Payload of every occurrence, as JSON (e.g. '{\"report\": \"sales\"}').",
        )] = None,
        tenant: Annotated[str | None, typer.Option(help="Tenant (default _).")] = None,
        priority: Annotated[int | None, typer.Option(help="0..9; 9 is claimed first.")] = None,
        horizon: Annotated[int | None, typer.Option(
            help="Future occurrences kept installed (default 4).")] = None,
        cron: Annotated[str | None, typer.Option(
            help="Cron expression: 5 fields, or 6 with seconds first.")] = None,
        every_seconds: Annotated[float | None, typer.Option(
            "--every-seconds", help="A fixed period in seconds (at least 1).")] = None,
        daily: Annotated[list[str] | None, typer.Option(
            help="A time of day HH:MM[:SS]; repeat for several.")] = None,
        timezone: Annotated[str | None, typer.Option(
            help="IANA time zone of cron and daily (default UTC).")] = None,
        enabled: Annotated[bool | None, typer.Option(
            "--enabled/--disabled", help="A disabled schedule installs nothing.")] = None,
    ) -> None:
        """Create or replace a schedule and install its next occurrences now."""
        body = _read_body(file)
        if payload is not None:
            try:
                body["payload"] = json.loads(payload)
            except ValueError as exc:
                raise _fail("--payload", f"not JSON: {exc}") from exc
        options = {"queue": queue, "tenant": tenant, "priority": priority, "horizon": horizon,
                   "cron": cron, "every_seconds": every_seconds, "daily": daily,
                   "timezone": timezone, "enabled": enabled}
        body.update({k: v for k, v in options.items() if v is not None})
        with engine() as tq:
            view = tq.put_schedule(name, body)
        _print_json(view.model_dump(mode="json"))

    @group.command("get")
    def get(name: Annotated[str, typer.Argument(help="Schedule name.")],
            tenant: Annotated[str | None, typer.Option(
                help="Whose schedule (names are per tenant; default _).")] = None) -> None:
        """A schedule, its next occurrences and the occurrences installed as tasks."""
        with engine() as tq:
            view = tq.get_schedule(name, tenant)
        _print_json(view.model_dump(mode="json"))

    @group.command("list")
    def list_(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
              tenant: Annotated[str | None, typer.Option(
                  help="Only this tenant's schedules.")] = None,
              ) -> None:
        """Every schedule with its next occurrence (a table, or --json)."""
        with engine() as tq:
            views = list(tq.schedules_after(None, limit=sys.maxsize, tenant=tenant))
        if as_json:
            _print_json({"schedules": [v.model_dump(mode="json") for v in views]})
            return
        table = Table(title=f"{len(views)} schedule(s)")
        for column in ("name", "queue", "tenant", "when", "timezone", "enabled", "next (UTC)",
                       "installed"):
            table.add_column(column)
        for v in views:
            upcoming = v.next_occurrences[0].strftime("%Y-%m-%d %H:%M:%S") \
                if v.next_occurrences else "-"
            table.add_row(v.name, v.queue, v.tenant, _when(v), v.timezone or "-",
                          "yes" if v.enabled else "no", upcoming, str(v.installed_count))
        Console().print(table)

    @group.command("delete")
    def delete(name: Annotated[str, typer.Argument(help="Schedule name.")],
               tenant: Annotated[str | None, typer.Option(
                   help="Whose schedule (names are per tenant; default _).")] = None) -> None:
        """Remove a schedule and withdraw its pending occurrences (claimed ones finish)."""
        with engine() as tq:
            removed = tq.delete_schedule(name, tenant)
        _print_json(removed.model_dump(mode="json"))

    @group.command("tick")
    def tick() -> None:
        """Run one cron tick now (what the cron_tick function does every few seconds; on
        every shard of TIERQ_SHARD_URLS)."""
        from tierq.maintenance.cron_tick import CronTickSummary

        with engine() as tq:
            ran = tq.run_job("cron_tick")
        total = ran.total or CronTickSummary()  # (no shard answered: nothing done)
        down = {name: s.message for name, s in ran.down.items()}
        out: dict[str, Any] = {
            "schedules": total.schedules, "installed": total.installed,
            "withdrawn": total.withdrawn, "busy": total.busy, "failed": total.failed}
        if len(ran.by_shard) > 1:
            out["shards_down"] = down
        _print_json(out)
        if out["failed"] or down:
            raise typer.Exit(1)
