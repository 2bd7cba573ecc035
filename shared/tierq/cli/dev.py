"""``tierq dev``: the local stack — PostgreSQL, Valkey, migrations, the HTTP API and the
scheduled functions of template.yaml, on this machine, without Docker."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tierq.cli.common import console


def register(app: typer.Typer) -> None:
    @app.command()
    def dev(
        port: Annotated[int, typer.Option(help="Port of the HTTP API on 127.0.0.1.")] = 3000,
        no_services: Annotated[bool, typer.Option(
            "--no-services",
            help="Use DATABASE_URL and VALKEY_URL as given instead of starting servers.",
        )] = False,
        host: Annotated[str, typer.Option(
            help="Address to listen on. On a loopback address requests without the "
                 "x-tierq-jwt-claims header act as an admin; on any other (e.g. 0.0.0.0) "
                 "every API route requires 'Authorization: Bearer <token>' (TIERQ_DEV_TOKEN, "
                 "or one printed at the start; 401 without it).",
        )] = "127.0.0.1",
        template: Annotated[Path | None, typer.Option(
            help="The SAM template to serve (default: template.yaml of the repository).",
        )] = None,
        schedules: Annotated[bool, typer.Option(
            "--schedules/--no-schedules", help="Run the scheduled functions.",
        )] = True,
        schedule_period: Annotated[float | None, typer.Option(
            min=0.1, help="Invoke every scheduled function this often (seconds) instead of "
                          "at its schedule's rate; the ticks inside follow TIERQ_*_EVERY.",
        )] = None,
        quiet: Annotated[bool, typer.Option(
            "--quiet", help="No access log line per request.",
        )] = False,
        valkey_cluster: Annotated[bool, typer.Option(
            "--valkey-cluster",
            help="Valkey as a cluster of three masters, the shape of ElastiCache Serverless "
                 "(a private one unless VALKEY_URL names a cluster); sets VALKEY_CLUSTER=true.",
        )] = False,
    ) -> None:
        """Serve the HTTP API and run the scheduled functions locally, from template.yaml.

        Starts private PostgreSQL and Valkey/Redis servers (or reuses DATABASE_URL /
        VALKEY_URL when they answer), applies migrations, routes each request to the
        function template.yaml declares for it, and invokes the scheduled functions on their
        schedules. Ctrl-C stops everything it started. Local only: a request header
        `x-tierq-jwt-claims: {"tenant": "acme"}` acts as a JWT's claims (tenant pinning;
        `{"scope": "tierq/admin"}` for an admin); claims with neither are refused (403) as on
        AWS. Without the header a request acts as an admin while the API listens on a
        loopback address; on any other address every API route requires the access token
        as the bearer token (TIERQ_DEV_TOKEN, or one made and printed at the start).
        """
        from tierq.local.gateway import DevOptions, DevStack, GatewayStackError
        from tierq.local.services import LocalServicesError

        stack = DevStack(DevOptions(
            host=host, port=port, services=not no_services, schedules=schedules,
            schedule_period=schedule_period, template=template, access_log=not quiet,
            valkey_cluster=valkey_cluster,
        ))
        try:
            stack.start()
        except (GatewayStackError, LocalServicesError) as exc:
            stack.stop()
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(1) from None
        except BaseException:
            stack.stop()
            raise
        stack.serve_until_signalled()
