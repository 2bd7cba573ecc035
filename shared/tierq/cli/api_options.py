"""What the commands that talk to the HTTP API share: the connection options, the client, the
way errors end a command, and JSON output.

Exit codes of those commands: 0 success; 1 the API refused the request or could not be
reached (the error's code and message are printed on stderr); 2 bad usage or input the
command refused before sending anything.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import typer
from pydantic_core import to_jsonable_python
from rich.console import Console

from tierq.cli.common import console
from tierq.client import Client
from tierq.client.errors import ApiError, AuthConfigError, ConnectionFailed
from tierq.client.http import DEFAULT_URL

out = Console(highlight=False, soft_wrap=True)  # results on stdout; messages go to stderr

UrlOption = Annotated[str, typer.Option(
    "--url", envvar="TIERQ_URL", show_envvar=True,
    help="Base URL of the tierq API (`tierq dev` serves http://127.0.0.1:3000).")]
TokenOption = Annotated[str | None, typer.Option(
    "--token", envvar="TIERQ_TOKEN", show_envvar=True, show_default=False,
    help="Bearer token, for a JWT-authorised API.")]
SigV4Option = Annotated[bool, typer.Option(
    "--sigv4", envvar="TIERQ_SIGV4", show_envvar=True,
    help="Sign requests with AWS SigV4 (an IAM-authorised API; credentials from the usual "
         "AWS chain).")]
RegionOption = Annotated[str | None, typer.Option(
    "--aws-region", envvar="AWS_REGION", show_default=False,
    help="Region for SigV4 (default: from the URL or the AWS configuration).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


def fail(message: str, code: int = 1) -> NoReturn:
    console.print(f"[red]error:[/] {message}", markup=True, highlight=False)
    raise typer.Exit(code)


def usage_error(message: str) -> NoReturn:
    fail(message, 2)


def print_api_error(exc: ApiError | ConnectionFailed) -> None:
    if isinstance(exc, ConnectionFailed):
        console.print(f"[red]error:[/] {exc.message}", highlight=False)
        console.print("  is the API running? (`tierq dev` serves it locally; --url / "
                      "TIERQ_URL point elsewhere)", highlight=False)
        return
    where = "" if exc.url is None else f" from {exc.method} {exc.url}"
    console.print(f"[red]error ({exc.status} {exc.code}):[/] {exc.message}{where}",
                  highlight=False)
    for detail in exc.details:
        field = detail.get("field")
        text = detail.get("message", "")
        console.print(f"  - {field}: {text}" if field else f"  - {text}", highlight=False)


@contextmanager
def api_client(url: str | None, token: str | None = None, sigv4: bool = False,
               region: str | None = None) -> Iterator[Client]:
    """A client for the command; an API error ends the command with status 1 (2 when the
    input was refused before sending)."""
    try:
        client = Client(url or DEFAULT_URL, token=token, sigv4=sigv4, aws_region=region)
    except (AuthConfigError, ValueError) as exc:
        usage_error(str(exc))
    try:
        with client:
            yield client
    except ApiError as exc:
        print_api_error(exc)
        raise typer.Exit(2 if exc.url is None else 1) from None
    except ConnectionFailed as exc:
        print_api_error(exc)
        raise typer.Exit(1) from None


def parse_json(text: str, what: str) -> Any:
    """A JSON value given on the command line; exit 2 naming ``what`` when it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        usage_error(f"{what} is not valid JSON ({exc.msg} at column {exc.colno}): {text!r}; "
                    "quote strings as JSON, e.g. '\"hello\"'")


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable_python(value), indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def short_json(value: Any, limit: int = 60) -> str:
    text = json.dumps(to_jsonable_python(value), ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit - 1] + "…"


def age(seconds: float | None) -> str:
    """``4m 12s``-style age; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    days, s = divmod(s, 86_400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {s}s"
