"""Helpers shared by CLI commands: building an engine from the environment, errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from tierq.errors import TierqError

if TYPE_CHECKING:
    from tierq.engine import Tierq

console = Console(stderr=True)


def require_env(*names: str) -> None:
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        console.print(f"[red]error:[/] set {', '.join(missing)} (or run `tierq dev`, which "
                      "starts local servers)")
        raise typer.Exit(2)


@contextmanager
def engine() -> Iterator[Tierq]:
    """An engine over DATABASE_URL / VALKEY_URL; a TierqError exits with status 1."""
    from tierq.engine import Tierq  # imported here: the commands that need none start faster

    require_env("DATABASE_URL", "VALKEY_URL")
    try:
        with Tierq.from_env() as tq:
            yield tq
    except TierqError as exc:
        console.print(f"[red]error ({exc.code}):[/] {exc.message}")
        for detail in exc.details:
            console.print(f"  - {detail}")
        sys.exit(1)
