"""``tierq queue show`` and ``tierq queue set``: a queue's settings, its limits on claims and
their current use, over the HTTP API.

    tierq queue set emails --max-leased 5 --rate 20:5          # 20 tasks/s, bursts of 5
    tierq queue set emails --tenant-max-leased 2 --tenant-rate 1
    tierq queue set emails --rate none                          # clears the rate
    tierq queue show emails
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
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
from tierq.models import QueueView, TenantQueueView

CLEAR = "none"


def parse_count(text: str | None, option: str) -> int | str | None:
    """``N`` (at least 1) or ``none`` (clear); None when the option was not given. A
    returned ``CLEAR`` means null in the PUT body."""
    if text is None:
        return None
    if text.strip().lower() == CLEAR:
        return CLEAR
    try:
        value = int(text)
    except ValueError:
        usage_error(f"{option}: expected a whole number or 'none', got {text!r}")
    if value < 1:
        usage_error(f"{option}: must be at least 1 (or 'none' to clear it), got {value}")
    return value


def parse_rate(text: str | None, option: str) -> dict[str, Any] | str | None:
    """``PER_SECOND[:BURST]`` (e.g. ``20:5``, ``0.5``) or ``none``; None when not given."""
    if text is None:
        return None
    if text.strip().lower() == CLEAR:
        return CLEAR
    per_second_text, _, burst_text = text.partition(":")
    try:
        per_second = float(per_second_text)
        burst = int(burst_text) if burst_text else None
    except ValueError:
        usage_error(f"{option}: expected PER_SECOND[:BURST] (e.g. 20:5) or 'none', got {text!r}")
    if not per_second > 0:
        usage_error(f"{option}: PER_SECOND must be above 0, got {per_second_text}")
    if burst is not None and burst < 1:
        usage_error(f"{option}: BURST must be at least 1, got {burst}")
    return {"per_second": per_second} if burst is None \
        else {"per_second": per_second, "burst": burst}


def _read_body(file: Path | None) -> dict[str, Any]:
    if file is None:
        return {}
    try:
        body = json.loads(file.read_text("utf-8"))
    except OSError as exc:
        usage_error(f"--file: cannot read {file}: {exc.strerror}")
    except ValueError as exc:
        usage_error(f"--file: {file} is not JSON: {exc}")
    if not isinstance(body, dict):
        usage_error(f"--file: {file} must hold a JSON object (the PUT body)")
    return body


def _rate_text(rate: Any) -> str:
    return "-" if rate is None else f"{rate.per_second:g}/s, burst {rate.burst}"


def settings_table(view: QueueView) -> Table:
    """The settings, each limit beside its current use."""
    s = view.settings
    use = view.limits_use
    table = Table(title=f"queue {view.queue}", title_justify="left")
    table.add_column("setting")
    table.add_column("value")
    table.add_column("in use now")

    def used(value: Any) -> str:
        if value is None:
            return ""
        return f"{value:.1f} tokens" if isinstance(value, float) else str(value)

    table.add_row("max_leased", "-" if s.max_leased is None else str(s.max_leased),
                  used(use.leased) if use else "")
    table.add_row("rate", _rate_text(s.rate), used(use.rate_tokens) if use else "")
    table.add_row("tenant_max_leased",
                  "-" if s.tenant_max_leased is None else str(s.tenant_max_leased),
                  f"busiest tenant {use.tenant_leased_max}"
                  if use and use.tenant_leased_max is not None else "")
    table.add_row("tenant_rate", _rate_text(s.tenant_rate),
                  f"emptiest bucket {use.tenant_rate_tokens_min:.1f} tokens"
                  if use and use.tenant_rate_tokens_min is not None else "")
    table.add_row("group_max_leased", str(s.group_max_leased), f"{view.counts.held} held")
    consumer = s.consumer
    table.add_row("consumer", "-" if consumer is None else
                  f"{consumer.function} (batch {consumer.batch_size}, concurrency "
                  f"{consumer.max_concurrency or '-'}, window "
                  f"{consumer.max_batching_window_ms} ms)", "")
    table.add_row("paused", "yes" if s.paused else "no", "")
    table.add_row("lease_seconds", str(s.lease_seconds), f"{view.counts.leased} leased")
    table.add_row("timeout_seconds", "-" if s.timeout_seconds is None
                  else str(s.timeout_seconds), "")
    table.add_row("max_attempts", str(s.max_attempts), "")
    table.add_row("warm_max", str(s.warm_max), f"{view.counts.warm} warm, "
                                               f"{view.counts.cold} cold ({view.mode})")
    return table


def tenant_table(view: TenantQueueView) -> Table:
    """What a caller pinned to a tenant is shown: the settings its workers read, its counts."""
    s = view.settings
    b = s.backoff
    table = Table(title=f"queue {view.queue} (tenant {view.tenant})", title_justify="left")
    table.add_column("setting")
    table.add_column("value")
    table.add_column("yours now")
    table.add_row("paused", "yes" if s.paused else "no", "")
    table.add_row("lease_seconds", str(s.lease_seconds), f"{view.counts.leased} leased")
    table.add_row("max_attempts", str(s.max_attempts), f"{view.counts.dead} dead")
    table.add_row("backoff", f"{b.kind}, {b.base_seconds:g}s to {b.cap_seconds:g}s, "
                             f"jitter {b.jitter:g}", f"{view.counts.delayed} delayed")
    table.add_row("ready", "", f"{view.counts.warm} warm, {view.counts.cold} cold "
                               f"({view.mode})")
    table.add_row("group_max_leased", str(s.group_max_leased), f"{view.counts.held} held")
    return table


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="A queue's settings and limits on claims.", no_args_is_help=True)
    app.add_typer(group, name="queue")

    @group.command("show")
    def show(
        queue: Annotated[str, typer.Argument(help="The queue.")],
        url: UrlOption = "http://127.0.0.1:3000", token: TokenOption = None,
        sigv4: SigV4Option = False, region: RegionOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """A queue's settings, its limits and how much of each is in use now (with a tenant's
        token: the settings its workers read and its own counts)."""
        with api_client(url, token, sigv4, region) as client:
            view = client.get_queue(queue)
        if as_json:
            print_json(view)
        elif isinstance(view, TenantQueueView):
            out.print(tenant_table(view))
        else:
            out.print(settings_table(view))

    @group.command("set")
    def set_(
        queue: Annotated[str, typer.Argument(help="The queue.")],
        max_leased: Annotated[str | None, typer.Option(
            "--max-leased", help="Tasks leased at once over all tenants, at most; 'none' "
                                 "clears it.", show_default=False)] = None,
        rate: Annotated[str | None, typer.Option(
            "--rate", help="PER_SECOND[:BURST]: tasks handed out per second (a token "
                           "bucket; BURST defaults to PER_SECOND rounded up); 'none' clears "
                           "it.", show_default=False)] = None,
        tenant_max_leased: Annotated[str | None, typer.Option(
            "--tenant-max-leased", help="The same per tenant; 'none' clears it.",
            show_default=False)] = None,
        tenant_rate: Annotated[str | None, typer.Option(
            "--tenant-rate", help="PER_SECOND[:BURST] per tenant; 'none' clears it.",
            show_default=False)] = None,
        group_max_leased: Annotated[str | None, typer.Option(
            "--group-max-leased", help="Tasks of one group active at once (1-1000); 'none' "
                                       "restores 1.", show_default=False)] = None,
        lease_seconds: Annotated[int | None, typer.Option(
            min=1, help="Default lease length.", show_default=False)] = None,
        timeout: Annotated[str | None, typer.Option(
            "--timeout", help="The longest one attempt of a task without its own time limit "
                              "may run, in seconds (1-604800); 'none' clears it.",
            show_default=False)] = None,
        max_attempts: Annotated[int | None, typer.Option(
            min=1, help="Attempts before a task is dead-lettered.", show_default=False)] = None,
        paused: Annotated[bool | None, typer.Option(
            "--paused/--running", help="A paused queue hands out nothing.",
            show_default=False)] = None,
        file: Annotated[Path | None, typer.Option(
            "--file", "-f", help="The PUT body as a JSON file; options override it.",
            show_default=False)] = None,
        url: UrlOption = "http://127.0.0.1:3000", token: TokenOption = None,
        sigv4: SigV4Option = False, region: RegionOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Change a queue's settings (only those given; 'none' clears a limit)."""
        body = _read_body(file)
        for name, value in (("max_leased", parse_count(max_leased, "--max-leased")),
                            ("rate", parse_rate(rate, "--rate")),
                            ("tenant_max_leased",
                             parse_count(tenant_max_leased, "--tenant-max-leased")),
                            ("tenant_rate", parse_rate(tenant_rate, "--tenant-rate")),
                            ("group_max_leased",
                             parse_count(group_max_leased, "--group-max-leased")),
                            ("lease_seconds", lease_seconds), ("max_attempts", max_attempts),
                            ("timeout_seconds", parse_count(timeout, "--timeout")),
                            ("paused", paused)):
            if value is not None:
                body[name] = None if value == CLEAR else value
        if not body:
            usage_error("nothing to change: give at least one option (see --help)")
        with api_client(url, token, sigv4, region) as client:
            view = client.put_queue(queue, body)
        if as_json:
            print_json(view)
        else:
            out.print(settings_table(view))
