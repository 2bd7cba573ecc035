"""``tierq migrate``: apply the SQL migrations (to every shard of ``TIERQ_SHARD_URLS``)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from tierq.cli.common import console, require_env


def register(app: typer.Typer) -> None:
    @app.command()
    def migrate(
        attempts: Annotated[int, typer.Option(
            min=1, help="With shards: rounds in which a shard that failed is tried again.",
        )] = 3,
    ) -> None:
        """Apply pending SQL migrations to DATABASE_URL, or to every shard that
        TIERQ_SHARD_URLS names (then put the shards in service together); safe to run
        concurrently and again."""
        shards = os.environ.get("TIERQ_SHARD_URLS", "").strip()
        if shards:
            migrate_shards(shards, attempts)
            return
        from tierq.dal.migrate import migrate as apply_migrations  # psycopg: only here

        require_env("DATABASE_URL")
        applied = apply_migrations(os.environ["DATABASE_URL"])
        if applied:
            console.print(f"applied migrations: {', '.join(applied)}")
        else:
            console.print("database is up to date")


def migrate_shards(text: str, attempts: int) -> None:
    """Every shard tried (a failing one again, ``attempts`` rounds); exit status 1 naming
    the shards still failing (the others stay migrated: run it again)."""
    from rich.markup import escape

    from tierq.dal.shards import ShardConfigError, parse_shard_urls
    from tierq.logic.homes import HomeConflict, ShardDown
    from tierq.shard_migrations import migrate_shards as apply_to_shards
    from tierq.sharded import ShardMigrationFailed

    try:
        specs = parse_shard_urls(text)
    except ShardConfigError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    try:
        apply_to_shards(specs, attempts=attempts,
                        say=lambda message: console.print(message, markup=False))
    except ShardMigrationFailed as exc:
        console.print(f"[red]error:[/] migrations failed on {len(exc.failed)} of "
                      f"{len(specs)} shard(s); the others are migrated. Run `tierq migrate` "
                      "again once they answer:")
        for name, error in exc.failed.items():
            console.print(f"  - {name}: {error}", markup=False)
        raise typer.Exit(1) from None
    except (ShardDown, HomeConflict) as exc:
        console.print("[red]error:[/] every shard is migrated, but putting them in service "
                      f"failed: {escape(str(exc))}")
        raise typer.Exit(1) from None
