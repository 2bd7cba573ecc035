"""PostgreSQL's work per write of a task's life, statement by statement, for tierq and the
bare table (issue 29: where PostgreSQL's time goes).

    .venv/bin/python -m bench.pg_writes                       # 20,000 tasks a step, 3 rounds
    .venv/bin/python -m bench.pg_writes --tasks 5000 --rounds 1   # a quick, coarse run

One process, one connection per system, no concurrency: each step runs its statements back
to back on that connection and is measured by what the server did meanwhile. The systems
take turns shape by shape (which goes first alternates), and each step's figures are summed
over the rounds, so that a machine whose speed drifts weighs on both alike:

* **backend µs/task**: the CPU time of the connection's backend process, from
  ``/proc/<pid>/schedstat`` (nanoseconds on the CPU; not ticks), per task the step moved.
  On a loaded machine a busy neighbour's cache misses still add some, but unlike a rate or
  pg_stat_statements' execution time (wall time) it does not count the time the backend
  waited for a core; compare steps and systems inside one run;
* **server µs/task**: the same for the postmaster and all its live children (the backend,
  the WAL writer, the checkpointer, ...): what a write costs the server beyond its backend;
* **WAL bytes/task** (``pg_current_wal_insert_lsn``), **statements/task**
  (pg_stat_statements: ``set_config``, ``BEGIN`` and ``COMMIT`` count) and **commits/task**
  (transactions that wrote: the server's transaction id counter).

The tierq steps run the engine's own named statements through ``TaskStore`` (so
``set_config`` pipelines and transactions are as in production); the bare table's are
``bench/systems/bare_table.py``'s, unchanged (the engine's connection as the engine opens
it without RDS Proxy: timeouts on the session). Steps, per shape (tierq / the bare table):

* ``<shape>: insert``: ``insert_tasks_uniform`` (mixed: ``insert_tasks_uniform_keyed``) /
  ``PRODUCE`` (mixed: ``PRODUCE_MIXED``), 500 a statement;
* ``<shape>: ack`` / ``claim + ack``: ``ack_delete`` of N ids (claims are Valkey's) / a
  worker's loop, ``CLAIM`` N then ``ACK`` what came, until no task is left, split into its
  two statements (``: claim``, ``: ack``);
* ``<shape>: vacuum``: ``VACUUM`` of the table after the acks (the debt a delete leaves);
* ``cold path: ...`` (tierq only): cold rows, ``promote_cold`` 500 a call in its
  transaction, ``lease_outcomes`` of 100 (delayed for a retry), ``make_ready`` of 100
  (delayed -> warm, in a transaction), ``ack_delete`` of 400, ``VACUUM``.

Shapes: ``4x400`` (N = 400), ``8x10`` (N = 10), ``mixed`` (N = 100; 10 tenants, priorities
0-9, a key on 1 task in 10). Each shape's steps run on a table of that step's tasks
only (the bare table is made again as the shape makes it). The last lines give one task's
life at each shape (insert, ack or claim + ack, vacuum):
``backend_us_per_task_<system>_<shape>=`` and ``backend_ratio_<shape>=`` (tierq / bare).

Autovacuum is off for the two tables (``autovacuum_enabled = false``) so that every dead row
is left to the measured ``VACUUM``. Runs on a private server (``tierq.local.services``) or a
local one given by ``--database-url`` whose processes this user can read in ``/proc``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.measure import child_pids, schedstat_ns
from bench.report import print_figures, print_machine, print_table, say, write_json
from bench.stores import add_store_arguments, machine_info, opened_stores
from bench.systems import bare_table

QUEUE = "bench"


def tree_ns(root: int) -> int:
    """schedstat_ns of ``root`` and its live children."""
    return schedstat_ns(root) + sum(schedstat_ns(c) for c in child_pids(root))


def wal_lsn(admin: psycopg.Connection[Any]) -> int:
    row = admin.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint").fetchone()
    return int(row[0]) if row else 0


def stat_counts(admin: psycopg.Connection[Any], database: str) -> tuple[int, int]:
    """(statements of a database so far, the server's next transaction id): statements from
    pg_stat_statements (0 when it is not loaded), and the id counter moves by one per
    transaction that wrote (the admin connection's readings write nothing)."""
    statements = 0
    try:
        got = admin.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s", (database,)).fetchone()
        statements = int(got[0]) if got else 0
    except psycopg.Error:
        pass
    row = admin.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
                        ).fetchone()
    return statements, int(row[0]) if row else 0


@dataclass
class Step:
    system: str
    name: str
    tasks: int
    backend_us: float
    server_us: float | None
    wal_bytes: float
    statements: float
    commits: float

    def row(self) -> list[str]:
        server = "-" if self.server_us is None else f"{self.server_us:.2f}"
        return [self.system, self.name, f"{self.tasks:,}", f"{self.backend_us:.2f}", server,
                f"{self.wal_bytes:.0f}", f"{self.statements:.4f}", f"{self.commits:.4f}"]


class Split:
    """The backend's CPU of a step split between its parts (``with split.part(name):``
    around each statement of that part)."""

    def __init__(self, backend: int) -> None:
        self.backend = backend
        self.ns: dict[str, int] = {}

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        before = schedstat_ns(self.backend)
        yield
        self.ns[name] = self.ns.get(name, 0) + schedstat_ns(self.backend) - before


def statement_wal(admin: psycopg.Connection[Any], database: str) -> dict[str, tuple[int, int]]:
    """(calls, WAL bytes) of each statement of a database (pg_stat_statements), by text."""
    try:
        rows = admin.execute(
            "SELECT s.query, sum(s.calls)::bigint, sum(s.wal_bytes)::bigint "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = %s GROUP BY s.query", (database,)).fetchall()
    except psycopg.Error:
        return {}
    return {str(q): (int(c), int(w)) for q, c, w in rows}


class Meter:
    """Measures steps on one backend of one database; a step measured again (a later round)
    adds to the same totals."""

    def __init__(self, admin_url: str, database: str, postmaster: int | None,
                 backend: int, system: str) -> None:
        self.admin = psycopg.connect(admin_url, autocommit=True)
        self.database = database
        self.postmaster = postmaster
        self.backend = backend
        self.system = system
        # by step name: tasks, backend ns, server ns, WAL bytes, statements, commits
        self.sums: dict[str, list[int]] = {}

    def add(self, name: str, values: Sequence[int]) -> None:
        total = self.sums.setdefault(name, [0] * len(values))
        for i, v in enumerate(values):
            total[i] += v

    @contextmanager
    def step(self, name: str, tasks: int,
             parts: dict[str, str] | None = None) -> Iterator[Split]:
        """Measure the block as one step; with ``parts`` (name -> the start of its
        statement's text), also each part: its share of the backend's CPU (``Split``), its
        statements' calls and WAL bytes (pg_stat_statements; each is its own transaction)."""
        split = Split(self.backend)
        by_text = statement_wal(self.admin, self.database) if parts else {}
        s0, c0 = stat_counts(self.admin, self.database)
        w0 = wal_lsn(self.admin)
        b0 = schedstat_ns(self.backend)
        t0 = tree_ns(self.postmaster) if self.postmaster else 0
        yield split
        b1 = schedstat_ns(self.backend)
        t1 = tree_ns(self.postmaster) if self.postmaster else 0
        w1 = wal_lsn(self.admin)
        s1, c1 = stat_counts(self.admin, self.database)
        self.add(name, [tasks, b1 - b0, t1 - t0, w1 - w0, s1 - s0, c1 - c0])
        if parts:
            after = statement_wal(self.admin, self.database)
            for part, prefix in parts.items():
                calls = wal = 0
                for text, (c, w) in after.items():
                    if text.startswith(prefix):
                        c_before, w_before = by_text.get(text, (0, 0))
                        calls += c - c_before
                        wal += w - w_before
                self.add(f"{name}: {part}", [tasks, split.ns.get(part, 0), -1, wal, calls,
                                             calls])

    def steps(self) -> list[Step]:
        out = []
        for name, (tasks, backend, server, wal, statements, commits) in self.sums.items():
            n = max(tasks, 1)
            out.append(Step(self.system, name, tasks, backend / 1e3 / n,
                            server / 1e3 / n if self.postmaster and server >= 0 else None,
                            wal / n, statements / n, commits / n))
        return out

    def close(self) -> None:
        self.admin.close()


@dataclass
class Batch:
    ids: list[str]
    tenants: list[str]
    priorities: list[int]
    keys: list[str | None]


def make_tasks(n: int, *, mixed: bool, seed: int) -> list[Batch]:
    """Batches of 500 tasks: ids (UUIDv7 as tierq makes them), tenants, priorities, keys."""
    from tierq.core.ids import uuid7_strings

    rng = random.Random(seed)
    out = []
    for lo in range(0, n, 500):
        size = min(500, n - lo)
        out.append(Batch(
            uuid7_strings(size),
            [f"t{rng.randrange(10)}" if mixed else "_" for _ in range(size)],
            [rng.randrange(10) if mixed else 0 for _ in range(size)],
            [f"k{seed}-{lo + j}" if mixed and (lo + j) % 10 == 0 else None
             for j in range(size)]))
    return out


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for lo in range(0, len(items), size):
        yield items[lo:lo + size]


class TierqSide:
    """tierq's statements on one pooled connection of its own."""

    def __init__(self, url: str) -> None:
        from tierq.dal.postgres import Database
        from tierq.dal.task_store import TaskStore

        # as the engine opens its connections without RDS Proxy
        self.db = Database(url, min_size=1, max_size=1, session_settings=True)
        self.store = TaskStore(self.db)
        self.tenant_of: dict[str, str] = {}  # (the settling statements take each id's tenant)
        with self.db.connection() as conn:
            self.backend = conn.info.backend_pid

    def columns(self, batch: Batch, state: str, *, keyed: bool) -> Any:
        from tierq.logic.enqueue import row_columns

        return row_columns(self.prepared(batch, state), keyed=keyed)

    def prepared(self, batch: Batch, state: str) -> Any:
        from tierq.logic.enqueue import Prepared

        now = time.time()
        return [Prepared(i, batch.ids[i], batch.tenants[i], batch.keys[i],
                         batch.priorities[i], b'{"i":%d}' % i, False, now, 3, "ignore",
                         True, state) for i in range(len(batch.ids))]

    def uniform(self, batch: Batch, state: str, *, keyed: bool = False) -> Any:
        """The batch's columns as insert_tasks_uniform (``keyed``: insert_tasks_uniform_keyed)
        takes them (None: not uniform)."""
        from tierq.logic.enqueue import uniform_columns

        return uniform_columns(self.prepared(batch, state), keyed=keyed)

    def insert(self, batches: Sequence[Batch], state: str, *, keyed: bool) -> None:
        now = datetime.now(UTC)
        for batch in batches:  # (the engine's statements: uniform batches, as these are)
            self.tenant_of.update(zip(batch.ids, batch.tenants, strict=True))
            columns = self.uniform(batch, state, keyed=keyed)
            assert columns is not None, "the benchmark's batches are uniform"
            if keyed:
                self.store.insert_tasks_uniform_keyed(QUEUE, now, columns)
            else:
                self.store.insert_tasks_uniform(QUEUE, now, columns)

    def claim_order(self, batches: Sequence[Batch]) -> list[str]:
        """The ids in the order claims hand them out (priority first, then seq)."""
        rows = [(-p, n, i) for n, b in enumerate(batches)
                for i, p in zip(b.ids, b.priorities, strict=True)]
        return [i for _, _, i in sorted(rows)]

    def ack(self, ids: Sequence[str], size: int, attempt: int = 1) -> None:
        for part in chunks(ids, size):
            done = self.store.ack_delete(QUEUE, part, [self.tenant_of[i] for i in part],
                                         attempt)
            if len(done) != len(part):
                raise RuntimeError(f"acked {len(done)} of {len(part)}")

    def promote(self, tenant: str, total: int) -> None:
        from tierq.dal.postgres import transaction

        moved = 0
        now = datetime.now(UTC)
        with self.db.connection() as conn:
            while moved < total:
                with transaction(conn):
                    self.store.local_lock_timeout(conn, "200ms")
                    rows = self.store.promote_cold(conn, QUEUE, tenant, 500, now)
                if not rows:
                    break
                moved += len(rows)
        if moved != total:
            raise RuntimeError(f"promoted {moved} of {total}")

    def nack(self, ids: Sequence[str], size: int) -> None:
        now = datetime.now(UTC)
        for part in chunks(ids, size):
            n = len(part)
            rows = self.store.lease_outcomes(QUEUE, now, part, [self.tenant_of[i] for i in part],
                                             [1] * n, ["boom"] * n, [now] * n, [False] * n)
            if len(rows) != n:
                raise RuntimeError(f"nacked {len(rows)} of {n}")

    def retry(self, ids: Sequence[str], size: int) -> None:
        from tierq.dal.postgres import transaction

        now = datetime.now(UTC)
        with self.db.connection() as conn:
            for part in chunks(ids, size):
                with transaction(conn):
                    rows = self.store.make_ready(conn, part, ["warm"] * len(part),
                                                 ["delayed"], now)
                if len(rows) != len(part):
                    raise RuntimeError(f"made ready {len(rows)} of {len(part)}")

    def vacuum(self) -> None:
        with self.db.connection() as conn:
            conn.execute("VACUUM tierq_tasks")

    def left(self) -> int:
        with self.db.connection() as conn:
            row = conn.execute("SELECT count(*) AS n FROM tierq_tasks").fetchone()
            return int(row["n"]) if row else -1

    def close(self) -> None:
        self.db.close()


class BareSide:
    """The bare table's statements on one autocommit connection (bare_table.connect)."""

    def __init__(self, url: str) -> None:
        self.conn = bare_table.connect({"database_url": url})
        self.create(mixed=False)
        row = self.conn.execute("SELECT pg_backend_pid()").fetchone()
        self.backend = int(row[0]) if row else 0

    def create(self, *, mixed: bool) -> None:
        """The table as bench.vs_bare makes it for a shape (a tenant column when mixed)."""
        self.conn.execute("DROP TABLE IF EXISTS q")
        self.conn.execute(bare_table.DDL)
        if mixed:
            self.conn.execute(bare_table.TENANT_DDL)
        self.conn.execute("ALTER TABLE q SET (autovacuum_enabled = false)")

    def produce(self, batches: Sequence[Batch], *, mixed: bool) -> None:
        import orjson

        for batch in batches:
            payloads = [orjson.dumps({"i": i}).decode() for i in range(len(batch.ids))]
            if mixed:
                self.conn.execute(bare_table.PRODUCE_MIXED,
                                  (batch.tenants, batch.priorities, payloads))
            else:
                self.conn.execute(bare_table.PRODUCE, (payloads,))

    def claim_and_ack(self, size: int, split: Split) -> int:
        """A worker's loop: claim ``size`` (``CLAIM``), delete what came (``ACK``), until
        nothing is left; the tasks finished."""
        done = 0
        while True:
            with split.part("claim"):
                rows = self.conn.execute(bare_table.CLAIM, (size,)).fetchall()
            if not rows:
                return done
            with split.part("ack"):
                self.conn.execute(bare_table.ACK, ([r[0] for r in rows],))
            done += len(rows)

    def vacuum(self) -> None:
        self.conn.execute("VACUUM q")

    def left(self) -> int:
        row = self.conn.execute(bare_table.UNFINISHED).fetchone()
        return int(row[0]) if row else -1

    def close(self) -> None:
        self.conn.close()


SHAPES = {"4x400": (400, False), "8x10": (10, False), "mixed": (100, True)}
BARE_PARTS = {"claim": "UPDATE q SET leased_until", "ack": "DELETE FROM q"}


class TierqRun:
    """tierq's steps, one block per shape, on its own database and connection."""

    def __init__(self, url: str, meter_for: Callable[[int, str], Meter]) -> None:
        from tierq.dal.migrate import migrate

        migrate(url)
        self.side = TierqSide(url)
        with self.side.db.connection() as conn:
            conn.execute("ALTER TABLE tierq_tasks SET (autovacuum_enabled = false)")
        self.meter = meter_for(self.side.backend, "tierq")

    def shape(self, shape: str, tasks: int, seed: int) -> None:
        """Insert, ack (claims are Valkey's), vacuum."""
        size, mixed = SHAPES[shape]
        side, meter = self.side, self.meter
        batches = make_tasks(tasks, mixed=mixed, seed=seed)
        with meter.step(f"{shape}: insert", tasks):
            side.insert(batches, "warm", keyed=mixed)
        with meter.step(f"{shape}: ack ({size})", tasks):
            side.ack(side.claim_order(batches), size)
        with meter.step(f"{shape}: vacuum", tasks):
            side.vacuum()

    def cold_path(self, tasks: int, seed: int) -> None:
        """A cold backlog promoted, then failed once and retried."""
        side, meter = self.side, self.meter
        batches = make_tasks(tasks, mixed=False, seed=seed)
        with meter.step("cold path: insert cold", tasks):
            side.insert(batches, "cold", keyed=False)
        with meter.step("cold path: promote (500)", tasks):
            side.promote("_", tasks)
        order = side.claim_order(batches)
        with meter.step("cold path: nack (100)", tasks):
            side.nack(order, 100)
        with meter.step("cold path: retry (100)", tasks):
            side.retry(order, 100)
        with meter.step("cold path: ack (400)", tasks):
            side.ack(order, 400, attempt=2)
        with meter.step("cold path: vacuum", tasks):
            side.vacuum()

    def close(self) -> None:
        left = self.side.left()
        self.side.close()
        if left:
            raise RuntimeError(f"{left} tierq rows left")


class BareRun:
    """The bare table's steps, one block per shape, on its own database and connection."""

    def __init__(self, url: str, meter_for: Callable[[int, str], Meter]) -> None:
        self.side = BareSide(url)
        self.meter = meter_for(self.side.backend, "bare")

    def shape(self, shape: str, tasks: int, seed: int) -> None:
        """Insert, a worker's claims and acks, vacuum, on the table as that shape makes it."""
        size, mixed = SHAPES[shape]
        side, meter = self.side, self.meter
        side.create(mixed=mixed)
        batches = make_tasks(tasks, mixed=mixed, seed=seed)
        with meter.step(f"{shape}: insert", tasks):
            side.produce(batches, mixed=mixed)
        with meter.step(f"{shape}: claim + ack ({size})", tasks, BARE_PARTS) as split:
            if side.claim_and_ack(size, split) != tasks:
                raise RuntimeError("the bare table lost tasks")
        with meter.step(f"{shape}: vacuum", tasks):
            side.vacuum()

    def close(self) -> None:
        left = self.side.left()
        self.side.close()
        if left:
            raise RuntimeError(f"{left} bare rows left")


def life_us(steps: Sequence[Step], system: str, shape: str) -> float | None:
    """The backend's CPU per task of one task's life at a shape: its insert, ack (or claim
    and ack) and vacuum steps."""
    own = [s for s in steps if s.system == system and s.name.startswith(f"{shape}: ")
           and s.name.count(":") == 1]
    return sum(s.backend_us for s in own) if own else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_writes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=20_000,
                        help="tasks per step and round (20000)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds; the systems take turns in each (3)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    if args.tasks < 1000 or args.rounds < 1:
        parser.error("--tasks must be at least 1000 and --rounds at least 1")
    with opened_stores(args) as stores:
        from bench.stores import enable_pg_stat_statements

        enable_pg_stat_statements(stores)
        info = machine_info(stores)
        print_machine(info)
        postmaster = None
        if stores.private and stores.services is not None:
            postmaster = stores.services.postgres.pid  # type: ignore[attr-defined]

        def meter_for(url: str) -> Callable[[int, str], Meter]:
            database = url.rsplit("/", 1)[1]
            return lambda backend, name: Meter(stores.postgres_url, database, postmaster,
                                               backend, name)

        tierq_url = stores.fresh_database("writes_tierq")
        bare_url = stores.fresh_database("writes_bare")
        tierq = TierqRun(tierq_url, meter_for(tierq_url))
        bare = BareRun(bare_url, meter_for(bare_url))
        try:
            for r in range(args.rounds):
                say(f"-- round {r + 1}/{args.rounds}: {args.tasks:,} tasks per step")
                for i, shape in enumerate(SHAPES):
                    pair: list[TierqRun | BareRun] = [tierq, bare]
                    for run in (pair if (r + i) % 2 == 0 else pair[::-1]):
                        run.shape(shape, args.tasks, seed=100 * r + i)
                tierq.cold_path(args.tasks, seed=100 * r + 99)
        finally:
            tierq.close()
            bare.close()
        steps = tierq.meter.steps() + bare.meter.steps()
        tierq.meter.close()
        bare.meter.close()
    say("")
    say(f"per task: the backend's CPU (schedstat), the whole server's, WAL bytes, statements "
        f"and commits ({args.tasks:,} tasks per step, {args.rounds} round(s), the systems "
        "taking turns, one connection each)")
    print_table(["system", "step", "tasks", "backend us", "server us", "WAL bytes",
                 "statements", "commits"], [s.row() for s in steps])
    write_json(args.json, {"machine": info, "tasks": args.tasks, "rounds": args.rounds,
                           "steps": [vars(s) for s in steps]})
    lines = []
    rows = []
    for shape in SHAPES:
        mine, bare_us = life_us(steps, "tierq", shape), life_us(steps, "bare", shape)
        rows.append([shape, "-" if mine is None else f"{mine:.1f}",
                     "-" if bare_us is None else f"{bare_us:.1f}",
                     "-" if not mine or not bare_us else f"{mine / bare_us:.2f}"])
        for system, value in (("tierq", mine), ("bare", bare_us)):
            if value is not None:
                lines.append(f"backend_us_per_task_{system}_{shape}={value:.1f}")
        if mine and bare_us:
            lines.append(f"backend_ratio_{shape}={mine / bare_us:.2f}")
    say("")
    say("one task's life per shape (insert, the claim and ack's statements, vacuum): the "
        "backend's CPU per task")
    print_table(["shape", "tierq us", "bare us", "tierq / bare"], rows)
    print_figures(*lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
