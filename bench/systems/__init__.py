"""The queues under test, one module each, behind the same small interface (``System``):
prepare a fresh store, producer and consumer process targets, count what is left, clean up.

* ``tierq-engine`` (tierq_engine.py): the ``Tierq`` engine in each process, with the
  scheduled maintenance jobs running beside it;
* ``tierq-http`` (tierq_http.py): the same through the HTTP API of the local stack;
* ``pgqueuer`` (pgqueuer.py) and ``procrastinate`` (procrastinate.py): the peers, run in an
  environment of their own (bench/peers/), so no pin of theirs caps tierq's packages;
* ``bare-table`` (bare_table.py): one durable PostgreSQL table read with ``FOR UPDATE SKIP
  LOCKED``, the floor the peers sit on (bench.vs_bare).
* ``tierq-hot-sketch`` (hot_sketch.py): ``tierq-engine`` with design A's insert and ack
  statements sketched in (``bench.vs_bare --sketch``): a measurement of a design, not a
  product path;
* ``tierq-log-sketch`` (log_sketch.py), ``tierq-batch-sketch`` (batch_sketch.py) and
  ``tierq-append-sketch`` (append_sketch.py): the same with design B's, C's and D's
  (``--sketch b``, ``--sketch c``, ``--sketch d``);
* ``two-store-floor`` (two_store_floor.py): the least any queue with PostgreSQL as its
  system of record and Valkey as its dispatcher does per task, with a row per task or per
  batch (``bench.vs_bare --floor``).

Every task is a no-op carrying a tiny JSON payload (``{"i": n}``). Each system gets its own
fresh database on the same PostgreSQL server. This module is imported on both sides (the
peers' environment has no tierq): standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, LiteralString

from bench.phases import PhaseResult, Role, Sync, Target, run_phase, split

if TYPE_CHECKING:
    from bench.stores import Stores

QUEUE = "bench"

# The workload. The peers enqueue 1000 per call; tierq 500, the largest request it takes
# (since the warm tier's data hash stopped being a listpack, 500 is faster end-to-end than
# 250 or 100: bench/README.md, Method).
PEER_ENQUEUE_BATCH = 1000
TIERQ_ENQUEUE_BATCH = 500
PEER_DEQUEUE_BATCH = 100
PGQUEUER_MANAGERS_PER_PROCESS = 4
# Tasks one tierq worker process holds at a time: as many as a PGQueuer worker process holds
# (its 4 queue managers x batch_size 100). PGQueuer itself is no faster with batch_size 300
# (measured side by side, bench/README.md), so it keeps 100.
TIERQ_CLAIM_BATCH = PGQUEUER_MANAGERS_PER_PROCESS * PEER_DEQUEUE_BATCH
PROCRASTINATE_CONCURRENCY = 10
EMPTY_CLAIM_SLEEP = 0.002  # a tierq consumer that found nothing waits this long


@dataclass(frozen=True)
class Workload:
    """What one run's producers enqueue and its consumers claim (tierq and the bare table;
    the peers keep their own settings). Goes to the processes as ``spec["workload"]``."""

    enqueue_batch: int = TIERQ_ENQUEUE_BATCH
    claim_batch: int = TIERQ_CLAIM_BATCH
    tenants: int = 0  # 0: every task in the default tenant; n: t0..t{n-1}, at random
    priorities: bool = False  # each task a random priority 0..9 (else 0)
    key_every: int = 0  # a key on one task in this many (0: none)

    @property
    def mixed(self) -> bool:
        return bool(self.tenants or self.priorities or self.key_every)

    def spec(self) -> dict[str, Any]:
        return {"batch": self.enqueue_batch, "claim_batch": self.claim_batch,
                "workload": asdict(self)}


@dataclass
class Rows:
    """The attributes of a producer's tasks besides their payload, index ``i - lo``: the
    same for every system, since they are drawn from a generator seeded by ``lo``."""

    tenants: list[str | None]
    priorities: list[int]
    keys: list[str | None]


def mixed_rows(spec: dict[str, Any], key_prefix: str) -> Rows | None:
    """The tenants, priorities and keys of this producer's share of a mixed workload (none
    for a plain one). Drawn before the start: only the requests are on the clock. Keys are
    ``<key_prefix><i>`` so that no two phases' tasks share one."""
    w = spec.get("workload")
    if not w or not (w["tenants"] or w["priorities"] or w["key_every"]):
        return None
    lo, hi = spec["range"]
    rng = random.Random(lo)
    n = hi - lo
    tenants: list[str | None] = ([f"t{rng.randrange(w['tenants'])}" for _ in range(n)]
                                 if w["tenants"] else [None] * n)
    priorities = [rng.randrange(10) for _ in range(n)] if w["priorities"] else [0] * n
    every = w["key_every"]
    keys = [f"{key_prefix}{lo + j}" if every and (lo + j) % every == 0 else None
            for j in range(n)]
    return Rows(tenants, priorities, keys)


@dataclass
class Prepared:
    """One system made ready for one run."""

    system: str
    spec: dict[str, Any]
    database_url: str


class System:
    name = ""
    uses_valkey = False
    # modules the fork server of this system's worker processes imports once
    preload: tuple[str, ...] = ()

    def prepare(self, stores: Stores) -> Prepared:
        raise NotImplementedError

    def producer(self) -> Target:
        raise NotImplementedError

    def consumer(self) -> Target:
        raise NotImplementedError

    def run_notes(self, prepared: Prepared) -> list[str]:
        """What a run's table should say of this system's run once its phases are over
        (before its store is dropped); nothing by default."""
        return []

    def pg_us_per_task_apart(self, prepared: Prepared) -> float | None:
        """PostgreSQL CPU microseconds per task this system spends outside the measured
        phases, measured apart once they are over (a sketch's rotation,
        bench/systems/log_sketch.py); None: none."""
        return None

    def remaining(self, prepared: Prepared) -> int:
        """Tasks not finished (still queued or running) in the store."""
        raise NotImplementedError

    @contextlib.contextmanager
    def running(self, prepared: Prepared) -> Iterator[None]:
        """Whatever runs beside the workers during a phase (maintenance jobs, a server)."""
        yield

    def client_pids(self, prepared: Prepared) -> list[int]:
        """Processes besides this one and the workers whose CPU counts as the client's."""
        return []

    def roles(self, prepared: Prepared, *, producers: int, consumers: int,
              total: int) -> list[Role]:
        roles: list[Role] = []
        for lo, hi in split(total, producers) if producers else []:
            roles.append(Role("producer", self.producer(),
                              {**prepared.spec, "index": len(roles), "range": (lo, hi)}))
        for _ in range(consumers):
            roles.append(Role("consumer", self.consumer(),
                              {**prepared.spec, "index": len(roles)}))
        return roles

    def run_phase(self, label: str, roles: list[Role], *, total: int, timeout: float,
                  at_start: Callable[[], Any] | None = None) -> PhaseResult:
        """One phase of these roles: here, in worker processes of this interpreter."""
        return run_phase(label, roles, total=total, timeout=timeout, preload=self.preload,
                         at_start=at_start)

    def cleanup(self, stores: Stores, prepared: Prepared) -> None:
        stores.drop_database(prepared.database_url)

    def close(self) -> None:
        """Release what the system keeps between runs."""


def quiet_logs() -> None:
    logging.basicConfig(level=logging.WARNING)
    for name in ("pgqueuer", "procrastinate", "psycopg", "asyncio", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)


def batches(spec: dict[str, Any], sync: Sync, size: int) -> Iterator[range]:
    """A producer's share (``spec["range"]``) in batches of ``size``, until the phase stops."""
    lo, hi = spec["range"]
    for start in range(lo, hi, size):
        if sync.stop.is_set():
            return
        yield range(start, min(start + size, hi))


def count_rows(database_url: str, query: LiteralString) -> int:
    """The single count ``query`` answers (what a system has left unfinished)."""
    import psycopg  # both environments have it; imported here to keep this module light

    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def sweep_then_empty(database_url: str, sweep: LiteralString, left: LiteralString,
                     empty: LiteralString) -> tuple[int, float | None]:
    """Run a batch-row system's ``sweep`` (it answers the tasks of the batches it deleted),
    then ``empty`` its acks when ``left`` (a count of the batches left) is 0, in one
    transaction: (those tasks, the backend's CPU seconds for it, None where its process
    cannot be read). Used by the batch-row floor and design D."""
    from bench.measure import backend_work

    def delete(conn: Any) -> int:
        with conn.transaction():
            [(tasks,)] = conn.execute(sweep).fetchall()
            if conn.execute(left).fetchone() == (0,):
                conn.execute(empty)
        return int(tasks)

    return backend_work(database_url, delete)


def produced(spec: dict[str, Any], t_end: float, latencies: list[float]) -> dict[str, Any]:
    """A producer's summary: when it finished, what it enqueued, each call's latency."""
    lo, hi = spec["range"]
    return {"t_end": t_end, "enqueued": hi - lo, "enqueue_latency": latencies}


def run_quietly(work: Callable[[dict[str, Any], Sync], Coroutine[Any, Any, dict[str, Any]]],
                spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    """An asyncio producer or consumer (the peers'), run in its process's event loop."""
    quiet_logs()
    return asyncio.run(work(spec, sync))


def claim_and_ack_loop(sync: Sync, claim: Callable[[], Sequence[Any]],
                       ack: Callable[[Sequence[Any]], tuple[int, int]],
                       flush: Callable[[], tuple[int, int]] | None = None
                       ) -> dict[str, Any]:
    """A tierq consumer's loop until the phase's tasks are finished: ``claim`` a batch,
    ``ack`` it (returns how many were acked and rejected), each call timed. Claims that
    found nothing are counted, not timed. ``flush``: called at a claim that found nothing,
    for a consumer whose ``ack`` holds claimed tasks back to ack several claims at once
    (returns as ``ack``)."""
    claim_latency: list[float] = []
    ack_latency: list[float] = []
    acked = rejected = empty = 0
    t_end = time.time()
    while not sync.all_finished():
        began = time.perf_counter()
        got = claim()
        took = time.perf_counter() - began
        if not got:
            empty += 1
            if flush is not None:
                done, refused = flush()
                acked += done
                rejected += refused
                if done:
                    t_end = time.time()
                    sync.add_finished(done)
                    continue
            time.sleep(EMPTY_CLAIM_SLEEP)
            continue
        claim_latency.append(took)
        began = time.perf_counter()
        done, refused = ack(got)
        ack_latency.append(time.perf_counter() - began)
        acked += done
        rejected += refused
        t_end = time.time()
        sync.add_finished(done)
    return {"t_end": t_end, "acked": acked, "rejected": rejected, "empty_claims": empty,
            "claim_latency": claim_latency, "ack_latency": ack_latency}
