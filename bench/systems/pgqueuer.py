"""``pgqueuer``: PGQueuer 1.6 at the settings its docs give for throughput: asyncpg driver,
``pgq install`` (durable) + ``pgq autovac``; producers enqueue lists of 1000 per call; each
worker process runs 4 queue managers, each on its own asyncpg connection ("always use a
direct asyncpg connection for the QueueManager"), ``batch_size=100``, LISTEN/NOTIFY.
Completions are buffered by PGQueuer; a phase ends after they are flushed.

Runs in the peers' environment (bench/peers/): the functions below import PGQueuer inside,
and nothing here imports tierq.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.peers.remote import PeerSystem
from bench.phases import Sync, Target
from bench.systems import (
    PEER_DEQUEUE_BATCH,
    PEER_ENQUEUE_BATCH,
    PGQUEUER_MANAGERS_PER_PROCESS,
    batches,
    produced,
    run_quietly,
)

DEQUEUE_TIMEOUT = timedelta(seconds=5)


def install(database_url: str) -> None:
    """PGQueuer's tables (``pgq install``) and its autovacuum settings (``pgq autovac``)."""
    pgq = Path(sys.executable).with_name("pgq")
    for command in (["install"], ["autovac"]):
        subprocess.run([str(pgq), "--pg-dsn", database_url, *command], check=True,
                       capture_output=True, timeout=120)


def pgqueuer_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    return run_quietly(_produce, spec, sync)


async def _produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn=spec["database_url"])
    queries = Queries(AsyncpgDriver(conn))
    latencies: list[float] = []
    sync.ready_and_wait(spec["index"])
    for batch in batches(spec, sync, PEER_ENQUEUE_BATCH):
        n = len(batch)
        began = time.perf_counter()
        await queries.enqueue(["noop"] * n, [b'{"i": %d}' % i for i in batch], [0] * n)
        latencies.append(time.perf_counter() - began)
        sync.add_enqueued(n)
    t_end = time.time()
    await conn.close()
    return produced(spec, t_end, latencies)


def pgqueuer_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    return run_quietly(_consume, spec, sync)


async def _consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    done = 0
    managers: list[QueueManager] = []
    for _ in range(PGQUEUER_MANAGERS_PER_PROCESS):
        conn = await asyncpg.connect(dsn=spec["database_url"])
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint("noop")
        async def noop(job: Job) -> None:
            nonlocal done
            done += 1
            sync.add_finished(1)

        managers.append(qm)

    async def stop_when_finished() -> None:
        while not sync.all_finished():
            await asyncio.sleep(0.01)
        for qm in managers:
            qm.shutdown.set()

    sync.ready_and_wait(spec["index"])
    watcher = asyncio.create_task(stop_when_finished())
    await asyncio.gather(*(qm.run(batch_size=spec.get("claim_batch", PEER_DEQUEUE_BATCH),
                                  dequeue_timeout=DEQUEUE_TIMEOUT) for qm in managers))
    t_end = time.time()  # completions are flushed when run() returns
    watcher.cancel()
    for qm in managers:
        with contextlib.suppress(Exception):
            await qm.queries.driver.connection.close()
    return {"t_end": t_end, "acked": done}


class PgQueuer(PeerSystem):
    name = "pgqueuer"
    preload = ("bench.systems.pgqueuer", "asyncpg", "pgqueuer.qm", "pgqueuer.queries",
               "pgqueuer.db")
    setup = staticmethod(install)
    unfinished = "SELECT count(*) FROM pgqueuer"

    def producer(self) -> Target:
        return pgqueuer_produce

    def consumer(self) -> Target:
        return pgqueuer_consume
