"""A small fault-injection harness: producer and worker processes over real, private
servers, each writing what it saw to its own journal (JSON lines, flushed as it goes), and
the accounting afterwards against the system of record.

Journals (one file per process; a SIGKILLed process may leave a torn last line):

* producer: ``{"e": "enq", "n": n, "id": id}`` for each task whose enqueue returned success
  (tasks carry the key ``n<n>``, so a retried batch never duplicates them; on the batch-rows
  layout they carry none, since keyed tasks are rows there, and a batch retried after an
  enqueue that committed but failed to answer adds tasks of the same ``n``, each of them
  still to be acked);
* worker: ``{"e": "claim", "id", "n", "t0", "t1", "exp", "w"}`` per delivered task, written
  right after the claim returned (``t1``; ``t0``: when it was sent) and before any work;
  ``{"e": "acking", "n"}`` before it sends an ack (so a worker killed without one at its
  tail had not begun to ack); ``{"e": "ack", "id", "t"}`` per accepted ack;
  ``{"e": "rej", "id", "r"}`` per rejected one.

Accounting (``Report``): a task is *acked* when PostgreSQL no longer holds it, as a row or as
a member in its batch row (``tests/support/every_task.py``; only an ack removes one here);
a number ``n`` whose enqueue succeeded is *lost* when an id an enqueue answered for it
was not acked (a second task of ``n``, acked, does not make up for it); *duplicates* are
deliveries
beyond the first of a task id. A *double dispatch*
is a delivery that completed while an earlier delivery of the same task still held a valid
lease: before its expiry, or — for a lease taken before Valkey was wiped, which voids every
lease (the holder's ack is then rejected and the task is delivered again: at-least-once) —
before the wipe was over. A delivery after an accepted ack is one too.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import random
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.support.every_task import EVERY_TASK
from tests.support.polling import eventually
from tests.support.processes import Children
from tierq.config import Settings
from tierq.core.batch_ids import batch_member
from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.local.services import LocalServices, ensure_services

QUEUE = "rel"
RETRY_SLEEP = 0.1


@dataclass
class Stack:
    """Private PostgreSQL and Valkey for one test module (so killing them disturbs nobody)."""

    services: LocalServices
    database_url: str
    folder: Path
    batch_rows: bool = False  # the engines' TIERQ_BATCH_ROWS (the ``clean`` fixture's)

    @property
    def valkey_url(self) -> str:
        return self.services.valkey.url

    def settings(self, **overrides: Any) -> dict[str, Any]:
        return {"database_url": self.database_url, "valkey_url": self.valkey_url,
                "db_pool_max": 3, "batch_rows": self.batch_rows, **overrides}


@contextlib.contextmanager
def private_stack(base: Path) -> Iterator[Stack]:
    from tierq.dal.migrate import migrate

    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)  # the postgres system user must be able to enter it when we are root
    with ensure_services(base / "services", want_private=True) as services:
        url = services.postgres.url
        migrate(url)
        yield Stack(services, url, base)


def reset(stack: Stack) -> None:
    """Empty both stores between tests of a module."""
    import redis

    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
            "AND tablename LIKE 'tierq%%' AND tablename <> 'tierq_schema_migrations'").fetchall()]
        if tables:
            conn.execute("TRUNCATE " + ", ".join(tables))
    client = redis.Redis.from_url(stack.valkey_url)
    try:
        client.flushall()
    finally:
        client.close()


@contextlib.contextmanager
def local_api(stack: Stack, env: dict[str, str] | None = None) -> Iterator[str]:
    """``tierq dev --no-services`` over the stack's servers (the HTTP API and the scheduled
    functions); yields its base URL."""
    import subprocess
    import sys

    import httpx

    from tierq.local.services.process import free_port

    port = free_port()
    log = stack.folder / f"tierq-dev-{port}.log"
    full_env = {**os.environ, "DATABASE_URL": stack.database_url,
                "VALKEY_URL": stack.valkey_url,
                "TIERQ_BATCH_ROWS": "true" if stack.batch_rows else "false", **(env or {})}
    exe = Path(sys.executable).with_name("tierq")
    with log.open("wb") as out:
        proc = subprocess.Popen([str(exe), "dev", "--no-services", "--port", str(port),
                                 "--quiet", "--schedule-period", "0.5"], env=full_env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"tierq dev exited: {log.read_text()[-2000:]}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/v1/queues", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"tierq dev not answering: {log}"
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# --------------------------------------------------------------------------- processes


class Journal:
    def __init__(self, path: str) -> None:
        self.file = open(path, "a", buffering=1)  # noqa: SIM115 (lives as long as the process)

    def write(self, events: list[dict[str, Any]]) -> None:
        if events:
            self.file.write("".join(json.dumps(e) + "\n" for e in events))
            self.file.flush()


def engine(cfg: dict[str, Any]) -> Tierq:
    # the pool's reconnect attempts during an outage are expected; keep the output readable
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    return Tierq(settings=Settings(**cfg["settings"]))


@dataclass
class Delivery:
    id: str
    n: int
    lease_token: str
    expires: float


class EngineQueue:
    """The queue through the ``Tierq`` engine."""

    def __init__(self, cfg: dict[str, Any], journal: Journal) -> None:
        self.tq = engine(cfg)

    def enqueue(self, items: list[dict[str, Any]]) -> list[str]:
        return [str(o.id) for o in self.tq.enqueue(QUEUE, items)]

    def claim(self, n: int, lease_seconds: int, worker: str) -> list[Delivery]:
        return [Delivery(str(t.id), t.payload["n"], t.lease_token,
                         t.lease_expires_at.timestamp())
                for t in self.tq.claim(QUEUE, max=n, lease_seconds=lease_seconds,
                                       worker=worker)]

    def ack(self, held: list[Delivery]) -> tuple[list[str], list[tuple[str, str]]]:
        result = self.tq.ack(QUEUE, [{"id": d.id, "lease_token": d.lease_token}
                                     for d in held])
        return [str(i) for i in result.acked], [(str(r.id), r.reason) for r in result.rejected]

    def close(self) -> None:
        self.tq.close()


class HttpQueue:
    """The queue through the HTTP API; a 503 (journaled with its Retry-After) or a refused
    connection raises Unavailable, anything else unexpected fails the process."""

    def __init__(self, cfg: dict[str, Any], journal: Journal) -> None:
        import httpx

        self.httpx = httpx
        self.journal = journal
        self.client = httpx.Client(base_url=cfg["base_url"], timeout=60)
        self.failing = False  # the last request met an outage

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self.client.post(f"/v1/queues/{QUEUE}/{path}", json=body)
        except self.httpx.TransportError as exc:
            self.failing = True
            raise Unavailable(f"API not reachable: {exc}") from exc
        if response.status_code == 503:
            self.failing = True
            self.journal.write([{"e": "503", "t": time.time(),
                                 "ra": response.headers.get("Retry-After")}])
            raise Unavailable("503 from the API")
        if response.status_code >= 300:
            raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")
        if self.failing:
            self.failing = False
            self.journal.write([{"e": "recovered", "t": time.time()}])
        return dict(response.json())

    def enqueue(self, items: list[dict[str, Any]]) -> list[str]:
        return [t["id"] for t in self._post("tasks", {"tasks": items})["tasks"]]

    def claim(self, n: int, lease_seconds: int, worker: str) -> list[Delivery]:
        from datetime import datetime

        body = self._post("claims", {"max": n, "lease_seconds": lease_seconds,
                                     "worker": worker})
        return [Delivery(t["id"], t["payload"]["n"], t["lease_token"],
                         datetime.fromisoformat(t["lease_expires_at"]).timestamp())
                for t in body["tasks"]]

    def ack(self, held: list[Delivery]) -> tuple[list[str], list[tuple[str, str]]]:
        body = self._post("acks", {"acks": [{"id": d.id, "lease_token": d.lease_token}
                                            for d in held]})
        return list(body["acked"]), [(r["id"], r["reason"]) for r in body["rejected"]]

    def close(self) -> None:
        self.client.close()


def open_queue(cfg: dict[str, Any], journal: Journal) -> EngineQueue | HttpQueue:
    return HttpQueue(cfg, journal) if cfg.get("base_url") else EngineQueue(cfg, journal)


def producer_main(cfg: dict[str, Any], journal_path: str, stop: Any) -> None:
    """Enqueue tasks n = lo..hi-1 in batches at about ``rate`` tasks/s, retrying a batch
    until it succeeds (its keys make a retry harmless; on the batch-rows layout, keyless:
    the module's docstring)."""
    journal = Journal(journal_path)
    queue = open_queue(cfg, journal)
    lo, hi = cfg["range"]
    batch = cfg.get("batch", 100)
    pause = batch / cfg["rate"] if cfg.get("rate") else 0.0
    keyed = not cfg["settings"].get("batch_rows")
    for start in range(lo, hi, batch):
        items = [{"payload": {"n": n}, **({"key": f"n{n}"} if keyed else {})}
                 for n in range(start, min(start + batch, hi))]
        while True:
            if stop.is_set():
                return
            try:
                ids = queue.enqueue(items)
                break
            except Unavailable:
                time.sleep(RETRY_SLEEP)
        journal.write([{"e": "enq", "n": it["payload"]["n"], "id": i}
                       for it, i in zip(items, ids, strict=True)])
        if pause:
            time.sleep(pause)
    queue.close()


def worker_main(cfg: dict[str, Any], journal_path: str, stop: Any) -> None:
    """Claim, journal, work, ack — leaving ``stall`` of the tasks unacked so their leases
    expire; an ack that meets an outage is retried until the lease would have expired."""
    journal = Journal(journal_path)
    queue = open_queue(cfg, journal)
    name = cfg["name"]
    batch = cfg.get("batch", 20)
    lease = cfg.get("lease_seconds", 2)
    work = cfg.get("work_seconds", 0.0)
    stall = cfg.get("stall", 0.0)
    rng = random.Random(os.getpid())
    while not stop.is_set():
        t0 = time.time()
        try:
            got = queue.claim(batch, lease, name)
        except Unavailable:
            time.sleep(RETRY_SLEEP)
            continue
        t1 = time.time()
        if not got:
            time.sleep(0.01)
            continue
        journal.write([{"e": "claim", "id": d.id, "n": d.n, "t0": t0, "t1": t1,
                        "exp": d.expires, "w": name} for d in got])
        if work:
            time.sleep(work)
        to_ack = [d for d in got if rng.random() >= stall]
        expires = min(d.expires for d in got)
        if to_ack:
            # before the ack can reach the queue: a worker killed after this line may or may
            # not have acked, so kill_worker_mid_lease never counts its tasks as held
            journal.write([{"e": "acking", "n": len(to_ack)}])
        while to_ack and time.time() < expires:
            try:
                acked, rejected = queue.ack(to_ack)
            except Unavailable:
                time.sleep(RETRY_SLEEP)
                continue
            now = time.time()
            journal.write([{"e": "ack", "id": i, "t": now} for i in acked]
                          + [{"e": "rej", "id": i, "r": reason} for i, reason in rejected])
            break
    queue.close()


class Maintenance:
    """The scheduled jobs (reaper with its reconciler, cold -> warm, delayed mover) in a
    thread, every ``every`` seconds; outages are counted and ridden out."""

    def __init__(self, settings: dict[str, Any], every: float = 0.25) -> None:
        self.cfg = {"settings": settings}
        self.every = every
        self.failures = 0
        self.restored = 0
        self.expired = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="maintenance")

    def _run(self) -> None:
        tq = engine(self.cfg)
        try:
            while not self._stop.is_set():
                try:
                    summary = tq.run_reaper()
                    self.restored += summary.restored
                    self.expired += summary.expired
                    tq.run_cold_to_warm()
                    tq.run_delayed_mover()
                except Exception:  # an outage: try again at the next tick
                    self.failures += 1
                self._stop.wait(self.every)
        finally:
            tq.close()

    def __enter__(self) -> Maintenance:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


class Fleet:
    """Producer and worker processes (spawned), each with its own journal. A child that
    raises is reported with its traceback (``check``, ``wait_producers``, ``close``)."""

    def __init__(self, folder: Path, settings: dict[str, Any]) -> None:
        self.folder = folder
        self.settings = settings
        self.children = Children()
        self.stop = self.children.ctx.Event()
        self.producers: list[Any] = []
        self.workers: list[Any] = []
        self.journals: dict[int, Path] = {}
        self._count = 0

    def _start(self, target: Any, cfg: dict[str, Any], role: str) -> Any:
        self._count += 1
        path = self.folder / f"{role}-{self._count}.jsonl"
        proc = self.children.start(target, {**cfg, "settings": self.settings}, str(path),
                                   self.stop, daemon=True)
        self.journals[id(proc)] = path
        return proc

    def start_producers(self, tasks: int, processes: int = 1, *, rate: float | None = None,
                        batch: int = 100, base_url: str | None = None) -> None:
        per = -(-tasks // processes)
        for i in range(processes):
            lo, hi = i * per, min(tasks, (i + 1) * per)
            self.producers.append(self._start(producer_main, {
                "range": (lo, hi), "batch": batch, "base_url": base_url,
                "rate": None if rate is None else rate / processes}, "producer"))

    def start_workers(self, count: int, **cfg: Any) -> None:
        for _ in range(count):
            self.workers.append(self._start(worker_main, {"name": f"w{self._count + 1}",
                                                          **cfg}, "worker"))

    def freeze_worker_mid_lease(self, index: int, timeout: float = 30.0) -> list[str]:
        """Freeze (SIGSTOP) a worker at a moment it holds leases it has not begun to ack;
        returns the ids it held. It stays frozen until ``thaw_worker`` or a kill. The
        journal is read once the worker is stopped, so what it says is where the worker
        stopped: claims at its tail, with no ``acking`` after them, were never acked.
        Otherwise it is let go on and tried again."""
        proc = self.workers[index]
        path = self.journals[id(proc)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _unacked_tail(path):
                os.kill(proc.pid, signal.SIGSTOP)
                try:
                    _wait_stopped(proc.pid)
                    held = _unacked_tail(path)
                except BaseException:
                    os.kill(proc.pid, signal.SIGCONT)
                    raise
                if held:
                    return held
                os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.002)
        raise AssertionError(f"worker {index} never held a lease within {timeout}s")

    def thaw_worker(self, index: int) -> None:
        """Let a worker frozen by ``freeze_worker_mid_lease`` go on."""
        os.kill(self.workers[index].pid, signal.SIGCONT)

    def kill_worker_mid_lease(self, index: int, timeout: float = 30.0) -> list[str]:
        """SIGKILL a worker at a moment it holds leases it has not begun to ack
        (``freeze_worker_mid_lease``); returns the ids it held."""
        held = self.freeze_worker_mid_lease(index, timeout)
        proc = self.workers[index]
        proc.kill()
        proc.join(timeout=10)
        return held

    def wait_producers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for p in self.producers:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            self.children.check()
            assert p.exitcode == 0, f"producer exited with {p.exitcode}"

    def check(self) -> None:
        """ChildFailed when a producer or worker raised (a killed worker is no failure)."""
        self.children.check()

    def close(self) -> None:
        self.stop.set()
        for p in self.producers + self.workers:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        try:
            self.children.check()
        finally:
            self.children.close()


def _wait_stopped(pid: int, timeout: float = 5.0) -> None:
    """Wait until a process that was sent SIGSTOP is stopped (state T in /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rpartition(")")[2].split()[0] in ("T", "t"):
                return
        time.sleep(0.001)
    raise AssertionError(f"process {pid} did not stop within {timeout}s of SIGSTOP")


def _unacked_tail(path: Path) -> list[str]:
    """The ids of the last claim in a journal when nothing followed it (no ``acking``, ack
    or rejection)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    held: list[str] = []
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return []
        if event["e"] != "claim":
            break
        held.append(event["id"])
    return held


def live_count(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(f"SELECT count(*) FROM {EVERY_TASK} WHERE queue = %s AND state IN "
                           "('delayed', 'cold', 'warm')", (QUEUE,)).fetchone()
    return int(row[0]) if row else 0


def wait_for_acks(folder: Path, count: int, timeout: float = 60) -> None:
    """Until the workers have acked ``count`` tasks: the fault then hits a running system."""
    eventually(lambda: sum(p.read_text().count('"e": "ack"')
                           for p in folder.glob("worker-*.jsonl")) >= count,
               timeout=timeout, what=f"{count} acks", interval=0.05)


def wait_until_finished(database_url: str, expected: int, timeout: float,
                        check: Callable[[], None] | None = None) -> float:
    """Wait until every task is finished (no live row) once ``expected`` were enqueued;
    returns the seconds waited. ``check`` (e.g. ``Fleet.check``) is called in between, so
    a failed child ends the wait at once."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check is not None:
            check()
        with contextlib.suppress(psycopg.Error):
            if live_count(database_url) == 0:
                return time.monotonic() - started
        time.sleep(0.25)
    return time.monotonic() - started


# --------------------------------------------------------------------------- accounting


@dataclass
class Report:
    enqueued: int = 0
    acked: int = 0
    lost: list[int] = field(default_factory=list)
    stuck: int = 0
    dead: int = 0
    deliveries: int = 0
    duplicates: int = 0
    rejected_acks: int = 0
    double_dispatch: list[str] = field(default_factory=list)
    members: int = 0  # tasks enqueued as batch members (TIERQ_BATCH_ROWS), by their ids

    def layout_was(self, stack: Stack) -> None:
        """Fails unless the engines wrote the stack's layout: batch members with
        ``batch_rows``, none without (so a run on batch rows is not one on rows)."""
        assert (self.members > 0) == stack.batch_rows, (self.members, stack.batch_rows)

    def line(self, title: str) -> str:
        return (f"{title}: enqueued={self.enqueued} acked={self.acked} lost={len(self.lost)} "
                f"duplicate_deliveries={self.duplicates} deliveries={self.deliveries} "
                f"rejected_acks={self.rejected_acks} stuck={self.stuck} dead={self.dead} "
                f"double_dispatch={len(self.double_dispatch)} members={self.members}")


def read_journals(folder: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a torn line of a killed process
                events.append(json.loads(line))
    return events


def account(folder: Path, database_url: str, *, wipes: list[float] | None = None) -> Report:
    """Reconcile the journals with what PostgreSQL holds now (rows and batch members)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(f"SELECT id::text, state, payload->>'n' FROM {EVERY_TASK} "
                            "WHERE queue = %s", (QUEUE,)).fetchall()
    events = read_journals(folder)
    report = analyze(events, [(r[0], r[1], r[2]) for r in rows], wipes=wipes)
    report.members = sum(batch_member(e["id"]) for e in events if e["e"] == "enq")
    return report


def analyze(events: list[dict[str, Any]], rows: list[tuple[str, str, str | None]], *,
            wipes: list[float] | None = None) -> Report:
    """The accounting itself: journal events against the task rows left in PostgreSQL
    ``(id, state, n)``; ``wipes`` are the moments Valkey's data was gone by."""
    wipes = sorted(wipes or [])
    present = {r[0]: r[1] for r in rows}
    report = Report()
    enqueued_n: set[int] = set()
    ids_of_n: dict[int, set[str]] = defaultdict(set)
    journaled: dict[int, set[str]] = defaultdict(set)  # the ids its enqueues answered
    claims: dict[str, list[dict[str, Any]]] = defaultdict(list)
    acks: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e["e"] == "enq":
            enqueued_n.add(e["n"])
            ids_of_n[e["n"]].add(e["id"])
            journaled[e["n"]].add(e["id"])
        elif e["e"] == "claim":
            claims[e["id"]].append(e)
            ids_of_n[e["n"]].add(e["id"])
        elif e["e"] == "ack":
            acks[e["id"]].append(e["t"])
        elif e["e"] == "rej":
            report.rejected_acks += 1
    for row_id, _state, n in rows:
        if n is not None:
            ids_of_n[int(n)].add(row_id)
    report.enqueued = len(enqueued_n)
    acked_ids = {i for ids in ids_of_n.values() for i in ids if i not in present}
    report.acked = len(acked_ids)
    # (every id an enqueue answered must be acked: on batch rows, without keys, a retried
    # enqueue may add another task of the same n, whose ack must not hide its loss)
    report.lost = sorted(n for n in enqueued_n if not journaled[n] <= acked_ids)
    report.stuck = sum(1 for s in present.values() if s in ("delayed", "cold", "warm"))
    report.dead = sum(1 for s in present.values() if s == "dead")
    for task_id, delivered in claims.items():
        report.deliveries += len(delivered)
        report.duplicates += len(delivered) - 1
        ordered = sorted(delivered, key=lambda d: d["t1"])
        for first, second in itertools.pairwise(ordered):
            lease_end = first["exp"]
            # Valkey lost every lease at a wipe: a lease that may have been taken before it
            # ends there. That is any claim sent before the wipe was over: one that the old
            # server answered just before it died can return (t1) after the wipe's moment.
            for wiped_at in wipes:
                if first.get("t0", first["t1"]) <= wiped_at:
                    lease_end = min(lease_end, wiped_at)
                    break
            if second["t1"] < lease_end:
                report.double_dispatch.append(
                    f"{task_id}: delivered to {second['w']} at {second['t1']:.3f} while "
                    f"{first['w']}'s lease ran until {lease_end:.3f}")
        for acked_at in acks.get(task_id, []):
            if any(d["t1"] > acked_at for d in delivered):
                report.double_dispatch.append(f"{task_id}: delivered again after its ack")
    return report
