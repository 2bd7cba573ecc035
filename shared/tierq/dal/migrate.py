"""Ordered SQL migrations (``sql/migrations/NNNN_name.sql``), applied once each and
recorded in ``tierq_schema_migrations``. An advisory lock makes concurrent runners safe:
the second waits, then finds nothing left to do."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import psycopg

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
LOCK_KEY = 0x7469_6572_71  # "tierq"


@dataclass(frozen=True)
class Migration:
    version: str
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available() -> list[Migration]:
    """Every migration shipped with the package, in order."""
    folder = resources.files("tierq.dal").joinpath("sql/migrations")
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(match[1], match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a version: {versions}")
    return found


def applied(conn: psycopg.Connection) -> dict[str, str]:
    """version -> checksum of what this database has applied."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS tierq_schema_migrations (
               version    text PRIMARY KEY,
               name       text NOT NULL,
               checksum   text NOT NULL,
               applied_at timestamptz NOT NULL DEFAULT now())"""
    )
    rows = conn.execute("SELECT version, checksum FROM tierq_schema_migrations").fetchall()
    return {_col(r, 0): _col(r, 1) for r in rows}


def _col(row: object, i: int) -> str:
    if isinstance(row, dict):
        return str(list(row.values())[i])
    return str(row[i])  # type: ignore[index]


def migrate(url: str) -> list[str]:
    """Apply what is missing, each migration in its own transaction. Returns the versions
    applied now. Refuses to run when an applied migration's file has changed."""
    done_now: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        try:
            have = applied(conn)
            for m in available():
                if m.version in have:
                    if have[m.version] != m.checksum:
                        raise RuntimeError(
                            f"migration {m.version}_{m.name} changed after it was applied; "
                            "add a new migration instead of editing an applied one"
                        )
                    continue
                with conn.transaction():
                    conn.execute(m.sql)  # type: ignore[arg-type]
                    conn.execute(
                        "INSERT INTO tierq_schema_migrations (version, name, checksum)"
                        " VALUES (%s, %s, %s)",
                        (m.version, m.name, m.checksum),
                    )
                done_now.append(m.version)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    return done_now
