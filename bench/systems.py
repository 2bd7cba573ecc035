"""The queues under test, each behind the same small interface: prepare a fresh store,
producer and consumer process targets, count what is left, clean up.

* ``tierq-engine``: the ``Tierq`` engine in each process (enqueue in batches of 500, claim
  up to 400, ack the claimed tasks), with the scheduled maintenance jobs running beside it.
* ``tierq-http``: the same through the HTTP API of the local stack (``tierq dev``).
* ``pgqueuer``: PGQueuer 1.6 on asyncpg, installed with ``pgq install`` + ``pgq autovac``;
  producers enqueue lists of 1000; each worker process runs 4 queue managers (one asyncpg
  connection each, as its docs advise) with ``batch_size=100``.
* ``procrastinate``: procrastinate 3.10 on psycopg; producers ``batch_defer_async`` 1000 jobs
  per call; each worker process runs one worker with ``concurrency=10``,
  ``delete_jobs="successful"`` and LISTEN/NOTIFY.

Every task is a no-op carrying a tiny JSON payload (``{"i": n}``). Each system gets its own
fresh database on the same PostgreSQL server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.common import Role, Stores, Sync, Target, split

QUEUE = "bench"
# The largest request tierq takes (the peers enqueue 1000 per call). Since the warm tier's
# data hash stopped being a listpack, 500 is faster end-to-end than 250 or 100
# (bench/README.md, Method).
TIERQ_ENQUEUE_BATCH = 500

PEER_ENQUEUE_BATCH = 1000
PEER_DEQUEUE_BATCH = 100
PGQUEUER_MANAGERS_PER_PROCESS = 4
# Tasks one tierq worker process holds at a time: as many as a PGQueuer worker process holds
# (its 4 queue managers x batch_size 100). PGQueuer itself is no faster with batch_size 300
# (measured side by side, bench/README.md), so it keeps 100.
TIERQ_CLAIM_BATCH = PGQUEUER_MANAGERS_PER_PROCESS * 100
PROCRASTINATE_CONCURRENCY = 10
EMPTY_CLAIM_SLEEP = 0.002


@dataclass
class Prepared:
    """One system made ready for one phase."""

    system: str
    spec: dict[str, Any]
    database_url: str


class System:
    name = ""
    uses_valkey = False

    def prepare(self, stores: Stores) -> Prepared:
        raise NotImplementedError

    def producer(self) -> Target:
        raise NotImplementedError

    def consumer(self) -> Target:
        raise NotImplementedError

    def remaining(self, prepared: Prepared) -> int:
        """Tasks not finished (still queued or running) in the store."""
        raise NotImplementedError

    @contextlib.contextmanager
    def running(self, prepared: Prepared) -> Iterator[None]:
        """Whatever runs beside the workers during a phase (maintenance jobs, a server)."""
        yield

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

    def cleanup(self, stores: Stores, prepared: Prepared) -> None:
        stores.drop_database(prepared.database_url)


def quiet_logs() -> None:
    logging.basicConfig(level=logging.WARNING)
    for name in ("pgqueuer", "procrastinate", "psycopg", "asyncio", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)


# --------------------------------------------------------------------------- tierq engine


def tierq_engine(spec: dict[str, Any]) -> Any:
    from tierq import Tierq
    from tierq.config import Settings

    settings = Settings(database_url=spec["database_url"], valkey_url=spec["valkey_url"],
                        db_pool_max=4, **spec.get("settings", {}))
    return Tierq(settings=settings)


def tierq_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:

    quiet_logs()
    tq = tierq_engine(spec)
    tq.queue_settings(spec["queue"])  # connect and warm the settings cache before the start
    lo, hi = spec["range"]
    batch = spec.get("batch", TIERQ_ENQUEUE_BATCH)
    latencies: list[float] = []
    sync.ready_and_wait(spec["index"])
    for start in range(lo, hi, batch):
        if sync.stop.is_set():
            break
        # plain mappings: validated by the engine as one list
        items = [{"payload": {"i": i}} for i in range(start, min(start + batch, hi))]
        began = time.perf_counter()
        tq.enqueue(spec["queue"], items)
        latencies.append(time.perf_counter() - began)
        sync.add_enqueued(len(items))
    t_end = time.time()
    tq.close()
    return {"t_end": t_end, "enqueued": hi - lo, "enqueue_latency": latencies}


def tierq_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    from tierq import ClaimRequest

    quiet_logs()
    tq = tierq_engine(spec)
    queue = spec["queue"]
    tq.queue_settings(queue)
    tq.warm.ping()
    request = ClaimRequest(max=spec.get("claim_batch", TIERQ_CLAIM_BATCH),
                           lease_seconds=spec.get("lease_seconds", 300))
    claim_latency: list[float] = []
    ack_latency: list[float] = []
    acked = rejected = empty = 0
    sync.ready_and_wait(spec["index"])
    t_end = time.time()
    while not sync.all_finished():
        began = time.perf_counter()
        got = tq.claim(queue, request)
        took = time.perf_counter() - began
        if not got:
            empty += 1
            time.sleep(EMPTY_CLAIM_SLEEP)
            continue
        claim_latency.append(took)
        began = time.perf_counter()
        result = tq.ack(queue, got)  # the claimed tasks themselves, acked without a result
        ack_latency.append(time.perf_counter() - began)
        acked += len(result.acked)
        rejected += len(result.rejected)
        t_end = time.time()
        sync.add_finished(len(result.acked))
    tq.close()
    return {"t_end": t_end, "acked": acked, "rejected": rejected, "empty_claims": empty,
            "claim_latency": claim_latency, "ack_latency": ack_latency}


def tierq_recycle(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    """A worker that keeps the backlog constant: claim a batch, ack it, enqueue as many new
    tasks (they join the back of the line). Counts acks."""
    from tierq import ClaimRequest

    quiet_logs()
    tq = tierq_engine(spec)
    queue = spec["queue"]
    tq.queue_settings(queue)
    request = ClaimRequest(max=spec.get("claim_batch", TIERQ_CLAIM_BATCH), lease_seconds=300)
    claim_latency: list[float] = []
    acked = empty = 0
    next_payload = spec["index"] * 1_000_000_000
    sync.ready_and_wait(spec["index"])
    t_end = time.time()
    while not sync.all_finished():
        began = time.perf_counter()
        got = tq.claim(queue, request)
        took = time.perf_counter() - began
        if not got:
            empty += 1
            time.sleep(EMPTY_CLAIM_SLEEP)
            continue
        claim_latency.append(took)
        result = tq.ack(queue, got)
        tq.enqueue(queue, [{"payload": {"i": next_payload + i}}
                           for i in range(len(result.acked))])
        next_payload += len(result.acked)
        acked += len(result.acked)
        t_end = time.time()
        sync.add_finished(len(result.acked))
        sync.add_enqueued(len(result.acked))
    tq.close()
    return {"t_end": t_end, "acked": acked, "empty_claims": empty,
            "claim_latency": claim_latency}


class Maintenance:
    """The scheduled jobs of a deployment, in a thread: delayed mover every second,
    cold -> warm and the reaper every 5 s (the defaults of TIERQ_*_EVERY)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tierq-maintenance",
                                        daemon=True)
        self.errors: list[str] = []

    def _run(self) -> None:
        tq = tierq_engine(self.spec)
        s = tq.settings
        jobs = [(s.delayed_every, tq.run_delayed_mover), (s.cold_to_warm_every,
                tq.run_cold_to_warm), (s.reaper_every, tq.run_reaper)]
        next_at = [time.monotonic() + every for every, _ in jobs]
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                for i, (every, job) in enumerate(jobs):
                    if now >= next_at[i]:
                        try:
                            job()
                        except Exception as exc:  # reported, the bench goes on
                            self.errors.append(f"{job.__name__}: {exc}")
                        next_at[i] = now + every
                self._stop.wait(max(0.01, min(next_at) - time.monotonic()))
        finally:
            tq.close()

    def __enter__(self) -> Maintenance:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def tierq_remaining(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM tierq_tasks "
                           "WHERE state IN ('delayed', 'cold', 'warm')").fetchone()
    return int(row[0]) if row else 0


class TierqEngine(System):
    name = "tierq-engine"
    uses_valkey = True

    def __init__(self, settings: dict[str, Any] | None = None, maintenance: bool = True) -> None:
        self.settings = settings or {}
        self.maintenance = maintenance

    def prepare(self, stores: Stores) -> Prepared:
        from tierq.dal.migrate import migrate

        url = stores.fresh_database("bench_tierq")
        migrate(url)
        stores.clear_valkey()
        spec = {"database_url": url, "valkey_url": stores.valkey_url, "queue": QUEUE,
                "settings": self.settings}
        return Prepared(self.name, spec, url)

    def producer(self) -> Target:
        return tierq_produce

    def consumer(self) -> Target:
        return tierq_consume

    @contextlib.contextmanager
    def running(self, prepared: Prepared) -> Iterator[None]:
        if not self.maintenance:
            yield
            return
        with Maintenance(prepared.spec) as jobs:
            yield
        if jobs.errors:
            print(f"  maintenance errors: {jobs.errors[:3]}", flush=True)

    def remaining(self, prepared: Prepared) -> int:
        return tierq_remaining(prepared.database_url)


# --------------------------------------------------------------------------- tierq over HTTP


def http_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    import httpx

    quiet_logs()
    base = spec["base_url"]
    lo, hi = spec["range"]
    batch = spec.get("batch", TIERQ_ENQUEUE_BATCH)
    path = f"/v1/queues/{spec['queue']}/tasks"
    latencies: list[float] = []
    with httpx.Client(base_url=base, timeout=60) as client:
        client.get(f"/v1/queues/{spec['queue']}")  # open the keep-alive connection
        sync.ready_and_wait(spec["index"])
        for start in range(lo, hi, batch):
            if sync.stop.is_set():
                break
            body = {"tasks": [{"payload": {"i": i}} for i in range(start, min(start + batch,
                                                                                hi))]}
            began = time.perf_counter()
            response = client.post(path, json=body)
            latencies.append(time.perf_counter() - began)
            if response.status_code >= 300:
                raise RuntimeError(f"enqueue answered {response.status_code}: "
                                   f"{response.text[:300]}")
            sync.add_enqueued(len(body["tasks"]))
    return {"t_end": time.time(), "enqueued": hi - lo, "enqueue_latency": latencies}


def http_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    import httpx

    quiet_logs()
    queue = spec["queue"]
    claim_body = {"max": spec.get("claim_batch", TIERQ_CLAIM_BATCH), "lease_seconds": 300}
    claim_latency: list[float] = []
    ack_latency: list[float] = []
    acked = rejected = empty = 0
    with httpx.Client(base_url=spec["base_url"], timeout=60) as client:
        client.get(f"/v1/queues/{queue}")
        sync.ready_and_wait(spec["index"])
        t_end = time.time()
        while not sync.all_finished():
            began = time.perf_counter()
            response = client.post(f"/v1/queues/{queue}/claims", json=claim_body)
            took = time.perf_counter() - began
            if response.status_code >= 300:
                raise RuntimeError(f"claim answered {response.status_code}: "
                                   f"{response.text[:300]}")
            tasks = response.json()["tasks"]
            if not tasks:
                empty += 1
                time.sleep(EMPTY_CLAIM_SLEEP)
                continue
            claim_latency.append(took)
            began = time.perf_counter()
            response = client.post(f"/v1/queues/{queue}/acks", json={"acks": [
                {"id": t["id"], "lease_token": t["lease_token"]} for t in tasks]})
            ack_latency.append(time.perf_counter() - began)
            if response.status_code >= 300:
                raise RuntimeError(f"ack answered {response.status_code}: "
                                   f"{response.text[:300]}")
            body = response.json()
            acked += len(body["acked"])
            rejected += len(body["rejected"])
            t_end = time.time()
            sync.add_finished(len(body["acked"]))
    return {"t_end": t_end, "acked": acked, "rejected": rejected, "empty_claims": empty,
            "claim_latency": claim_latency, "ack_latency": ack_latency}


def tierq_cli() -> str | None:
    """The ``tierq`` command of this environment, if it has the ``dev`` subcommand."""
    candidate = Path(sys.executable).with_name("tierq")
    exe = str(candidate) if candidate.exists() else shutil.which("tierq")
    if exe is None:
        return None
    probe = subprocess.run([exe, "dev", "--help"], capture_output=True, text=True,
                           check=False, timeout=60)
    return exe if probe.returncode == 0 else None


class TierqHttp(System):
    """tierq through its HTTP API: ``tierq dev --no-services`` serving the Lambda handlers
    locally over the same PostgreSQL and Valkey."""

    name = "tierq-http"
    uses_valkey = True

    def __init__(self, exe: str, server_args: list[str] | None = None) -> None:
        self.exe = exe
        self.server_args = server_args or []
        self.engine = TierqEngine(maintenance=False)  # the local stack runs the schedules

    def prepare(self, stores: Stores) -> Prepared:
        prepared = self.engine.prepare(stores)
        return Prepared(self.name, dict(prepared.spec), prepared.database_url)

    def producer(self) -> Target:
        return http_produce

    def consumer(self) -> Target:
        return http_consume

    @contextlib.contextmanager
    def running(self, prepared: Prepared) -> Iterator[None]:
        import httpx

        from tierq.local.services.manager import free_port

        port = free_port()
        env = {**os.environ, "DATABASE_URL": prepared.spec["database_url"],
               "VALKEY_URL": prepared.spec["valkey_url"]}
        log = Path(f"/tmp/tierq-bench-{os.getuid()}/tierq-dev-{port}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            proc = subprocess.Popen([self.exe, "dev", "--no-services", "--port", str(port),
                                     "--quiet", *self.server_args], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"tierq dev exited ({proc.returncode}); see {log}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base}/v1/queues", timeout=2).status_code < 500:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tierq dev did not answer within 60 s; see {log}")
                time.sleep(0.2)
            prepared.spec["base_url"] = base
            prepared.spec["server_pid"] = proc.pid  # its CPU counts as the client's
            yield
        finally:
            prepared.spec.pop("server_pid", None)
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def remaining(self, prepared: Prepared) -> int:
        return tierq_remaining(prepared.database_url)


# --------------------------------------------------------------------------- PGQueuer


def pgqueuer_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    quiet_logs()
    return asyncio.run(_pgqueuer_produce(spec, sync))


async def _pgqueuer_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn=spec["database_url"])
    queries = Queries(AsyncpgDriver(conn))
    lo, hi = spec["range"]
    latencies: list[float] = []
    sync.ready_and_wait(spec["index"])
    for start in range(lo, hi, PEER_ENQUEUE_BATCH):
        if sync.stop.is_set():
            break
        stop = min(start + PEER_ENQUEUE_BATCH, hi)
        n = stop - start
        began = time.perf_counter()
        await queries.enqueue(["noop"] * n, [b'{"i": %d}' % i for i in range(start, stop)],
                              [0] * n)
        latencies.append(time.perf_counter() - began)
        sync.add_enqueued(n)
    t_end = time.time()
    await conn.close()
    return {"t_end": t_end, "enqueued": hi - lo, "enqueue_latency": latencies}


def pgqueuer_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    quiet_logs()
    return asyncio.run(_pgqueuer_consume(spec, sync))


async def _pgqueuer_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
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
                                  dequeue_timeout=_seconds(5)) for qm in managers))
    t_end = time.time()  # completions are flushed when run() returns
    watcher.cancel()
    for qm in managers:
        with contextlib.suppress(Exception):
            await qm.queries.driver.connection.close()  # type: ignore[attr-defined]
    return {"t_end": t_end, "acked": done}


def _seconds(value: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=value)


class PgQueuer(System):
    name = "pgqueuer"

    def prepare(self, stores: Stores) -> Prepared:
        url = stores.fresh_database("bench_pgqueuer")
        pgq = Path(sys.executable).with_name("pgq")
        for command in (["install"], ["autovac"]):
            subprocess.run([str(pgq), "--pg-dsn", url, *command], check=True,
                           capture_output=True, timeout=120)
        return Prepared(self.name, {"database_url": url}, url)

    def producer(self) -> Target:
        return pgqueuer_produce

    def consumer(self) -> Target:
        return pgqueuer_consume

    def remaining(self, prepared: Prepared) -> int:
        with psycopg.connect(prepared.database_url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pgqueuer").fetchone()
        return int(row[0]) if row else 0


# --------------------------------------------------------------------------- procrastinate


def procrastinate_app(url: str, pool_max: int) -> tuple[Any, Any, list[int]]:
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=url, min_size=1, max_size=pool_max))
    done = [0]

    @app.task(name="noop", queue=QUEUE)
    async def noop(i: int) -> None:
        done[0] += 1

    return app, noop, done


def procrastinate_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    quiet_logs()
    return asyncio.run(_procrastinate_produce(spec, sync))


async def _procrastinate_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    app, noop, _ = procrastinate_app(spec["database_url"], 2)
    lo, hi = spec["range"]
    latencies: list[float] = []
    async with app.open_async():
        await app.check_connection_async()
        sync.ready_and_wait(spec["index"])
        for start in range(lo, hi, PEER_ENQUEUE_BATCH):
            if sync.stop.is_set():
                break
            stop = min(start + PEER_ENQUEUE_BATCH, hi)
            began = time.perf_counter()
            await noop.batch_defer_async(*({"i": i} for i in range(start, stop)))
            latencies.append(time.perf_counter() - began)
            sync.add_enqueued(stop - start)
        t_end = time.time()
    return {"t_end": t_end, "enqueued": hi - lo, "enqueue_latency": latencies}


def procrastinate_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    quiet_logs()
    return asyncio.run(_procrastinate_consume(spec, sync))


async def _procrastinate_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
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


class Procrastinate(System):
    name = "procrastinate"

    def prepare(self, stores: Stores) -> Prepared:
        url = stores.fresh_database("bench_procrastinate")
        app, _, _ = procrastinate_app(url, 2)

        async def apply() -> None:
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        asyncio.run(apply())
        return Prepared(self.name, {"database_url": url}, url)

    def producer(self) -> Target:
        return procrastinate_produce

    def consumer(self) -> Target:
        return procrastinate_consume

    def remaining(self, prepared: Prepared) -> int:
        with psycopg.connect(prepared.database_url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM procrastinate_jobs "
                               "WHERE status IN ('todo', 'doing')").fetchone()
        return int(row[0]) if row else 0
