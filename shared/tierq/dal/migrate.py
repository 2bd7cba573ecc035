"""Ordered SQL migrations (``sql/migrations/NNNN_name.sql``), applied once each and
recorded in ``tierq_schema_migrations``. An advisory lock makes concurrent runners safe:
the second waits, then finds nothing left to do.

A migration must not stall the queue it upgrades: every tenant's enqueues and acks write
the same tables. Two rules keep a live upgrade from doing so:

| migration                   | how it runs                    | why                              |
| --------------------------- | ------------------------------ | -------------------------------- |
| plain (the default)         | one transaction, under         | a DDL lock that waits behind a   |
|                             | ``lock_timeout``; retried with | long transaction queues every    |
|                             | a pause when the lock is not   | later write behind it: it gives  |
|                             | had in time                    | up and tries again instead       |
| ``-- tierq: no-transaction``| statement by statement, in     | ``CREATE INDEX CONCURRENTLY``    |
| in its leading comments     | autocommit, no lock timeout    | builds an index while writes go  |
|                             |                                | on; it cannot run in a           |
|                             |                                | transaction                      |

A runner waiting for another's lock asks for it again and again (``pg_try_advisory_lock``)
rather than waiting inside ``pg_advisory_lock``, which would hold its statement's snapshot
all the while: the other runner's ``CREATE INDEX CONCURRENTLY`` waits for every older
snapshot of the database, and the two would deadlock (PostgreSQL then fails one of them).

A no-transaction migration may stop half way (a failed concurrent build leaves an invalid
index): the next run applies it again from its first statement, so each of its statements
must be safe to repeat (``DROP INDEX CONCURRENTLY IF EXISTS`` before each build; a unit
test checks the shipped ones). Its statements are split at each ``;`` that ends a line, so
it holds no function bodies.

They run as the database's owner. Migration 0007 creates the application's group role
(``tierq_app_<database>``: roles are cluster-wide, so one per database); every run grants
it tierq's tables again, and ``ensure_app_login`` makes a login its member."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
LOCK_KEY = 0x7469_6572_71  # "tierq"
NO_TRANSACTION = "-- tierq: no-transaction"
# How long a transactional migration waits for a table's lock before it gives up, lets the
# writers queued behind it through, and tries again after a pause (doubling, at most
# RETRY_PAUSE_MAX_SECONDS); how many times it tries in all. The defaults of
# TIERQ_MIGRATE_LOCK_TIMEOUT_MS and TIERQ_MIGRATE_LOCK_ATTEMPTS (tierq.config).
LOCK_TIMEOUT_MS = 5_000
LOCK_ATTEMPTS = 10
RETRY_PAUSE_SECONDS = 1.0
RETRY_PAUSE_MAX_SECONDS = 30.0
RUNNER_POLL_SECONDS = 0.1  # between two asks for the runners' advisory lock
# How long a runner waits for another's advisory lock before it gives up naming the holder
# (TIERQ_MIGRATE_RUNNER_WAIT_SECONDS): within the migrate function's 300 s, so its failure
# says why rather than timing out.
RUNNER_WAIT_SECONDS = 240.0
# A statement of a no-transaction migration ends with ';' at the end of a line.
_STATEMENT_END = re.compile(r";[ \t]*(?:--[^\n]*)?$", re.MULTILINE)


@dataclass(frozen=True)
class Migration:
    version: str
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def transactional(self) -> bool:
        """False when its leading comments say ``-- tierq: no-transaction``."""
        for line in self.sql.splitlines():
            stripped = line.strip()
            if stripped and not stripped.startswith("--"):
                return True
            if stripped == NO_TRANSACTION:
                return False
        return True

    def statements(self) -> list[str]:
        """Its statements, one by one (split at each ``;`` that ends a line); refused when
        it holds a dollar-quoted body, which such a split would cut."""
        if "$$" in self.sql or re.search(r"\$\w*\$", self.sql):
            raise RuntimeError(
                f"migration {self.version}_{self.name} is no-transaction and holds a "
                "dollar-quoted body; put function bodies in a transactional migration")
        statements = []
        for part in _STATEMENT_END.split(self.sql):
            code = [line for line in part.splitlines()
                    if line.strip() and not line.strip().startswith("--")]
            if code:  # (the comments of whole lines left out)
                statements.append("\n".join(code).strip())
        return statements


class MigrationRunnerBusy(RuntimeError):
    """Another runner held the migrations' advisory lock for all of ``runner_wait_seconds``
    (the message names its backend): it is still migrating, or its session is stuck."""


class MigrationLockTimeout(RuntimeError):
    """A migration never had its tables' locks within ``lock_timeout`` in every attempt:
    a long transaction holds them (the message names the migration)."""


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


def migrate(url: str, *, lock_timeout_ms: int = LOCK_TIMEOUT_MS,
            lock_attempts: int = LOCK_ATTEMPTS,
            runner_wait_seconds: float = RUNNER_WAIT_SECONDS,
            migrations: Sequence[Migration] | None = None) -> list[str]:
    """Apply what is missing (``migrations``: the shipped ones by default), each as its
    kind says (the module's table). Returns the versions applied now. Refuses to run when
    an applied migration's file has changed; raises :class:`MigrationLockTimeout` when a
    transactional one never had its locks in ``lock_attempts`` tries of
    ``lock_timeout_ms`` each (what came before it stays applied), and
    :class:`MigrationRunnerBusy`, having applied nothing, when another runner held the
    runners' lock for ``runner_wait_seconds``."""
    if lock_timeout_ms < 1 or lock_attempts < 1:
        raise ValueError("lock_timeout_ms and lock_attempts must be at least 1")
    if not runner_wait_seconds > 0:
        raise ValueError("runner_wait_seconds must be more than 0")
    done_now: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        _lock_runners(conn, runner_wait_seconds)
        try:
            have = applied(conn)
            for m in available() if migrations is None else migrations:
                if m.version in have:
                    if have[m.version] != m.checksum:
                        raise RuntimeError(
                            f"migration {m.version}_{m.name} changed after it was applied; "
                            "add a new migration instead of editing an applied one"
                        )
                    continue
                if m.transactional:
                    _apply_in_transaction(conn, m, lock_timeout_ms, lock_attempts)
                else:
                    _apply_statement_by_statement(conn, m)
                done_now.append(m.version)
            grant_app_group(conn)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    return done_now


def _lock_runners(conn: psycopg.Connection[Any], wait_seconds: float) -> None:
    """Take the runners' advisory lock, asking again until it is free (the module's
    docstring says why not ``pg_advisory_lock``), for ``wait_seconds`` at most."""
    deadline = time.monotonic() + wait_seconds
    while _col(conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone(),
               0) != "True":
        if time.monotonic() >= deadline:
            raise MigrationRunnerBusy(
                f"another migration runner ({_runner_holding(conn)}) has held the "
                f"migrations' lock for the {wait_seconds:g} s this one waited; nothing was "
                "applied: run the migrations again once it has finished, or end its "
                "session if it is stuck")
        time.sleep(RUNNER_POLL_SECONDS)


def _runner_holding(conn: psycopg.Connection[Any]) -> str:
    """Who holds the runners' advisory lock, as an operator would look for it."""
    row = conn.execute(
        "SELECT a.pid, coalesce(a.application_name, ''), a.backend_start, a.state "
        "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s "
        "AND l.objsubid = 1 LIMIT 1",
        (LOCK_KEY >> 32, LOCK_KEY & 0xFFFF_FFFF)).fetchone()
    if row is None:
        return "its session has just ended"
    values = list(row.values()) if isinstance(row, Mapping) else list(row)
    pid, application, started, state = values
    named = f" '{application}'" if application else ""
    return f"backend pid {pid}{named}, connected since {started:%Y-%m-%d %H:%M:%S %Z}, {state}"


def _record(conn: psycopg.Connection[Any], m: Migration) -> None:
    conn.execute(
        "INSERT INTO tierq_schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
        (m.version, m.name, m.checksum))


def _apply_in_transaction(conn: psycopg.Connection[Any], m: Migration, lock_timeout_ms: int,
                          attempts: int) -> None:
    """``m`` and its record in one transaction whose lock waits end at ``lock_timeout_ms``;
    rolled back and tried again after a growing pause when one does."""
    pause = RETRY_PAUSE_SECONDS
    for attempt in range(1, attempts + 1):
        try:
            with conn.transaction():
                # (set_config(..., true) is SET LOCAL: it ends with the transaction)
                conn.execute("SELECT set_config('lock_timeout', %s, true)",
                             (f"{lock_timeout_ms}ms",))
                conn.execute(m.sql)
                _record(conn, m)
            return
        except psycopg.errors.LockNotAvailable as exc:
            if attempt == attempts:
                raise MigrationLockTimeout(
                    f"migration {m.version}_{m.name} waited {lock_timeout_ms} ms for a lock "
                    f"{attempts} times and gave up (a long transaction holds one of its "
                    f"tables: {exc.diag.message_primary}); nothing of it was applied") from exc
            time.sleep(pause)
            pause = min(2 * pause, RETRY_PAUSE_MAX_SECONDS)


def _apply_statement_by_statement(conn: psycopg.Connection[Any], m: Migration) -> None:
    """``m``'s statements one at a time in autocommit (what ``CREATE INDEX CONCURRENTLY``
    needs), then its record."""
    for statement in m.statements():
        conn.execute(statement)
    _record(conn, m)


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
