"""Plumbing shared by the benchmarks: the servers, fresh databases, the machine, worker
processes started together, and the measurements (rates, latency percentiles, Postgres
statements, Valkey memory).

Every benchmark runs against PRIVATE servers by default (``tierq.local.services`` under
``/tmp/tierq-bench-<uid>``), so nobody else's load disturbs the numbers and nothing of
anybody else's is wiped. ``--database-url``/``--valkey-url`` point it at given servers
instead: it then creates and drops its own databases on that PostgreSQL and deletes only
``tq:*`` keys on that Valkey.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import multiprocessing as mp
import os
import platform
import queue as queue_module
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
from psycopg import sql

from tierq.local.services import LocalServices, ensure_services

DEFAULT_STATE_DIR = Path(f"/tmp/tierq-bench-{os.getuid()}")
READY_TIMEOUT = 180.0


def say(message: str) -> None:
    """One line of progress on stdout, flushed at once."""
    print(message, flush=True)


# --------------------------------------------------------------------------- servers


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


# --------------------------------------------------------------------------- the machine


def machine_info(stores: Stores) -> dict[str, str]:
    """What the numbers were measured on."""
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


def load_average() -> str:
    """The 1/5/15-minute load averages: how busy the machine was besides the benchmark."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def print_machine(info: dict[str, str]) -> None:
    say("machine:")
    for key, value in info.items():
        say(f"  {key:<9} {value}")


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


def fmt_rate(value: float | None) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    return f"{value:,.0f}"


def fmt_ms(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "-"
    return f"{seconds * 1000:.1f}"


def fmt_cpu(per_task: dict[str, float | None]) -> str:
    """client/postgres/valkey CPU microseconds per task."""
    return "/".join("-" if v is None else f"{v:.0f}" for v in per_task.values())


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1024
    return f"{n:,.1f} GiB"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    say("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(
        headers, widths, strict=True))))
    say("  ".join("-" * w for w in widths))
    for row in rows:
        say("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(
            row, widths, strict=True))))


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
    transactions and tuples written (pg_stat_database)."""

    statements: int | None
    commits: int
    inserted: int
    updated: int
    deleted: int

    def __sub__(self, other: PgWork) -> PgWork:
        statements = (None if self.statements is None or other.statements is None
                      else self.statements - other.statements)
        return PgWork(statements, self.commits - other.commits, self.inserted - other.inserted,
                      self.updated - other.updated, self.deleted - other.deleted)


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
    if row is None:
        return PgWork(count, 0, 0, 0, 0)
    return PgWork(count, int(row[0]), int(row[1]), int(row[2]), int(row[3]))


# --------------------------------------------------------------------------- CPU time


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_cpu(pid: int, *, reaped_children: bool = False) -> float:
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


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                out.extend(int(c) for c in (task / "children").read_text().split())
    return out


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
    (e.g. a local API server) count as client."""
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    client = me.ru_utime + me.ru_stime  # the workers add their own (see run_phase)
    client += sum(_proc_cpu(pid, reaped_children=True) for pid in extra_pids)
    postgres = valkey = None
    if stores.services is not None and stores.services.postgres.private:
        pm = stores.services.postgres.pid  # type: ignore[attr-defined]
        if pm:
            postgres = _proc_cpu(pm, reaped_children=True) + sum(
                _proc_cpu(c) for c in _children(pm))
    if stores.services is not None and stores.services.valkey.private:
        pid = stores.services.valkey.pid  # type: ignore[attr-defined]
        if pid:
            valkey = _proc_cpu(pid)
    return Cpu(client, postgres, valkey)


# --------------------------------------------------------------------------- processes


class Sync:
    """What the parent shares with the processes of one phase: a start line, counters of
    tasks enqueued and finished, and a stop flag. Passed to the processes at their start."""

    def __init__(self, ctx: Any, total: int) -> None:
        self.total = total
        self.ready = ctx.Queue()
        self.results = ctx.Queue()
        self.go = ctx.Event()
        self.stop = ctx.Event()
        self.enqueued = ctx.Value("q", 0)
        self.finished = ctx.Value("q", 0)
        self.start_time = ctx.Value("d", 0.0)
        self.cpu_at_start: float | None = None  # set in each worker process at the start

    def ready_and_wait(self, index: int) -> None:
        """Tell the parent this process is set up; block until every process is."""
        self.ready.put(index)
        self.go.wait()
        self.cpu_at_start = time.process_time()

    def add_enqueued(self, n: int) -> None:
        with self.enqueued.get_lock():
            self.enqueued.value += n

    def add_finished(self, n: int) -> int:
        with self.finished.get_lock():
            self.finished.value += n
            return int(self.finished.value)

    def all_finished(self) -> bool:
        return self.stop.is_set() or self.finished.value >= self.total


Target = Callable[[dict[str, Any], Sync], dict[str, Any]]


@dataclass
class Role:
    """One process of a phase: ``target(spec, sync)`` runs in it and returns a summary dict
    (``t_end``: wall time it finished its part)."""

    kind: str  # "producer" or "consumer"
    target: Target
    spec: dict[str, Any]


@dataclass
class PhaseResult:
    label: str
    total: int
    seconds: float
    results: list[dict[str, Any]]
    timed_out: bool = False
    start_mark: Any = None

    @property
    def rate(self) -> float:
        return self.total / self.seconds if self.seconds > 0 else float("nan")

    @property
    def worker_cpu(self) -> float:
        """CPU seconds the worker processes spent between the start and their end."""
        return float(sum(r.get("cpu", 0.0) for r in self.results))

    def values(self, key: str) -> list[float]:
        out: list[float] = []
        for r in self.results:
            out.extend(r.get(key, []))
        return out


def _child(target: Target, spec: dict[str, Any], sync: Sync, index: int) -> None:
    # Every worker process, whatever the system, starts from the fork server holding the
    # preloaded modules of all systems. Like any long-running pre-forked worker, it freezes
    # them (gc.freeze) so that the cycle collector's full passes stop walking them again and
    # again: in development that walk cost tierq's and PGQueuer's workers alike about a
    # fifth of their CPU (bench/README.md).
    gc.collect()
    gc.freeze()
    try:
        out = target(spec, sync)
        if sync.cpu_at_start is not None:  # CPU of the measured part only, not the set-up
            out["cpu"] = time.process_time() - sync.cpu_at_start
        sync.results.put(("ok", index, out))
    except BaseException:
        sync.results.put(("error", index, traceback.format_exc()))
        sync.stop.set()
        raise SystemExit(1) from None


class PhaseFailed(RuntimeError):
    pass


PRELOAD = ["bench.systems", "tierq.engine", "tierq.config", "tierq.models", "psycopg", "redis",
           "httpx", "asyncpg", "pgqueuer.qm", "pgqueuer.queries", "pgqueuer.db",
           "procrastinate"]
_mp_context: Any = None


def process_context() -> Any:
    """A fork server with the benchmarks' modules imported once: worker processes start in
    milliseconds, and never inherit the parent's threads or connections."""
    global _mp_context
    if _mp_context is None:
        _mp_context = mp.get_context("forkserver")
        _mp_context.set_forkserver_preload(PRELOAD)
    return _mp_context


def run_phase(label: str, roles: Sequence[Role], *, total: int, timeout: float,
              progress_every: float = 2.0,
              at_start: Callable[[], Any] | None = None,
              duration: float | None = None) -> PhaseResult:
    """Start one process per role, wait until all are set up, start them together and wait
    until all are done. The phase takes from the start signal to the latest ``t_end`` of
    the consumers (of the producers when there are none). Prints progress.
    ``at_start`` runs right before the start signal; its value is ``PhaseResult.start_mark``.
    With ``duration``, the processes are asked to stop after that many seconds and the
    phase's total is what they finished by then."""
    ctx = process_context()
    sync = Sync(ctx, total)
    procs = [ctx.Process(target=_child, args=(r.target, r.spec, sync, i), daemon=True,
                         name=f"{label}-{r.kind}-{i}") for i, r in enumerate(roles)]
    for p in procs:
        p.start()
    results: dict[int, dict[str, Any]] = {}
    errors: list[str] = []

    def drain_results(block: float) -> None:
        with contextlib.suppress(queue_module.Empty):
            while True:
                status, index, payload = sync.results.get(timeout=block)
                block = 0.0
                if status == "ok":
                    results[index] = payload
                else:
                    errors.append(f"{procs[index].name}:\n{payload}")

    try:
        ready = 0
        deadline = time.monotonic() + READY_TIMEOUT
        while ready < len(procs):
            try:
                sync.ready.get(timeout=0.5)
                ready += 1
            except queue_module.Empty:
                drain_results(0.0)
                dead = [p for p in procs if not p.is_alive()]
                if errors or dead or time.monotonic() > deadline:
                    raise PhaseFailed(f"{label}: processes failed to start\n"
                                      + "\n".join(errors or [p.name for p in dead])) from None
        start_mark = at_start() if at_start is not None else None
        t0 = time.time()
        sync.start_time.value = t0
        sync.go.set()
        last_print = time.monotonic()
        last_done = 0
        timed_out = False
        end_at = time.monotonic() + timeout
        while len(results) + len(errors) < len(procs):
            drain_results(0.2)
            if errors:
                sync.stop.set()
                break
            now = time.monotonic()
            if duration is not None and not sync.stop.is_set() and time.time() - t0 >= duration:
                sync.stop.set()
            if now >= end_at:
                timed_out = True
                sync.stop.set()
                say(f"  [{label}] timed out after {timeout:.0f}s: stopping")
                end_at = now + 30  # let the processes finish cleanly
                timeout = float("inf")
            if now - last_print >= progress_every:
                done = sync.finished.value
                say(f"  [{label}] {time.time() - t0:5.1f}s  enqueued {sync.enqueued.value:,}"
                    f"  finished {done:,}/{total:,}"
                    f"  ({(done - last_done) / (now - last_print):,.0f}/s now)")
                last_print, last_done = now, done
            if any(not p.is_alive() for p in procs) and len(results) + len(errors) < len(procs):
                drain_results(1.0)
                gone = [p for i, p in enumerate(procs) if not p.is_alive() and i not in results]
                if gone and len(results) + len(errors) < len(procs):
                    errors.append("exited without a result: " + ", ".join(
                        f"{p.name} (exit {p.exitcode})" for p in gone))
                    sync.stop.set()
                    break
        if errors:
            raise PhaseFailed(f"{label} failed:\n" + "\n".join(errors))
    finally:
        sync.stop.set()
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    ordered = [results[i] for i in sorted(results)]
    consumers = [results[i] for i, r in enumerate(roles) if r.kind == "consumer" and i in results]
    ends = [r["t_end"] for r in (consumers or ordered)]
    seconds = max(ends) - t0 if ends else float("nan")
    if duration is not None:
        total = int(sync.finished.value)
    return PhaseResult(label, total, seconds, ordered, timed_out, start_mark)


def split(total: int, parts: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges splitting ``total`` into ``parts`` nearly equal pieces."""
    base, extra = divmod(total, parts)
    out, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out
