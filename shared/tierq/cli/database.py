"""``tierq migrate``: apply the SQL migrations."""

from __future__ import annotations

import os

import typer

from tierq.cli.common import console, require_env


def register(app: typer.Typer) -> None:
    @app.command()
    def migrate() -> None:
        """Apply pending SQL migrations to DATABASE_URL (safe to run concurrently)."""
        from tierq.dal.migrate import migrate as apply_migrations  # psycopg: only here

        require_env("DATABASE_URL")
        applied = apply_migrations(os.environ["DATABASE_URL"])
        if applied:
            console.print(f"applied migrations: {', '.join(applied)}")
        else:
            console.print("database is up to date")
