"""``python -m tierq.local.services up [--private] [--valkey-cluster]|down|status [--state-dir D]``.

``up`` prints only ``export …`` lines on stdout, so ``eval "$(python -m tierq.local.services up)"``
works; progress and errors go to stderr.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from tierq.local.services.postgres import PrivatePostgres
from tierq.local.services.process import Kind, LocalServicesError, probe, redact, say
from tierq.local.services.server import default_state_dir
from tierq.local.services.services import ensure_services, stop_private_services
from tierq.local.services.valkey import PrivateValkey
from tierq.local.services.valkey_cluster import PrivateValkeyCluster


def _up(state_dir: Path, *, private: bool, valkey_cluster: bool) -> int:
    services = ensure_services(state_dir, want_private=True if private else None,
                               valkey_cluster=valkey_cluster)
    services.keep_running()
    for name, value in services.env().items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


def _down(state_dir: Path) -> int:
    stopped = stop_private_services(state_dir)
    if not stopped:
        say(f"no private servers running in {state_dir}")
    for line in stopped:
        say(f"stopped {line}")
    return 0


def _status(state_dir: Path) -> int:
    """Print what is configured and what answers; exit 0 when both kinds answer somewhere."""
    answering: set[str] = set()
    probes: tuple[tuple[str, Kind], ...] = (("DATABASE_URL", "postgres"), ("VALKEY_URL", "valkey"))
    for env_name, kind in probes:
        url = os.environ.get(env_name)
        if url:
            reason = probe(kind, url)
            if reason is None:
                answering.add(kind)
            state = "answers" if reason is None else f"does not answer ({reason})"
            print(f"{env_name:<13} {redact(url)}  {state}")
        else:
            print(f"{env_name:<13} (unset)")
    for service in (PrivatePostgres(state_dir), PrivateValkey(state_dir),
                    PrivateValkeyCluster(state_dir)):
        pid = service.pid
        label = "valkey-cluster" if service.cluster else service.kind
        if pid is None:
            if not service.cluster or service.root.exists():
                print(f"{label:<13} private  stopped  ({service.root})")
            continue
        up = service.is_up()
        if up:
            answering.add(service.kind)
        kept = "  kept by `up`" if service.keep_marker.exists() else ""
        health = "up" if up else "NOT ANSWERING"
        print(f"{label:<13} private  {health}  pid {pid}  {redact(service.url)}{kept}")
    return 0 if answering == {"postgres", "valkey"} else 1


def main(argv: Sequence[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where private servers live (default: <repo root>/.local/services)",
    )
    parser = argparse.ArgumentParser(
        prog="python -m tierq.local.services",
        description="Local PostgreSQL and Valkey/Redis for tierq development.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser(
        "up",
        parents=[common],
        help="start or reuse both servers; print export lines for eval",
    )
    up.add_argument(
        "--private",
        action="store_true",
        help="ignore DATABASE_URL/VALKEY_URL and always use private servers",
    )
    up.add_argument(
        "--valkey-cluster",
        action="store_true",
        help="Valkey as a 3-master cluster, like ElastiCache Serverless (exports "
        "VALKEY_CLUSTER=true)",
    )
    commands.add_parser("down", parents=[common], help="stop private servers in the state dir")
    commands.add_parser("status", parents=[common], help="show what runs and answers")
    args = parser.parse_args(argv)
    state_dir: Path = (args.state_dir or default_state_dir()).absolute()
    try:
        if args.command == "up":
            return _up(state_dir, private=args.private, valkey_cluster=args.valkey_cluster)
        if args.command == "down":
            return _down(state_dir)
        return _status(state_dir)
    except LocalServicesError as exc:
        print(f"[local services] error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
