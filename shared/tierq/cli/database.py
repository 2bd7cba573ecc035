"""``tierq migrate``: apply the SQL migrations (to every shard of ``TIERQ_SHARD_URLS``);
``tierq unpack-batches``: move every task out of the batch rows, before a rollback to a
version that serves none (README.md, *Upgrading*)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from tierq.cli.common import console, require_env

if TYPE_CHECKING:
    from tierq.maintenance.batch_unpack import UnpackConfig


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

    @app.command("unpack-batches")
    def unpack_batches(
        slice_: Annotated[int, typer.Option(
            "--slice", min=1, max=1000, help="Batch rows read and moved in one transaction.",
        )] = 20,
        passes: Annotated[int, typer.Option(
            min=1, max=100, help="Passes over every batch row at most (it stops after one "
            "that finds nothing to move).",
        )] = 3,
    ) -> None:
        """Move every task still in a batch row out into a row of tierq_tasks, on
        DATABASE_URL or every shard of TIERQ_SHARD_URLS, and sweep the batch rows left
        empty: before a rollback to a version that serves no batch row (0.1.0). Turn
        TIERQ_BATCH_ROWS (the template's BatchRows) off everywhere first; exit status 1
        while batch rows are still being written."""
        import psycopg

        from tierq.errors import TierqError
        from tierq.maintenance.batch_unpack import UnpackConfig

        shards = os.environ.get("TIERQ_SHARD_URLS", "").strip()
        if shards:
            targets = shard_targets(shards)
        else:
            require_env("DATABASE_URL")
            targets = [("database", os.environ["DATABASE_URL"], None)]
        config = UnpackConfig(slice=slice_, passes=passes)
        left = 0
        failed: dict[str, str] = {}
        for name, url, resolve_url in targets:  # (a shard that fails: the others go on)
            try:
                left += unpack_one(name, url, resolve_url, config)
            except (psycopg.Error, TierqError) as exc:
                detail = getattr(exc, "detail", None)
                failed[name] = " ".join(
                    part for part in (str(exc).strip() or type(exc).__name__, detail) if part)
        if left:
            console.print(f"[red]error:[/] {left:,} task(s) are still in batch rows: batch "
                          "rows are still being written. Set TIERQ_BATCH_ROWS to false (the "
                          "template's BatchRows) on every function, then run this again.")
        if failed:
            console.print(f"[red]error:[/] moving the batch rows failed on {len(failed)} of "
                          f"{len(targets)} database(s) (the others are done); run this again "
                          "once the cause below is dealt with:")
            for name, error in failed.items():
                console.print(f"  - {name}: {error}", markup=False)
        if left or failed:
            raise typer.Exit(1)


ResolveUrl = Callable[[bool], str] | None


def shard_targets(text: str) -> list[tuple[str, str, ResolveUrl]]:
    """(Name, URL, its resolver) of each shard of ``TIERQ_SHARD_URLS``; a bad value exits
    with status 2."""
    from rich.markup import escape

    from tierq.dal.shards import ShardConfigError, parse_shard_urls

    try:
        specs = parse_shard_urls(text)
    except ShardConfigError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    return [(spec.name, spec.url, spec.resolve_url) for spec in specs]


def unpack_one(name: str, url: str, resolve_url: ResolveUrl, config: UnpackConfig) -> int:
    """``batch_unpack.run`` on one database, its progress printed; the members it left."""
    from tierq.config import get_settings
    from tierq.dal.postgres import Database
    from tierq.dal.task_store import TaskStore
    from tierq.maintenance import batch_unpack

    pooled = get_settings().db_behind_pooler
    db = Database(url, min_size=0, max_size=2, prepare=not pooled, resolve_url=resolve_url)
    try:
        summary = batch_unpack.run(TaskStore(db), config,
                                   say=lambda line: console.print(f"{name}: {line}",
                                                                  markup=False))
    finally:
        db.close()
    if not summary.table:
        console.print(f"{name}: no batch rows table (before migration 0030): nothing to move")
        return 0
    console.print(f"{name}: {summary.moved:,} task(s) moved out of batch rows in "
                  f"{summary.passes} pass(es); {summary.swept:,} batch row(s) swept, "
                  f"{summary.batch_rows_left:,} left for the reaper; {summary.left:,} task(s) "
                  "still in batch rows")
    return summary.left


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
