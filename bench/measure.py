"""What a benchmark measures around a phase: rates and their medians over repeats, latency
percentiles, PostgreSQL's work (statements, commits, tuples), CPU time of the clients and
the servers, and Valkey's memory.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import redis

from bench.phases import ROLE_APP_NAME, PhaseResult
from bench.stores import Stores

# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


# --------------------------------------------------------------------------- Valkey memory


class ValkeyMemory:
    """Samples Valkey's ``used_memory`` in a background thread (every ``every`` seconds).
    ``used_memory_peak`` cannot be reset on Redis 7, so the peak reported is the sampled
    maximum."""

    def __init__(self, url: str, every: float = 0.1) -> None:
        self.url = url
        self.every = every
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.baseline = 0

    def used(self) -> int:
        client = redis.Redis.from_url(self.url)
        try:
            return int(client.info("memory")["used_memory"])
        finally:
            client.close()

    def start(self) -> ValkeyMemory:
        self.baseline = self.used()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="valkey-memory", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        client = redis.Redis.from_url(self.url, socket_timeout=2)
        try:
            while not self._stop.is_set():
                with contextlib.suppress(redis.RedisError):
                    self.samples.append((time.time(), int(client.info("memory")["used_memory"])))
                self._stop.wait(self.every)
        finally:
            client.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def peak(self) -> int:
        return max((m for _, m in self.samples), default=self.baseline)

    def __enter__(self) -> ValkeyMemory:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- Postgres work


@dataclass
class PgWork:
    """Counters of one database: statements (pg_stat_statements, when loaded), committed
    transactions and tuples written (pg_stat_database); and of the whole server: WAL bytes
    written (``pg_current_wal_insert_lsn``) and WAL flushes (``pg_stat_wal.wal_sync``,
    PostgreSQL 14 and later). On a private server the benchmark is all that writes."""

    statements: int | None
    commits: int
    inserted: int
    updated: int
    deleted: int
    wal_bytes: int | None = None
    wal_syncs: int | None = None

    def __sub__(self, other: PgWork) -> PgWork:
        def minus(a: int | None, b: int | None) -> int | None:
            return None if a is None or b is None else a - b
        return PgWork(minus(self.statements, other.statements), self.commits - other.commits,
                      self.inserted - other.inserted, self.updated - other.updated,
                      self.deleted - other.deleted, minus(self.wal_bytes, other.wal_bytes),
                      minus(self.wal_syncs, other.wal_syncs))


def pg_work(stores: Stores, database_url: str, *, statements: bool) -> PgWork:
    """Read the counters of ``database_url``'s database from a connection to the admin
    database, so the reading itself is not counted. PostgreSQL publishes a backend's
    counters when it goes idle (at most once a second) and when it disconnects: read after
    the workers have closed their connections."""
    name = urlsplit(database_url).path.lstrip("/")
    with psycopg.connect(stores.postgres_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted "
            "FROM pg_stat_database WHERE datname = %s", (name,)).fetchone()
        count: int | None = None
        if statements:
            value = conn.execute(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s "
                "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s", (name,)).fetchone()
            count = int(value[0]) if value else 0
        wal_bytes = wal_syncs = None
        with contextlib.suppress(psycopg.Error):
            lsn = conn.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint").fetchone()
            wal_bytes = int(lsn[0]) if lsn else None
        with contextlib.suppress(psycopg.Error):  # pg_stat_wal: PostgreSQL 14 and later
            syncs = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
            wal_syncs = int(syncs[0]) if syncs else None
    if row is None:
        return PgWork(count, 0, 0, 0, 0, wal_bytes, wal_syncs)
    return PgWork(count, int(row[0]), int(row[1]), int(row[2]), int(row[3]), wal_bytes,
                  wal_syncs)


@dataclass
class Statement:
    """One normalised statement's counters in pg_stat_statements (top-level calls)."""

    query: str
    calls: int
    rows: int
    exec_ms: float
    wal_bytes: int


def statement_counters(stores: Stores, database_url: str) -> dict[int, Statement]:
    """Every statement pg_stat_statements knows of in ``database_url``'s database, by
    queryid (empty when it is not loaded). Subtract two readings with ``statements_between``."""
    name = urlsplit(database_url).path.lstrip("/")
    out: dict[int, Statement] = {}
    with psycopg.connect(stores.postgres_url, autocommit=True) as conn:
        try:
            rows = conn.execute(
                "SELECT s.queryid, s.query, s.calls, s.rows, s.total_exec_time, s.wal_bytes "
                "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
                "WHERE d.datname = %s", (name,)).fetchall()
        except psycopg.Error:
            return out
    for queryid, query, calls, nrows, exec_ms, wal in rows:
        if queryid is None:
            continue
        seen = out.get(int(queryid))
        if seen is not None:  # one queryid per user/toplevel: add them up
            seen.calls += int(calls)
            seen.rows += int(nrows)
            seen.exec_ms += float(exec_ms)
            seen.wal_bytes += int(wal)
        else:
            out[int(queryid)] = Statement(" ".join(str(query).split()), int(calls), int(nrows),
                                          float(exec_ms), int(wal))
    return out


def statements_between(before: dict[int, Statement], after: dict[int, Statement]
                       ) -> list[Statement]:
    """What each statement did between two readings, the busiest (execution time) first."""
    out = []
    for queryid, a in after.items():
        b = before.get(queryid, Statement(a.query, 0, 0, 0.0, 0))
        if a.calls > b.calls:
            out.append(Statement(a.query, a.calls - b.calls, a.rows - b.rows,
                                 a.exec_ms - b.exec_ms, a.wal_bytes - b.wal_bytes))
    return sorted(out, key=lambda s: s.exec_ms, reverse=True)


# --------------------------------------------------------------------------- CPU time


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu(pid: int, *, reaped_children: bool = False) -> float:
    """CPU seconds of a process (all its threads), plus its reaped children's when asked."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    # fields[0] is field 3 (state): utime=14, stime=15, cutime=16, cstime=17
    ticks = int(fields[11]) + int(fields[12])
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICKS


def child_pids(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                out.extend(int(c) for c in (task / "children").read_text().split())
    return out


def process_tree_cpu(root: int) -> float:
    """CPU seconds of the live processes of a tree (e.g. Spark's JVM and its workers)."""
    total, todo, seen = 0.0, [root], set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            total += process_cpu(pid)
            todo += child_pids(pid)
    return total


@dataclass
class Cpu:
    """CPU seconds spent by the benchmark's own processes (client), the PostgreSQL server
    (postmaster, its live backends and the ones that exited) and the Valkey server."""

    client: float
    postgres: float | None
    valkey: float | None

    def __sub__(self, other: Cpu) -> Cpu:
        def minus(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a - b
        return Cpu(self.client - other.client, minus(self.postgres, other.postgres),
                   minus(self.valkey, other.valkey))


def cpu_now(stores: Stores, extra_pids: Sequence[int] = ()) -> Cpu:
    """Only private servers are measured (their pids are known and local). ``extra_pids``
    (e.g. a local API server, the peers' driver) count as client."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    client = me.ru_utime + me.ru_stime  # the workers add their own (see runs.measure_phase)
    client += sum(process_cpu(pid, reaped_children=True) for pid in extra_pids)
    postgres = valkey = None
    if stores.services is not None and stores.services.postgres.private:
        pm = stores.services.postgres.pid  # type: ignore[attr-defined]
        if pm:
            postgres = process_cpu(pm, reaped_children=True) + sum(
                process_cpu(c) for c in child_pids(pm))
    if stores.services is not None and stores.services.valkey.private:
        pid = stores.services.valkey.pid  # type: ignore[attr-defined]
        if pid:
            valkey = process_cpu(pid)
    return Cpu(client, postgres, valkey)


def schedstat_ns(pid: int) -> int:
    """Nanoseconds process ``pid`` has spent on a CPU (``/proc/<pid>/schedstat``: exact,
    unlike the 10 ms ticks of ``stat``); 0 when it is gone."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def backend_work(database_url: str, work: Callable[[Any], int]) -> tuple[int, float | None]:
    """Run ``work(conn)`` on a fresh autocommit connection: (what it returns, its backend's
    CPU seconds for it, None where that process cannot be read: a server elsewhere). A
    benchmark's work after its phases (a sweep, a rotation) is measured so."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        [(pid,)] = conn.execute("SELECT pg_backend_pid()").fetchall()
        before = schedstat_ns(pid)  # (0: not a process of this machine)
        done = work(conn)
        seconds = (schedstat_ns(pid) - before) / 1e9 if before else None
    return done, seconds


PG_KINDS = ("backends", "other backends", "autovacuum", "walwriter",
            "checkpointer+bgwriter", "other")
# Whose connections the database's backends serve, by their application name
# (bench.phases.ROLE_APP_NAME): the producer processes', the consumer processes', and the
# rest (the benchmark's own process, with tierq's maintenance jobs, and any connection
# without the name: asyncpg's, for one, does not read PGAPPNAME).
PG_ROLES = ("producers", "consumers", "rest")
_ROLE_OF_APP_NAME = {ROLE_APP_NAME.format(kind="producer"): "producers",
                     ROLE_APP_NAME.format(kind="consumer"): "consumers"}
# Samples a backend of the database may show no application name before it counts as "rest"
# (a connection's name is known once its start-up is done).
_UNNAMED_SAMPLES = 5


def pg_process_kind(pid: int, database: str) -> str | None:
    """What a child of the postmaster is, from its title (``title_kind``); None when it is
    gone."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
    except OSError:
        return None
    return title_kind(title, database)


def title_kind(title: str, database: str) -> str:
    """What a process titled ``title`` is: ``postgres: <what>``, or ``postgres:
    <cluster_name>: <what>`` where the server sets ``cluster_name`` (Debian's clusters do):
    a backend of ``database`` ("backends"), another database's, an autovacuum worker, ..."""
    body = title.removeprefix("postgres: ")
    # (a cluster_name may hold spaces; no title of a process itself holds ': ')
    _cluster, sep, rest = body.partition(": ")
    if sep and not body.startswith("/"):
        body = rest
    what = body.split()
    if not what:
        return "other"
    if what[0] == "autovacuum" and what[1:2] == ["worker"]:
        return "autovacuum"
    if what[0] == "walwriter":
        return "walwriter"
    if what[0] in ("checkpointer", "background"):
        return "checkpointer+bgwriter"
    if what[0] in ("autovacuum", "logical", "stats", "archiver", "walsender") or \
            title.startswith("/"):
        return "other"
    # a backend: "postgres: <user> <database> <host> <state>"
    return "backends" if len(what) > 1 and what[1] == database else "other backends"


class PgProcesses:
    """The private PostgreSQL's CPU during a phase, split by process kind (``PG_KINDS``).

    Its children are sampled every ``every`` seconds (schedstat):

    | a process                      | counts                                             |
    | ------------------------------ | -------------------------------------------------- |
    | there at the start             | from its value then                                |
    | born later                     | from zero (its whole life)                         |
    | that exited                    | up to its last sample (what it did after is lost)  |
    | that lived between two samples | not at all                                         |

    ``coverage`` compares the sum with the tick counters of ``cpu_now``. ``started``:
    backends of the database born during the phase (connections opened). With
    ``activity_url`` (a database other than the one measured, whose backends are not
    counted), the backends are also split by role (``PG_ROLES``), read from
    ``pg_stat_activity`` once for each new backend."""

    def __init__(self, postmaster: int, database: str, every: float = 0.02,
                 activity_url: str | None = None) -> None:
        self.postmaster = postmaster
        self.database = database
        self.every = every
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.kind: dict[int, str] = {}
        self.born: set[int] = set()
        self.activity_url = activity_url
        self._activity: psycopg.Connection[Any] | None = None
        self.role: dict[int, str] = {}
        self._unnamed: dict[int, int] = {}  # samples each backend has shown no name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-processes", daemon=True)
        self._started = False
        self._lock = threading.Lock()

    def _sample(self) -> None:
        pids = [self.postmaster, *child_pids(self.postmaster)]
        for pid in pids:
            ns = schedstat_ns(pid)
            if pid not in self.kind:
                kind = "other" if pid == self.postmaster else pg_process_kind(
                    pid, self.database)
                if kind is None:
                    continue
                self.kind[pid] = kind
                if self._started:  # born during the phase: its whole life counts
                    self.first[pid] = 0
                    self.born.add(pid)
                else:
                    self.first[pid] = ns
            elif self.kind[pid] in ("other backends", "other") and pid != self.postmaster:
                # a new process shows the postmaster's title until it sets its own, and a
                # backend's names its database only once it is connected
                kind = pg_process_kind(pid, self.database)
                if kind is not None:
                    self.kind[pid] = kind
            if ns:
                self.last[pid] = ns
        if self.activity_url is not None:
            self._read_roles([pid for pid in pids if self.kind.get(pid) == "backends"
                              and pid not in self.role])

    def _read_roles(self, pids: list[int]) -> None:
        """The role of each backend in ``pids`` by its application name."""
        if not pids:
            return
        try:
            names = dict(self._connection().execute(
                "SELECT pid, application_name FROM pg_stat_activity WHERE pid = ANY(%s)",
                (pids,)).fetchall())
        except psycopg.Error:
            if self._activity is not None:  # (a broken connection: opened again next time)
                self._activity.close()
                self._activity = None
            return  # (read again at the next sample)
        for pid in pids:
            name = names.get(pid) or ""
            if name:
                self.role[pid] = _ROLE_OF_APP_NAME.get(name, "rest")
            else:
                self._unnamed[pid] = self._unnamed.get(pid, 0) + 1
                if self._unnamed[pid] >= _UNNAMED_SAMPLES:
                    self.role[pid] = "rest"

    def _connection(self) -> psycopg.Connection[Any]:
        """The connection that reads the roles, opened when there is none."""
        if self._activity is None:
            assert self.activity_url is not None
            self._activity = psycopg.connect(self.activity_url, autocommit=True)
        return self._activity

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            with self._lock:
                self._sample()

    def start(self) -> PgProcesses:
        """Sample from now on; what counts starts at ``mark``. The connection that reads
        the roles opens here, before the phase, for every system alike."""
        if self.activity_url is not None:
            with contextlib.suppress(psycopg.Error):  # (else tried at the first new backend)
                self._connection()
        self._sample()
        self._thread.start()
        return self

    def mark(self) -> None:
        """The phase's start: every process known counts from its value now, and every
        one born from now on from zero."""
        with self._lock:
            self._sample()
            self.first = {pid: self.last.get(pid, 0) for pid in self.kind}
            self.born.clear()
            self._started = True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            self._sample()
            if self._activity is not None:
                self._activity.close()
                self._activity = None

    def seconds_by_kind(self) -> dict[str, float]:
        out = dict.fromkeys(PG_KINDS, 0.0)
        for pid, kind in self.kind.items():
            out[kind] += max(0, self.last.get(pid, 0) - self.first.get(pid, 0)) / 1e9
        return out

    def seconds_by_role(self) -> dict[str, float] | None:
        """The database's backends' CPU seconds by role (``PG_ROLES``); None without
        ``activity_url``."""
        if self.activity_url is None:
            return None
        out = dict.fromkeys(PG_ROLES, 0.0)
        for pid, kind in self.kind.items():
            if kind == "backends":
                out[self.role.get(pid, "rest")] += max(
                    0, self.last.get(pid, 0) - self.first.get(pid, 0)) / 1e9
        return out

    @property
    def started(self) -> int:
        """Backends of the database that were born during the phase."""
        return sum(1 for pid in self.born if self.kind.get(pid) == "backends")


# --------------------------------------------------------------------------- a measured phase


@dataclass
class Measured:
    """One phase of one run with what was measured around it."""

    phase: PhaseResult
    work: PgWork | None = None
    valkey_peak: int | None = None  # bytes above the baseline, sampled
    left: int = 0
    cpu: Cpu | None = None
    statements: list[Statement] | None = None  # per statement, when asked (bench/breakdown.py)
    # PostgreSQL's CPU seconds by process kind and the connections opened (PgProcesses),
    # when asked (bench/breakdown.py)
    pg_by_kind: dict[str, float] | None = None
    pg_connections: int | None = None
    # the database's backends' CPU seconds by role (PgProcesses.seconds_by_role)
    pg_by_role: dict[str, float] | None = None

    def cpu_us_per_task(self) -> dict[str, float | None]:
        """CPU microseconds per task: client processes, PostgreSQL, Valkey."""
        n = self.phase.total
        if self.cpu is None:
            return {"client": None, "postgres": None, "valkey": None}
        def us(v: float | None) -> float | None:
            return None if v is None else v * 1e6 / n
        return {"client": us(self.cpu.client), "postgres": us(self.cpu.postgres),
                "valkey": us(self.cpu.valkey)}

    @property
    def rate(self) -> float:
        return self.phase.rate

    @property
    def counts(self) -> bool:
        """Whether its rate is a figure: every task finished, within the time allowed."""
        return not self.left and not self.phase.timed_out

    def latency(self, key: str, q: float) -> float:
        return percentile(self.phase.values(key), q)

    def role_cpu_us_per_task(self) -> dict[str, float | None]:
        """CPU microseconds of the producer processes per task they enqueued, and of the
        consumer processes per task they acked (the parent's share is in neither)."""
        out: dict[str, float | None] = {}
        for role, count in (("producer", "enqueued"), ("consumer", "acked")):
            mine = [r for r in self.phase.results if count in r and "cpu" in r]
            tasks = sum(r[count] for r in mine)
            out[role] = sum(r["cpu"] for r in mine) * 1e6 / tasks if tasks else None
        return out

    def statements_per_task(self) -> float | None:
        if self.work is None or self.work.statements is None:
            return None
        return self.work.statements / self.phase.total

    def commits_per_task(self) -> float | None:
        return None if self.work is None else self.work.commits / self.phase.total

    def wal_bytes_per_task(self) -> float | None:
        if self.work is None or self.work.wal_bytes is None:
            return None
        return self.work.wal_bytes / self.phase.total

    def wal_syncs_per_task(self) -> float | None:
        if self.work is None or self.work.wal_syncs is None:
            return None
        return self.work.wal_syncs / self.phase.total

    def rows_written_per_task(self) -> float | None:
        """Tuples inserted, updated and deleted in the database, per task."""
        if self.work is None:
            return None
        w = self.work
        return (w.inserted + w.updated + w.deleted) / self.phase.total


def median_rate(repeats: Sequence[Measured | None]) -> float | None:
    """The median rate of one phase over the repeats; none unless every repeat counts."""
    rates = [m.rate for m in repeats if m is not None and m.counts]
    if not rates or len(rates) < len(repeats):
        return None
    return percentile(rates, 50)
