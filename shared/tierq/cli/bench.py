"""``tierq bench``: run a benchmark of the repository's ``bench/`` package (the engine alone
by default; ``--suite vs_peers`` side by side with PGQueuer and procrastinate; ``--suite
scale`` as the cold backlog grows). Options after ``--`` go to the benchmark itself:
``tierq bench -- --quick``; ``tierq bench -- --help`` lists them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from tierq.cli.api_options import usage_error
from tierq.cli.common import console


def bench_root(start: Path | None = None) -> Path | None:
    """The repository holding ``bench/`` (at or above ``start``, default the current
    directory, then the repository this package was installed from)."""
    from tierq.local.services import repo_root  # brings psycopg and redis: not at every start

    here = Path(__file__).resolve()
    for candidate in (repo_root(start), repo_root(here.parent)):
        if (candidate / "bench" / "__init__.py").is_file():
            return candidate
    return None


def register(app: typer.Typer) -> None:
    @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def bench(
        ctx: typer.Context,
        suite: Annotated[str, typer.Option(
            help="Which benchmark: a module of bench/ (engine, vs_peers, scale, …).")]
            = "engine",
    ) -> None:
        """Run a benchmark from the repository's bench/.

        Arguments after `--` are passed on: `tierq bench -- --quick`, `tierq bench --suite
        vs_peers -- --help`. Run from a checkout. Exits with the benchmark's status."""
        root = bench_root()
        if root is None:
            usage_error("bench/ not found: run `tierq bench` from a tierq repository checkout")
        if not suite.isidentifier() or not (root / "bench" / f"{suite}.py").is_file():
            available = sorted(p.stem for p in (root / "bench").glob("*.py")
                               if p.stem not in ("__init__", "common", "runs", "systems"))
            usage_error(f"--suite: no benchmark {suite!r} in {root / 'bench'} (available: "
                        f"{', '.join(available)})")
        command = [sys.executable, "-m", f"bench.{suite}", *ctx.args]
        console.print(f"running {' '.join(command[1:])} in {root}", highlight=False)
        try:
            status = subprocess.call(command, cwd=root)
        except KeyboardInterrupt:
            status = 130
        raise typer.Exit(status)
