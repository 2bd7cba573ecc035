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
    from tierq.contract import Deployment
    from tierq.dal.shards import ShardSpec
    from tierq.sharded import ShardedTierq

console = Console(stderr=True)


def require_env(*names: str) -> None:
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        console.print(f"[red]error:[/] set {', '.join(missing)} (or run `tierq dev`, which "
                      "starts local servers)")
        raise typer.Exit(2)


def shard_specs() -> list[ShardSpec]:
    """The shards of TIERQ_SHARD_URLS (none when it is not set), once the variables an
    engine needs are set; a bad TIERQ_SHARD_URLS exits with status 2."""
    from tierq.dal.shards import ShardConfigError, parse_shard_urls

    shards = os.environ.get("TIERQ_SHARD_URLS", "").strip()
    require_env(*(["VALKEY_URL"] if shards else ["DATABASE_URL", "VALKEY_URL"]))
    try:
        return parse_shard_urls(shards) if shards else []
    except ShardConfigError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None


@contextmanager
def engine() -> Iterator[Deployment]:
    """An engine over DATABASE_URL / VALKEY_URL, or over the shards of TIERQ_SHARD_URLS (a
    ``ShardedTierq`` when it names more than one, as the deployment's functions build it);
    a TierqError exits with status 1, a bad TIERQ_SHARD_URLS with status 2."""
    specs = shard_specs()
    with _exit_on_error():
        if len(specs) > 1:
            from tierq.sharded import ShardedTierq

            with ShardedTierq(specs) as sharded:
                yield sharded
        else:
            from tierq.engine import Tierq  # (here: the commands that need none start faster)

            with Tierq(database_url=specs[0].url if specs else None) as tq:
                yield tq


@contextmanager
def sharded_engine() -> Iterator[ShardedTierq | None]:
    """The engine over the shards of TIERQ_SHARD_URLS when it names more than one, else None
    (one database: no shards to move pairs between); errors as :func:`engine`'s."""
    specs = shard_specs()
    if len(specs) < 2:
        yield None
        return
    from tierq.sharded import ShardedTierq

    with _exit_on_error(), ShardedTierq(specs) as sharded:
        yield sharded


@contextmanager
def _exit_on_error() -> Iterator[None]:
    """A TierqError printed, then exit with status 1."""
    try:
        yield
    except TierqError as exc:
        console.print(f"[red]error ({exc.code}):[/] {escape(exc.message)}")
        for detail in exc.details:
            console.print(f"  - {escape(str(detail))}")
        sys.exit(1)
