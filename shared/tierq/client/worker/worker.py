"""``Worker``: claim tasks over HTTP, run a handler on a pool of threads, keep the leases
alive while it runs, and report each outcome.

    from tierq.client import Client
    from tierq.client.worker import PermanentError, Worker

    def send_email(task):                 # task: tierq.models.ClaimedTask
        if "to" not in task.payload:
            raise PermanentError("no recipient")   # dead-lettered now
        deliver(task.payload)                       # any other exception: retried
        return {"sent": True}                       # kept as the task's result

    Worker(Client("http://127.0.0.1:3000"), "emails", send_email, concurrency=8).run()

A task that waited for others (``after``, a flow) reaches its handler with ``task.parents``:
each parent's id, queue, final state and result (tierq.logic.flows).

The loop, per worker:

1. **Claim** with a long poll (``wait_seconds``), asking for as many tasks as there are free
   slots (``concurrency`` minus the leases held), each with a lease of ``lease_seconds``.
   Its default is the queue's setting, read at start from the queue's view. A caller pinned
   to a tenant is shown the deployment's defaults until its tenant has tasks in the queue,
   so the view is read once more when the first tasks come; the leases follow it from their
   first heartbeat.
2. **Run** the handler on one of ``concurrency`` threads.
3. **Heartbeat**: a thread extends every held lease once a third of it has passed, in one
   request for all of them, so a long task keeps its lease.
4. **Report**, in batches:

   ===============================  ========================================================
   the handler                      the report
   ===============================  ========================================================
   returns a value                  ack with it as the result (``None``: the task is simply
                                    deleted)
   raises :class:`RetryableError`   nack for a retry, after its ``retry_in_seconds`` or the
                                    queue's backoff
   raises :class:`PermanentError`   nack as dead
   raises any other exception       nack for a retry with the queue's backoff
   ===============================  ========================================================

   The error text becomes the task's ``last_error``: type, message and innermost frames, at
   most 2 KiB, what the server keeps (:func:`describe`).
5. **Stop** on SIGTERM or SIGINT (or :meth:`Worker.stop`): claim nothing more (tasks a
   long poll under way when the stop came brings back are released, never started), let the
   running tasks finish for up to ``grace_seconds``, report what finished, then:

   =============================  ==========================================================
   a task at the end of the grace  what the Worker does
   =============================  ==========================================================
   finished                       acked or nacked, as always
   not started (prefetched)       *released*: back in its place in line, ready at once, no
                                  attempt counted
   its handler still running      *abandoned*: no nack, no more heartbeats; its lease runs
                                  out (at most ``lease_seconds`` after the last heartbeat),
                                  the reaper counts the attempt (``lease expired``) and
                                  retries it, or dead-letters it past ``max_attempts``
   =============================  ==========================================================

   A running task is never handed back while its handler may still run: nacking it would
   give it to another worker at once, and both would execute it. Nothing stops the handler
   (Python cannot stop a thread): it and whatever it started — threads, a
   ``ThreadPoolExecutor``'s workers, child processes — outlive :meth:`Worker.run`. **A
   process that embeds the Worker must end as soon as** :meth:`Worker.run` **returns with**
   ``stats.abandoned > 0``, **without waiting for those threads**: ``os._exit`` once its
   output is flushed, as ``tierq worker`` does. A plain ``sys.exit`` or a return from
   ``main`` waits for every non-daemon thread, and the task runs on here after its lease
   ran out and another worker got it. Child processes outlive even that: a handler that
   starts them ends them itself when :attr:`Worker.stopping` is set, or the process runs
   under a supervisor that stops its whole process group or cgroup (systemd, ECS and
   Kubernetes do). A second signal stops at once (no more grace).

A report that cannot be delivered (the API unreachable after the client's retries) is
logged; the lease then expires and the task is delivered again: at-least-once, never lost.
"""

from __future__ import annotations

import gc
import logging
import os
import queue as queue_module
import signal
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from types import FrameType
from typing import Any
from uuid import UUID

from pydantic_core import to_jsonable_python

from tierq.client import Client
from tierq.client.errors import ApiError, NotFoundError
from tierq.client.worker.errors import PermanentError, RetryableError
from tierq.errors import TierqError
from tierq.models import ClaimedTask
from tierq.models.leases import MAX_CLAIM
from tierq.models.queues import TenantQueueView

log = logging.getLogger("tierq.client.worker")

Handler = Callable[[ClaimedTask], Any]
# What a task's last_error keeps, in UTF-8 bytes (tierq.logic.leases.MAX_ERROR_BYTES): the
# server keeps the first 2 KiB of an error, so the Worker sends no more, chosen here.
MAX_ERROR_BYTES = 2048
# The most of it the error's message takes when the whole text does not fit: the rest goes to
# the innermost frames of its traceback.
MAX_MESSAGE_BYTES = 1024
TRUNCATED = "…(truncated)"
DEFAULT_LEASE_SECONDS = 300
REPORT_BATCH = 500


@dataclass
class WorkerStats:
    """What a worker did (a snapshot: :attr:`Worker.stats`)."""

    claimed: int = 0
    acked: int = 0
    retried: int = 0  # nacked for a retry
    dead: int = 0  # nacked into the dead letters
    released: int = 0  # not started at shutdown: released (no attempt counted)
    abandoned: int = 0  # still running past the grace: left to their leases' expiry
    rejected: int = 0  # reports the API refused: the lease had been lost
    heartbeats: int = 0  # lease extensions granted
    leases_lost: int = 0  # heartbeats refused
    report_failures: int = 0  # reports that could not be delivered
    claim_failures: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Ack:
    result: Any


@dataclass
class Nack:
    error: str
    retry_in_seconds: float | None = None
    dead: bool = False


@dataclass(eq=False)
class HeldLease:
    """A task this worker holds a lease on, from claim to report."""

    task: ClaimedTask
    extended_at: float  # monotonic time of the claim or the last granted heartbeat
    lease_seconds: int = DEFAULT_LEASE_SECONDS  # what it was claimed or last extended for
    started_at: float | None = None
    outcome: Ack | Nack | None = None
    # let go at shutdown (released, or abandoned to its lease's expiry): no more heartbeats,
    # and a late outcome is dropped
    let_go: bool = False
    lost: bool = False  # a heartbeat was refused

    def item(self) -> dict[str, Any]:
        return {"id": self.task.id, "lease_token": self.task.lease_token}


def _size(text: str) -> int:
    """``text``'s UTF-8 bytes, as the server counts them (a lone surrogate: one ``?``)."""
    return len(text.encode("utf-8", "replace"))


def _clip(text: str, limit: int) -> str:
    """``text`` cut to its first ``limit`` bytes of UTF-8, on a character boundary."""
    raw = text.encode("utf-8", "replace")
    return text if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")


def describe(exc: BaseException, limit: int = MAX_ERROR_BYTES) -> str:
    """``Type: message``, a blank line, then the traceback, in at most ``limit`` bytes of
    UTF-8 (the server keeps the first 2 KiB of a nack's error: this is what it keeps).

    When it does not fit, the most useful parts are kept: the message (its start, at least
    MAX_MESSAGE_BYTES of it, more when the traceback leaves room) and the traceback's
    innermost frames, where the exception was raised; the outer frames are left out, and a
    line after ``Traceback (most recent call last):`` says how many parts were. The
    traceback's last line, the message once more, is left out then."""
    head = f"{type(exc).__name__}: {exc}".strip().removesuffix(":")
    parts = traceback.format_exception(exc)
    text = f"{head}\n\n{''.join(parts).rstrip()}"
    if _size(text) <= limit:
        return text
    if parts and parts[-1].rstrip() == head:
        parts = parts[:-1]  # the message, already at the head
    first, frames = (parts[0], parts[1:]) if parts else ("", [])
    gap_size = _size(f"  …({len(frames)} parts left out)\n")
    head_room = max(MAX_MESSAGE_BYTES, limit - 2 - _size(first) - gap_size
                    - sum(map(_size, frames)))
    if _size(head) > head_room:
        head = _clip(head, head_room - _size(TRUNCATED)) + TRUNCATED
    room = limit - _size(head) - 2 - _size(first) - gap_size
    kept: list[str] = []
    for part in reversed(frames):  # innermost first
        room -= _size(part)
        if room < 0:
            break
        kept.append(part)
    kept.reverse()
    left_out = len(frames) - len(kept)
    gap = f"  …({left_out} parts left out)\n" if left_out else ""
    return _clip(f"{head}\n\n{first}{gap}{''.join(kept)}".rstrip(), limit)


def default_worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:4]}"


class Worker:
    """Runs ``handler`` for the tasks of ``queue`` (see the module docstring).

    ``concurrency``: handler threads (and leases held at most). ``tenant``: claim only this
    tenant's tasks (default: rotate fairly across tenants). ``lease_seconds``: default the
    queue's. ``wait_seconds``: long-poll length of a claim (≤ 20; also bounds how long a
    stop takes to be noticed while idle). ``grace_seconds``: how long running tasks may
    finish after a stop. ``burst``: return once the queue is empty instead of waiting for
    more. ``install_signal_handlers``: handle SIGTERM/SIGINT while :meth:`run` runs (only
    possible on the main thread). ``freeze_gc``: when :meth:`run` starts, move the objects
    the process has made so far (its modules, its set-up) out of the cycle collector's way
    with ``gc.freeze()``: a long-running worker's full collections otherwise walk them again
    and again (a fifth of a busy worker's CPU in the benchmarks, bench/README.md).

    A handler still running when :meth:`run` returns (``stats.abandoned > 0``) goes on, with
    the threads and child processes it started: end the process then, with ``os._exit``
    after flushing its output (a normal exit waits for non-daemon threads), as ``tierq
    worker`` does, before the abandoned tasks' leases run out (the module docstring, 5).
    """

    def __init__(self, client: Client, queue: str, handler: Handler, *,
                 concurrency: int = 4, tenant: str | None = None,
                 lease_seconds: int | None = None, wait_seconds: float = 5.0,
                 grace_seconds: float = 25.0, name: str | None = None, burst: bool = False,
                 heartbeat_fraction: float = 1 / 3, install_signal_handlers: bool = True,
                 report_linger_seconds: float = 0.01, freeze_gc: bool = True) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if not 0 < heartbeat_fraction < 1:
            raise ValueError("heartbeat_fraction must be between 0 and 1")
        if not 0 <= wait_seconds <= 20:
            raise ValueError("wait_seconds must be between 0 and 20")
        if grace_seconds < 0:
            raise ValueError("grace_seconds must be >= 0")
        self.client = client
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.tenant = tenant
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self.grace_seconds = grace_seconds
        self.name = name or default_worker_name()
        self.burst = burst
        self.heartbeat_fraction = heartbeat_fraction
        self.install_signal_handlers = install_signal_handlers
        self.report_linger_seconds = report_linger_seconds
        self.freeze_gc = freeze_gc

        self._stats = WorkerStats()
        self._held: dict[UUID, HeldLease] = {}
        self._cond = threading.Condition()
        self._work: queue_module.Queue[HeldLease | None] = queue_module.Queue()
        self._reports: queue_module.Queue[HeldLease | None] = queue_module.Queue()
        self._stopping = threading.Event()
        self._abort = threading.Event()
        self._heartbeats_done = threading.Event()
        self._stop_requested_at: float | None = None
        self._lease_seconds: int | None = None  # resolved when run() starts
        # the lease was read from a view that may show the defaults rather than the queue's
        # settings (a tenant's, or none): read again once the first tasks come
        self._lease_provisional = False
        self._started = False
        self._finished = threading.Event()

    # -- public ------------------------------------------------------------------------

    @property
    def stats(self) -> WorkerStats:
        with self._cond:
            return WorkerStats(**self._stats.as_dict())

    @property
    def stopping(self) -> threading.Event:
        """Set once a stop was asked for; long handlers may check it to finish early."""
        return self._stopping

    @property
    def finished(self) -> threading.Event:
        """Set when :meth:`run` has returned."""
        return self._finished

    @property
    def held(self) -> int:
        """Leases held right now (running or being reported)."""
        with self._cond:
            return len(self._held)

    def stop(self, *, abort: bool = False) -> None:
        """Stop claiming and finish (see the module docstring). ``abort``: end the grace now
        (release the tasks not started, abandon the running ones to their leases) instead of
        waiting up to ``grace_seconds``. Safe from any thread and from signal handlers."""
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        self._stopping.set()
        if abort:
            self._abort.set()

    def run(self) -> WorkerStats:
        """Work until stopped (or, with ``burst``, until the queue is empty); returns what
        was done. Raises when the queue's settings cannot be read or a claim is refused
        as invalid (a 4xx other than 429): that is a configuration error."""
        if self._started:
            raise RuntimeError("a Worker runs once; make a new one")
        self._started = True
        if self.freeze_gc:
            gc.collect()
            gc.freeze()
        restore_signals = self._install_signals()
        threads: list[threading.Thread] = []
        try:
            lease_seconds = self._lease_seconds = self._resolve_lease_seconds()
            executors = [threading.Thread(target=self._execute_loop, daemon=True,
                                          name=f"tierq-worker-{i}")
                         for i in range(self.concurrency)]
            reporter = threading.Thread(target=self._report_loop, daemon=True,
                                        name="tierq-worker-reports")
            heartbeater = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                           name="tierq-worker-heartbeats")
            threads = [*executors, reporter, heartbeater]
            for thread in threads:
                thread.start()
            log.info("worker %s: queue %r, %d threads, lease %ds", self.name, self.queue,
                     self.concurrency, lease_seconds)
            self._claim_loop()
        finally:
            try:
                if threads:
                    self._shutdown(threads)
            finally:
                restore_signals()
                self._finished.set()
        stats = self.stats
        log.info("worker %s stopped: %s", self.name, stats.as_dict())
        return stats

    # -- setup ---------------------------------------------------------------------------

    def _resolve_lease_seconds(self) -> int:
        """The lease to claim with: ``lease_seconds`` if given, else the queue's view's.

        ======================================  ===========================================
        the view                                what it shows
        ======================================  ===========================================
        an admin's                              the queue's setting
        404 (an admin's: no settings, no tasks)  nothing: DEFAULT_LEASE_SECONDS, provisional
        a tenant's                              the queue's setting once the tenant has
                                                tasks there, the deployment's default
                                                before: provisional
        ======================================  ===========================================

        A provisional lease is read again when the first tasks come (:meth:`_settle_lease`).
        """
        if self.lease_seconds is not None:
            return self.lease_seconds
        try:
            view = self.client.get_queue(self.queue)
        except NotFoundError:
            self._lease_provisional = True
            return DEFAULT_LEASE_SECONDS
        self._lease_provisional = isinstance(view, TenantQueueView)
        return view.settings.lease_seconds

    def _settle_lease(self) -> None:
        """Read the queue's lease again, now that it has tasks for this worker (a tenant's view
        shows the queue's settings from then on). The tasks already claimed keep the lease
        they were claimed with until their first heartbeat, which extends them by this one.
        A failed read is tried again after the next claim that brings tasks."""
        try:
            view = self.client.get_queue(self.queue)
        except TierqError as exc:
            log.warning("worker %s: could not read the queue's lease (%s); trying again",
                        self.name, exc)
            return
        with self._cond:
            self._lease_seconds = view.settings.lease_seconds
            self._lease_provisional = False
        log.info("worker %s: lease %ds (the queue's)", self.name, view.settings.lease_seconds)

    def _current_lease(self) -> int:
        with self._cond:
            assert self._lease_seconds is not None
            return self._lease_seconds

    def _install_signals(self) -> Callable[[], None]:
        if not self.install_signal_handlers or \
                threading.current_thread() is not threading.main_thread():
            return lambda: None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self._stopping.is_set():
                self.stop(abort=True)
            else:
                self.stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    # -- claiming ------------------------------------------------------------------------

    def _claim_loop(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            with self._cond:
                free = self.concurrency - len(self._held)
                if free <= 0:
                    self._cond.wait(timeout=0.2)
                    continue
            lease_seconds = self._current_lease()
            try:
                tasks = self.client.claim(self.queue, max=min(free, MAX_CLAIM),
                                          lease_seconds=lease_seconds, tenant=self.tenant,
                                          worker=self.name, wait_seconds=self.wait_seconds)
            except TierqError as exc:
                if isinstance(exc, ApiError) and exc.status < 500 and exc.status != 429:
                    raise  # an invalid claim (bad queue name, tenant): a configuration error
                failures += 1
                with self._cond:
                    self._stats.claim_failures += 1
                pause = min(30.0, 0.5 * 2 ** min(failures, 6))
                log.warning("worker %s: claim failed (%s); trying again in %.1fs",
                            self.name, exc, pause)
                self._stopping.wait(pause)
                continue
            failures = 0
            now = time.monotonic()
            held = [HeldLease(task, now, lease_seconds) for task in tasks]
            with self._cond:
                for lease in held:
                    self._held[lease.task.id] = lease
                self._stats.claimed += len(held)
                empty = not self._held
                late = self._stopping.is_set()
                if late:
                    for lease in held:
                        lease.let_go = True
            if late:
                # a long poll under way when the stop came brought these: released at once,
                # never started (the grace is for what was running)
                if held:
                    self._let_go(held)
                return
            for lease in held:
                self._work.put(lease)
            if held and self._lease_provisional:
                self._settle_lease()
            if self.burst and not tasks and empty:
                log.info("worker %s: queue %r is empty (burst mode)", self.name, self.queue)
                break

    # -- running -------------------------------------------------------------------------

    def _execute_loop(self) -> None:
        while True:
            lease = self._work.get()
            if lease is None:
                return
            with self._cond:
                if lease.let_go:
                    continue
                lease.started_at = time.monotonic()
            self._hand_over(lease, self._call(lease.task))

    def _hand_over(self, lease: HeldLease, outcome: Ack | Nack) -> None:
        """Hand ``outcome`` to the reporter, unless the lease was let go at shutdown while the
        handler ran (its lease runs out and the task runs again)."""
        with self._cond:
            if lease.let_go:
                return
            lease.outcome = outcome
        self._reports.put(lease)

    def _call(self, task: ClaimedTask) -> Ack | Nack:
        try:
            result = self.handler(task)
        except PermanentError as exc:
            return Nack(describe(exc), dead=True)
        except RetryableError as exc:
            return Nack(describe(exc), retry_in_seconds=exc.retry_in_seconds)
        except BaseException as exc:  # a handler's failure, whatever it is, is the task's
            log.debug("task %s failed", task.id, exc_info=True)
            return Nack(describe(exc))
        return Ack(to_jsonable_python(result, fallback=repr))

    # -- heartbeats ----------------------------------------------------------------------

    def _tick(self) -> float:
        """How often the heartbeat thread looks for leases due: a third of the shortest
        interval between heartbeats (a ``heartbeat_fraction`` of a lease), 0.05 to 1 s."""
        with self._cond:
            shortest = min((lease.lease_seconds for lease in self._held.values()),
                           default=self._lease_seconds or DEFAULT_LEASE_SECONDS)
            shortest = min(shortest, self._lease_seconds or shortest)
        return max(0.05, min(1.0, shortest * self.heartbeat_fraction / 3))

    def _heartbeat_loop(self) -> None:
        """Extend each held lease once ``heartbeat_fraction`` of it has passed, by the current
        lease (:meth:`_current_lease`), all the leases due in one request. A lease let go at
        shutdown, or lost, is never extended again."""
        while not self._heartbeats_done.wait(self._tick()):
            now = time.monotonic()
            with self._cond:
                due = [lease for lease in self._held.values()
                       if not lease.let_go and not lease.lost
                       and now - lease.extended_at
                       >= lease.lease_seconds * self.heartbeat_fraction]
            if not due:
                continue
            lease_seconds = self._current_lease()
            try:
                result = self.client.heartbeat(self.queue, [
                    {**lease.item(), "extend_seconds": lease_seconds} for lease in due])
            except TierqError as exc:
                log.warning("worker %s: heartbeat failed (%s); trying again", self.name, exc)
                continue
            refused = {r.id for r in result.rejected}
            with self._cond:
                self._stats.heartbeats += len(result.extended)
                for lease in due:
                    if lease.task.id in refused:
                        lease.lost = True
                        self._stats.leases_lost += 1
                    else:
                        lease.extended_at = now
                        lease.lease_seconds = lease_seconds
            for task_id in refused:
                log.warning("worker %s: lease of task %s was lost (expired or taken over); "
                            "its outcome will be refused", self.name, task_id)

    # -- reporting -----------------------------------------------------------------------

    def _report_loop(self) -> None:
        while True:
            first = self._reports.get()
            if first is None:
                return
            batch = [first]
            done = False
            deadline = time.monotonic() + self.report_linger_seconds
            while len(batch) < REPORT_BATCH:
                try:
                    item = self._reports.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue_module.Empty:
                    break
                if item is None:
                    done = True
                    break
                batch.append(item)
            self._report(batch)
            if done:
                return

    def _report(self, batch: list[HeldLease]) -> None:
        acks = [lease for lease in batch if isinstance(lease.outcome, Ack)]
        nacks = [lease for lease in batch if isinstance(lease.outcome, Nack)]
        if acks:
            self._send_acks(acks)
        if nacks:
            self._send_nacks(nacks)
        with self._cond:
            for lease in batch:
                self._held.pop(lease.task.id, None)
            self._cond.notify_all()

    @staticmethod
    def _ack_item(lease: HeldLease, with_result: bool = True) -> dict[str, Any]:
        item = lease.item()
        assert isinstance(lease.outcome, Ack)
        if with_result and lease.outcome.result is not None:
            item["result"] = lease.outcome.result
        return item

    def _send_acks(self, acks: list[HeldLease]) -> None:
        try:
            result = self.client.ack(self.queue, [self._ack_item(lease) for lease in acks])
        except ApiError as exc:
            if exc.status >= 500 or exc.status == 429 or len(acks) == 1:
                self._ack_without_result(acks, exc)
                return
            for lease in acks:  # one bad result must not hold back the others
                self._send_acks([lease])
            return
        except TierqError as exc:
            self._report_failed("ack", acks, exc)
            return
        self._count_acks(result.acked, result.rejected)

    def _ack_without_result(self, acks: list[HeldLease], first: ApiError) -> None:
        if first.status >= 500 or first.status == 429:
            self._report_failed("ack", acks, first)
            return
        log.error("worker %s: the API refused the result of task %s (%s); acking without it",
                  self.name, acks[0].task.id, first)
        try:
            result = self.client.ack(self.queue, [self._ack_item(a, False) for a in acks])
        except TierqError as exc:
            self._report_failed("ack", acks, exc)
            return
        self._count_acks(result.acked, result.rejected)

    def _count_acks(self, acked: list[UUID], rejected: list[Any]) -> None:
        with self._cond:
            self._stats.acked += len(acked)
            self._stats.rejected += len(rejected)
        for rejection in rejected:
            log.warning("worker %s: ack of task %s refused (%s): its lease was lost, so it "
                        "may run again", self.name, rejection.id, rejection.reason)

    def _send_nacks(self, nacks: list[HeldLease]) -> None:
        items = []
        for lease in nacks:
            outcome = lease.outcome
            assert isinstance(outcome, Nack)
            item: dict[str, Any] = {**lease.item(), "error": outcome.error}
            if outcome.retry_in_seconds is not None:
                item["retry_in_seconds"] = outcome.retry_in_seconds
            if outcome.dead:
                item["dead"] = True
            items.append(item)
        try:
            result = self.client.nack(self.queue, items)
        except TierqError as exc:
            self._report_failed("nack", nacks, exc)
            return
        with self._cond:
            self._stats.retried += len(result.retried)
            self._stats.dead += len(result.dead)
            self._stats.rejected += len(result.rejected)
        for rejection in result.rejected:
            log.warning("worker %s: nack of task %s refused (%s)", self.name, rejection.id,
                        rejection.reason)

    def _report_failed(self, what: str, leases: list[HeldLease], exc: Exception) -> None:
        with self._cond:
            self._stats.report_failures += len(leases)
        log.error("worker %s: could not %s %d task(s) (%s); they run again once their "
                  "leases expire", self.name, what, len(leases), exc)

    # -- stopping ------------------------------------------------------------------------

    def _shutdown(self, threads: list[threading.Thread]) -> None:
        self.stop()
        started = self._stop_requested_at or time.monotonic()
        deadline = started + self.grace_seconds
        with self._cond:
            while self._held and not self._abort.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(min(remaining, 0.1))
            unfinished = [lease for lease in self._held.values() if lease.outcome is None]
            for lease in unfinished:
                lease.let_go = True  # no heartbeat from now on, a late outcome dropped
        if unfinished:
            self._let_go(unfinished)
        self._reports.put(None)
        executors, reporter, heartbeater = threads[:-2], threads[-2], threads[-1]
        reporter.join()
        self._heartbeats_done.set()
        heartbeater.join()
        for _ in executors:
            self._work.put(None)
        for thread in executors:
            thread.join(timeout=0.05)  # a handler still running is left to its daemon thread

    def _lease_end(self, leases: list[HeldLease]) -> str:
        """When the last of these leases runs out, as far as this worker knows (for the log)."""
        last = max(lease.extended_at + lease.lease_seconds for lease in leases)
        return f"within {max(0.0, last - time.monotonic()):.0f}s"

    def _let_go(self, leases: list[HeldLease]) -> None:
        """Let go of what is unfinished at shutdown (``let_go`` already set on each).

        ==================  ====================================================================
        the task            what happens
        ==================  ====================================================================
        never started       released: back in its place in line, ready at once, no attempt
                            counted (so a last attempt is not dead-lettered for nothing)
        handler running     abandoned: neither nacked nor heartbeated; its lease runs out,
                            the reaper counts the attempt and retries it (or dead-letters it
                            past ``max_attempts``), so a task that hangs every time still ends
                            in the dead letters, and nobody else gets it while this process
                            may still run it
        ==================  ====================================================================
        """
        waiting = [lease for lease in leases if lease.started_at is None]
        running = [lease for lease in leases if lease.started_at is not None]
        if running:
            log.warning("worker %s: %d task(s) still running after the grace of %gs: left to "
                        "their leases (no nack, no more heartbeats), which run out %s; the "
                        "reaper then retries them", self.name, len(running),
                        self.grace_seconds, self._lease_end(running))
        if waiting:
            log.info("worker %s: releasing %d task(s) not started", self.name, len(waiting))
            try:
                released = self.client.release(self.queue, [lease.item() for lease in waiting])
            except TierqError as exc:
                self._report_failed("release", waiting, exc)
            else:
                with self._cond:
                    self._stats.released += len(released.released)
                    self._stats.rejected += len(released.rejected)
        with self._cond:
            self._stats.abandoned += len(running)
            for lease in leases:
                self._held.pop(lease.task.id, None)
            self._cond.notify_all()


__all__ = ["Ack", "Handler", "HeldLease", "Nack", "Worker", "WorkerStats", "describe"]
