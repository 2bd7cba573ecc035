"""The servers a benchmark runs against: PostgreSQL (a fresh database per system and run)
and Valkey/Redis, private ones by default, and what the machine and the servers are.

Every benchmark runs against PRIVATE servers by default (``tierq.local.services`` under
``/tmp/tierq-bench-<uid>``), so nobody else's load disturbs the numbers and nothing of
anybody else's is wiped. ``--database-url``/``--valkey-url`` point it at given servers
instead: it then creates and drops its own databases on that PostgreSQL and deletes only
``tq:*`` keys on that Valkey.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
from psycopg import sql

from bench.report import load_average, say
from tierq.local.services import LocalServices, ensure_services

DEFAULT_STATE_DIR = Path(f"/tmp/tierq-bench-{os.getuid()}")


def with_database(url: str, database: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


@dataclass
class Stores:
    """The PostgreSQL server and the Valkey/Redis a benchmark uses."""

    postgres_url: str  # any database on the server; used for CREATE/DROP DATABASE
    valkey_url: str
    services: LocalServices | None = None
    made: list[str] = field(default_factory=list)

    @property
    def private(self) -> bool:
        return self.services is not None and self.services.postgres.private

    def url_for(self, database: str) -> str:
        return with_database(self.postgres_url, database)

    def fresh_database(self, prefix: str) -> str:
        """Create an empty database (dropped again by ``close``); returns its URL."""
        name = f"{prefix}_{uuid.uuid4().hex[:8]}".replace("-", "_")
        with psycopg.connect(self.postgres_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.made.append(name)
        return self.url_for(name)

    def fresh_tierq(self, prefix: str) -> str:
        """A fresh database (``fresh_database``) migrated to tierq's schema, and the warm tier
        emptied (``clear_valkey``): where a benchmark's engine starts; returns its URL."""
        from tierq.dal.migrate import migrate

        url = self.fresh_database(prefix)
        migrate(url)
        self.clear_valkey()
        return url

    def drop_database(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        with psycopg.connect(self.postgres_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
        if name in self.made:
            self.made.remove(name)

    def clear_valkey(self) -> None:
        """Empty the warm tier: the whole private server, or only tierq's keys of a given one."""
        client = redis.Redis.from_url(self.valkey_url)
        try:
            if self.private:
                client.flushall()
                return
            batch: list[bytes] = []
            for key in client.scan_iter(match="tq:*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    client.unlink(*batch)
                    batch.clear()
            if batch:
                client.unlink(*batch)
        finally:
            client.close()

    def close(self) -> None:
        for name in list(self.made):
            with contextlib.suppress(psycopg.Error):
                self.drop_database(self.url_for(name))
        if self.services is not None:
            self.services.stop()


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", default=None,
                        help="use this PostgreSQL server (fresh databases are created and "
                             "dropped on it) instead of a private one")
    parser.add_argument("--valkey-url", default=None,
                        help="use this Valkey/Redis (only tq:* keys are touched) instead of "
                             "a private one")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help=f"where private servers live (default {DEFAULT_STATE_DIR})")


def open_stores(args: argparse.Namespace) -> Stores:
    """Given servers when both URLs are passed, private ones otherwise."""
    if args.database_url and args.valkey_url:
        return Stores(args.database_url, args.valkey_url)
    if args.database_url or args.valkey_url:
        raise SystemExit("give both --database-url and --valkey-url, or neither")
    state: Path = args.state_dir
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o755)  # the postgres system user must be able to enter it when we are root
    services = ensure_services(state / "services", want_private=True)
    return Stores(services.postgres.url, services.valkey.url, services)


@contextlib.contextmanager
def opened_stores(args: argparse.Namespace) -> Iterator[Stores]:
    """``open_stores`` for the length of a benchmark: its databases are dropped and private
    servers stopped at the end, however it ends."""
    stores = open_stores(args)
    try:
        yield stores
    finally:
        stores.close()


def enable_pg_stat_statements(stores: Stores) -> bool:
    """Load pg_stat_statements on a private server (a restart, once); True when it is
    available. Given servers are never reconfigured."""
    with psycopg.connect(stores.postgres_url, autocommit=True) as conn:
        row = conn.execute("SHOW shared_preload_libraries").fetchone()
        loaded = row is not None and "pg_stat_statements" in str(row[0])
        if not loaded and stores.private and stores.services is not None:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    if not loaded and stores.private and stores.services is not None:
        say("restarting the private PostgreSQL once to load pg_stat_statements...")
        stores.services.postgres.restart()
        loaded = True
    if loaded:
        with psycopg.connect(stores.postgres_url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return loaded


def machine_info(stores: Stores) -> dict[str, str]:
    """What the numbers were measured on: the machine and the two servers."""
    info: dict[str, str] = {}
    info["cpus"] = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                       else os.cpu_count())
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["ram"] = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    info["load"] = load_average() + " (1/5/15 min, at the start)"
    info["python"] = platform.python_version()
    with psycopg.connect(stores.postgres_url, autocommit=True) as conn:
        def show(name: str) -> str:
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            return str(row[0]) if row else "?"
        info["postgres"] = (f"{show('server_version')} (fsync={show('fsync')}, "
                            f"synchronous_commit={show('synchronous_commit')}, "
                            f"shared_buffers={show('shared_buffers')})")
    client = redis.Redis.from_url(stores.valkey_url)
    try:
        server = client.info("server")
        name = "valkey" if "valkey_version" in server else "redis"
        version = server.get("valkey_version") or server.get("redis_version")
        persistence = client.info("persistence")
        info["valkey"] = (f"{name} {version} (aof={persistence.get('aof_enabled')}, "
                          f"rdb saves={client.config_get('save').get('save') or 'off'})")
    finally:
        client.close()
    info["servers"] = "private (tierq.local.services)" if stores.private else "given by URL"
    return info
