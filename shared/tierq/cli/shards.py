"""``tierq shards``: the pairs' homes over the shards of ``TIERQ_SHARD_URLS``.

    tierq shards home emails acme            # where (emails, acme) lives
    tierq shards move emails acme --to b     # drain it where it is, then move it to b
    tierq shards move emails acme --give-up  # a move that has not switched: stay put

A move closes the pair to new work (503 ``pair_moving``), waits TIERQ_HOME_CACHE_SECONDS
for every process to see it, waits for its tasks to be worked off, then switches its home
(tierq.logic.pair_moves). Run the same command again to finish a move that stopped.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape

from tierq.cli.common import console, sharded_engine


def register(app: typer.Typer) -> None:
    shards = typer.Typer(help="The pairs' homes over the shards of TIERQ_SHARD_URLS.",
                         no_args_is_help=True)
    app.add_typer(shards, name="shards")

    @shards.command("home")
    def home(queue: str, tenant: str) -> None:
        """Print the shard a (queue, tenant) lives on, and the shard it is moving to."""
        from tierq.dal.shards import DEFAULT_SHARD  # (here: the command line starts faster)

        with sharded_engine() as tq:
            if tq is None:  # one database: every pair's home
                typer.echo(json.dumps({"queue": queue, "tenant": tenant,
                                       "home": DEFAULT_SHARD, "moving_to": None}))
                return
            state = tq.homes.state_of(queue, tenant)
            typer.echo(json.dumps({"queue": queue, "tenant": tenant,
                                   "home": state.shard if state else None,
                                   "moving_to": state.moving_to if state else None}))

    @shards.command("move")
    def move(
        queue: str,
        tenant: str,
        to: Annotated[str | None, typer.Option(
            "--to", help="The shard the pair moves to.")] = None,
        drain_seconds: Annotated[float, typer.Option(
            min=0, help="Give the move up (the pair reopens where it is) if its tasks are "
                        "not worked off within this long.")] = 600.0,
        give_up: Annotated[bool, typer.Option(
            "--give-up", help="Give up a move of the pair that has not switched yet.")] = False,
    ) -> None:
        """Move a (queue, tenant) to another shard once its tasks are worked off where it
        is: it takes no new work meanwhile (503, retry later). Prints the summary as JSON."""
        if give_up == (to is not None):
            console.print("[red]error:[/] give either --to SHARD or --give-up")
            raise typer.Exit(2)
        with sharded_engine() as tq:
            if tq is None:
                console.print("[red]error:[/] TIERQ_SHARD_URLS names one shard (or is not "
                              "set): there is no other shard to move a pair to")
                raise typer.Exit(2)
            if give_up:
                gave_up = tq.give_up_move(queue, tenant)
                typer.echo(json.dumps({"queue": queue, "tenant": tenant,
                                       "gave_up": gave_up}))
                return
            assert to is not None
            try:
                summary = tq.move_pair(queue, tenant, to, drain_seconds=drain_seconds,
                                       say=lambda message: console.print(escape(message)))
            except KeyboardInterrupt:
                console.print("[yellow]stopped:[/] the pair may be closed to new work; run "
                              "the same command again to finish the move, or `tierq shards "
                              f"move {escape(queue)} {escape(tenant)} --give-up` to give it "
                              "up if it has not switched")
                raise typer.Exit(130) from None
            typer.echo(json.dumps({"queue": summary.queue, "tenant": summary.tenant,
                                   "from": summary.from_shard, "to": summary.to_shard,
                                   "moved": summary.moved,
                                   "drain_seconds": summary.drain_seconds}))
