"""Helpers shared by CLI commands: building an engine from the environment (over the shards
of ``TIERQ_SHARD_URLS`` when it names several), errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

from tierq.errors import TierqError

if TYPE_CHECKING:
    from tierq.engine import Tierq
    from tierq.sharded import ShardedTierq

console = Console(stderr=True)


def require_env(*names: str) -> None:
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        console.print(f"[red]error:[/] set {', '.join(missing)} (or run `tierq dev`, which "
                      "starts local servers)")
        raise typer.Exit(2)


@contextmanager
def engine() -> Iterator[Tierq | ShardedTierq]:
    """An engine over DATABASE_URL / VALKEY_URL, or over the shards of TIERQ_SHARD_URLS (a
    ``ShardedTierq`` when it names more than one, as the deployment's functions build it);
    a TierqError exits with status 1, a bad TIERQ_SHARD_URLS with status 2."""
    from tierq.dal.shards import ShardConfigError, parse_shard_urls
    from tierq.engine import Tierq  # imported here: the commands that need none start faster

    shards = os.environ.get("TIERQ_SHARD_URLS", "").strip()
    require_env(*(["VALKEY_URL"] if shards else ["DATABASE_URL", "VALKEY_URL"]))
    try:
        specs = parse_shard_urls(shards) if shards else []
    except ShardConfigError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    try:
        if len(specs) > 1:
            from tierq.sharded import ShardedTierq

            with ShardedTierq(specs) as sharded:
                yield sharded
        else:
            with Tierq(database_url=specs[0].url if specs else None) as tq:
                yield tq
    except TierqError as exc:
        console.print(f"[red]error ({exc.code}):[/] {escape(exc.message)}")
        for detail in exc.details:
            console.print(f"  - {escape(str(detail))}")
        sys.exit(1)
