"""Ordered SQL migrations (``sql/migrations/NNNN_name.sql``), applied once each and
recorded in ``tierq_schema_migrations``. An advisory lock makes concurrent runners safe:
the second waits, then finds nothing left to do.

They run as the database's owner. Migration 0007 creates the application's group role
(``tierq_app_<database>``: roles are cluster-wide, so one per database); every run grants
it tierq's tables again, and ``ensure_app_login`` makes a login its member."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

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


def _col(row: Sequence[Any] | Mapping[str, Any] | None, i: int) -> str:
    """Column ``i`` of a row as text, from a connection that makes tuples or dicts."""
    if row is None:
        raise RuntimeError("the query returned no row")
    if isinstance(row, Mapping):
        return str(list(row.values())[i])
    return str(row[i])


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
                    conn.execute(m.sql)
                    conn.execute(
                        "INSERT INTO tierq_schema_migrations (version, name, checksum)"
                        " VALUES (%s, %s, %s)",
                        (m.version, m.name, m.checksum),
                    )
                done_now.append(m.version)
            grant_app_group(conn)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    return done_now


def grant_app_group(conn: psycopg.Connection[Any]) -> str | None:
    """Grant the application's group role every tierq table and sequence (again: cheap and
    idempotent, so a table whose grant went missing heals on the next run). Returns the
    group's name; None before migration 0007."""
    if _col(conn.execute("SELECT to_regprocedure('tierq_grant_app_group()') IS NOT NULL"
                         ).fetchone(), 0) != "True":
        return None
    return _col(conn.execute("SELECT tierq_grant_app_group()").fetchone(), 0)


def app_group(conn: psycopg.Connection[Any]) -> str:
    """The name of this database's application group role (see migration 0007)."""
    return _col(conn.execute("SELECT tierq_app_group()").fetchone(), 0)


def ensure_app_login(url: str, username: str, password: str) -> str:
    """Make ``username`` a login in the application's group with this password (as the
    owner, after ``migrate``): created when missing, else its password and membership set
    again, so the secret's current version always works. Returns the group's name.

    The login gets nothing of its own (no privileges, no settings): everything comes
    through the group, so the clone an alternating-user rotation makes of it works as well.
    The password travels hashed (SCRAM or MD5, as the server's password_encryption says)."""
    if not username or not password:
        raise ValueError("the application login needs a username and a password")
    with psycopg.connect(url, autocommit=True) as conn:
        owner = _col(conn.execute("SELECT current_user").fetchone(), 0)
        if username == owner:
            raise ValueError(f"the application login must not be the owner ({owner}): "
                             "give it a secret of its own")
        group = app_group(conn)
        if username == group:
            raise ValueError(f"the application login must not be the group role ({group})")
        hashed = conn.pgconn.encrypt_password(password.encode(), username.encode()).decode()
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                              (username,)).fetchone() is not None
        verb = "ALTER" if exists else "CREATE"
        with conn.transaction():
            # (a new role is NOSUPERUSER NOCREATEDB NOCREATEROLE by default; naming those
            # in ALTER ROLE would need a superuser, which Aurora's owner is not)
            conn.execute(sql.SQL(verb + " ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(username), sql.Literal(hashed)))
            conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(group),
                                                           sql.Identifier(username)))
    return group
