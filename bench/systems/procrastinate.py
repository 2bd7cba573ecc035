"""``procrastinate``: procrastinate 3.10 with its psycopg connector, schema applied with its
schema manager; producers ``batch_defer_async`` 1000 jobs per call; each worker process runs
one worker with ``concurrency=10``, ``delete_jobs="successful"``, LISTEN/NOTIFY. It fetches
one job per round trip: that is its design, not a setting.

Runs in the peers' environment (bench/peers/): the functions below import procrastinate
inside, and nothing here imports tierq.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from bench.peers.remote import PeerSystem
from bench.phases import Sync, Target
from bench.systems import (
    PEER_ENQUEUE_BATCH,
    PROCRASTINATE_CONCURRENCY,
    QUEUE,
    batches,
    produced,
    run_quietly,
)


def procrastinate_app(url: str, pool_max: int) -> tuple[Any, Any, list[int]]:
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=url, min_size=1, max_size=pool_max))
    done = [0]

    @app.task(name="noop", queue=QUEUE)
    async def noop(i: int) -> None:
        done[0] += 1

    return app, noop, done


def apply_schema(database_url: str) -> None:
    app, _, _ = procrastinate_app(database_url, 2)

    async def apply() -> None:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(apply())


def procrastinate_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    return run_quietly(_produce, spec, sync)


async def _produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    app, noop, _ = procrastinate_app(spec["database_url"], 2)
    latencies: list[float] = []
    async with app.open_async():
        await app.check_connection_async()
        sync.ready_and_wait(spec["index"])
        for batch in batches(spec, sync, PEER_ENQUEUE_BATCH):
            began = time.perf_counter()
            await noop.batch_defer_async(*({"i": i} for i in batch))
            latencies.append(time.perf_counter() - began)
            sync.add_enqueued(len(batch))
        t_end = time.time()
    return produced(spec, t_end, latencies)


def procrastinate_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    return run_quietly(_consume, spec, sync)


async def _consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    concurrency = PROCRASTINATE_CONCURRENCY
    app, _, done = procrastinate_app(spec["database_url"], concurrency + 2)
    last = [0]

    async with app.open_async():
        await app.check_connection_async()
        sync.ready_and_wait(spec["index"])
        worker = asyncio.create_task(app.run_worker_async(
            queues=[QUEUE], concurrency=concurrency, wait=True, delete_jobs="successful",
            install_signal_handlers=False, listen_notify=True,
            fetch_job_polling_interval=1.0))
        while not sync.all_finished() and not worker.done():
            await asyncio.sleep(0.01)
            if done[0] > last[0]:
                sync.add_finished(done[0] - last[0])
                last[0] = done[0]
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
        t_end = time.time()  # jobs are deleted as each finishes; the worker has stopped
    if done[0] > last[0]:
        sync.add_finished(done[0] - last[0])
    return {"t_end": t_end, "acked": done[0]}


class Procrastinate(PeerSystem):
    name = "procrastinate"
    preload = ("bench.systems.procrastinate", "procrastinate", "psycopg")
    setup = staticmethod(apply_schema)
    unfinished = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"

    def producer(self) -> Target:
        return procrastinate_produce

    def consumer(self) -> Target:
        return procrastinate_consume
