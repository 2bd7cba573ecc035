"""``tierq stats``: live counts per (queue, tenant) from the HTTP API, as a table that
refreshes in place (or once, or as JSON)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

import typer
from rich.live import Live
from rich.table import Table

from tierq.cli.api_options import (
    JsonOption,
    RegionOption,
    SigV4Option,
    TokenOption,
    UrlOption,
    age,
    api_client,
    out,
    print_json,
)
from tierq.client import Client
from tierq.client.errors import ApiError, ConnectionFailed
from tierq.models import TenantCounts

COUNTS = ("warm", "cold", "waiting", "held", "delayed", "leased", "dead")


@dataclass
class Row:
    queue: str
    tenant: str
    mode: str
    warm: int
    cold: int
    waiting: int
    held: int
    delayed: int
    leased: int
    dead: int
    oldest_seconds: float | None
    groups: int = 0  # groups with work
    head_seconds: float | None = None  # the oldest group head's age

    @property
    def total(self) -> int:
        return sum(getattr(self, name) for name in COUNTS)


def oldest_seconds(row: TenantCounts, now: datetime | None) -> float | None:
    if row.oldest_ready_age_seconds is not None:
        return row.oldest_ready_age_seconds
    if row.oldest_ready_at is None or now is None:
        return None
    return (now - row.oldest_ready_at).total_seconds()


def rows_of(counts: list[TenantCounts], now: datetime | None, *, by_queue: bool,
            queues: list[str] | None) -> list[Row]:
    wanted = set(queues or [])
    rows = [Row(c.queue, c.tenant, c.mode, c.warm, c.cold, c.waiting, c.held, c.delayed,
                c.leased, c.dead, oldest_seconds(c, now), c.groups,
                c.oldest_group_head_age_seconds)
            for c in counts if not wanted or c.queue in wanted]
    if by_queue:
        merged: dict[str, Row] = {}
        tenants: dict[str, int] = {}
        for r in rows:
            tenants[r.queue] = tenants.get(r.queue, 0) + 1
            m = merged.get(r.queue)
            if m is None:
                merged[r.queue] = Row(r.queue, "", r.mode, r.warm, r.cold, r.waiting,
                                      r.held, r.delayed, r.leased, r.dead, r.oldest_seconds,
                                      r.groups, r.head_seconds)
                continue
            m.mode = "cold" if "cold" in (m.mode, r.mode) else "warm"
            for name in (*COUNTS, "groups"):
                setattr(m, name, getattr(m, name) + getattr(r, name))
            m.oldest_seconds = _older(m.oldest_seconds, r.oldest_seconds)
            m.head_seconds = _older(m.head_seconds, r.head_seconds)
        for queue, row in merged.items():
            row.tenant = f"{tenants[queue]} tenant{'s' if tenants[queue] != 1 else ''}"
        rows = list(merged.values())
    return sorted(rows, key=lambda r: (r.queue, r.tenant))


def _older(a: float | None, b: float | None) -> float | None:
    """The larger of two ages, either of which may be missing."""
    ages = [x for x in (a, b) if x is not None]
    return max(ages) if ages else None


def table_of(rows: list[Row], *, by_queue: bool, caption: str | None = None) -> Table:
    table = Table(title="tierq queues", caption=caption)
    table.add_column("queue", no_wrap=True)
    table.add_column("tenants" if by_queue else "tenant", no_wrap=True)
    table.add_column("mode")
    for name in (*COUNTS, "total"):
        table.add_column(name, justify="right")
    table.add_column("oldest", justify="right")
    table.add_column("groups", justify="right")
    table.add_column("oldest head", justify="right")
    for r in rows:
        mode = "[blue]cold[/]" if r.mode == "cold" else "[dark_orange]warm[/]"
        dead = f"[red]{r.dead:,}[/]" if r.dead else "0"
        table.add_row(r.queue, r.tenant, mode, f"{r.warm:,}", f"{r.cold:,}",
                      f"{r.waiting:,}", f"{r.held:,}", f"{r.delayed:,}", f"{r.leased:,}", dead,
                      f"{r.total:,}", age(r.oldest_seconds), f"{r.groups:,}",
                      age(r.head_seconds))
    if not rows:
        table.add_row("(no queues yet)", *[""] * (len(COUNTS) + 5))
    return table


def fetch(api: Client, *, by_queue: bool, queues: list[str] | None) -> list[Row]:
    page = api.metrics_detailed_page()
    return rows_of(page.queues, page.timestamp, by_queue=by_queue, queues=queues)


def register(app: typer.Typer) -> None:
    @app.command()
    def stats(
        queue: Annotated[list[str] | None, typer.Option(
            "--queue", "-q", help="Only this queue (repeatable).", show_default=False)] = None,
        by_queue: Annotated[bool, typer.Option(
            "--group-by-queue", help="One row per queue, summed over its tenants.")] = False,
        once: Annotated[bool, typer.Option(
            "--once", help="Print the table once and exit instead of refreshing it.")] = False,
        interval: Annotated[float, typer.Option(
            min=0.2, help="Seconds between refreshes.")] = 2.0,
        url: UrlOption = "http://127.0.0.1:3000",
        token: TokenOption = None,
        sigv4: SigV4Option = False,
        aws_region: RegionOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Live counts per queue and tenant.

        Warm, cold, waiting, held, delayed, leased and dead counts, the age of the oldest ready
        task, the groups with work and the age of the oldest group head, refreshed in place
        until Ctrl-C (an unreachable API is shown and retried). --once or --json print once
        (exit 1 when the API cannot answer)."""
        with api_client(url, token, sigv4, aws_region) as api:
            if once or as_json:
                rows = fetch(api, by_queue=by_queue, queues=queue)
                if as_json:
                    print_json([{**r.__dict__, "total": r.total} for r in rows])
                else:
                    out.print(table_of(rows, by_queue=by_queue))
                return
            rows = []
            caption = None
            try:
                with Live(table_of(rows, by_queue=by_queue, caption="connecting…"), console=out,
                          auto_refresh=False) as live:
                    while True:
                        try:
                            rows = fetch(api, by_queue=by_queue, queues=queue)
                            caption = (f"{time.strftime('%H:%M:%S')} · every {interval:g}s · "
                                       "Ctrl-C to quit")
                        except (ApiError, ConnectionFailed) as exc:
                            caption = f"[red]{exc}[/] (retrying)"
                        live.update(table_of(rows, by_queue=by_queue, caption=caption),
                                    refresh=True)
                        time.sleep(interval)
            except KeyboardInterrupt:
                pass

