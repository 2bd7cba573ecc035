"""The ``tierq`` command. Each command group lives in its own module with a
``register(app)`` function; add a module to ``COMMAND_MODULES`` to expose it."""

from __future__ import annotations

import importlib

from tierq.extras import MissingExtraError

try:
    import rich  # noqa: F401  (the commands print with it)
    import typer
except ModuleNotFoundError as error:
    raise MissingExtraError.from_error(error, "cli", "the tierq command (tierq.cli)") from error

app = typer.Typer(
    name="tierq",
    help="tierq: a durable, serverless task queue (Valkey warm tier over PostgreSQL).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES: tuple[str, ...] = (
    "tierq.cli.database",
    "tierq.cli.dev",
    "tierq.cli.demo",
    "tierq.cli.enqueue",
    "tierq.cli.flows",
    "tierq.cli.leases",
    "tierq.cli.stats",
    "tierq.cli.dlq",
    "tierq.cli.worker",
    "tierq.cli.bench",
    "tierq.cli.schedules",
    "tierq.cli.queues",
    "tierq.cli.shards",
)



@app.callback()
def main() -> None:
    """tierq: a durable, serverless task queue (Valkey warm tier over PostgreSQL)."""


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)
