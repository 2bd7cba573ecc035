"""``Worker``: claim tasks over HTTP, run a handler on a pool of threads, keep the leases
alive while it runs, and report each outcome.

    from tierq.client import Client
    from tierq.client.worker import PermanentError, Worker

    def send_email(task):                 # task: tierq.client.worker.WorkerTask
        if "to" not in task.payload:
            raise PermanentError("no recipient")   # dead-lettered now
        deliver(task.payload)                       # any other exception: retried
        return {"sent": True}                       # kept as the task's result

    Worker(Client("http://127.0.0.1:3000"), "emails", send_email, concurrency=8).run()

A task that waited for others (``after``, a flow) reaches its handler with ``task.parents``:
each parent's id, queue, final state and result (tierq.logic.flows). A task of a group
carries it as ``task.group`` (tierq.logic.groups). A handler tells how far it got with
``task.set_progress(value)`` (any JSON, at most 4 KiB): the last value set rides the lease's
next heartbeat, made for it within about a second (``WorkerTask``).
A task enqueued with a trace context carries it as ``task.trace``, and the handler runs in a
span that continues it (``tracer``: tierq.client.tracing).

The loop, per worker:

1. **Claim** with a long poll (``wait_seconds``), asking for as many tasks as there are free
   slots (``concurrency`` minus the leases held), each with a lease of ``lease_seconds``.
   Its default is the queue's setting, read at start from the queue's view. A caller pinned
   to a tenant is shown the deployment's defaults until its tenant has tasks in the queue,
   so the view is read once more when the first tasks come; the leases follow it from their
   first heartbeat.
2. **Run** the handler on one of ``concurrency`` threads.
3. **Heartbeat**: a thread extends every held lease once a third of it has passed, in one
   request for all of them, so a long task keeps its lease; a lease whose handler set
   progress is due once a second has passed since it last sent one, carrying it.
4. **Report**, in batches; the acks of a batch claim, in the same request, the slots the
   batch frees (``claim_with_acks``), and those tasks start as a claim's would:

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

The bookkeeping (the leases held, what to heartbeat, what to release at the stop) and the
reports are shared with :class:`~tierq.client.worker.AsyncWorker`, which runs coroutine
handlers on an event loop: :mod:`tierq.client.worker.ledger`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import queue as queue_module
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from tierq.client import Client
from tierq.client.errors import NotFoundError
from tierq.client.tracing import handler_span_name
from tierq.client.worker.ledger import (
    REPORT_BATCH,
    Ack,
    HeldLease,
    Nack,
    WorkerBase,
    WorkerStats,
    describe,
    failed,
    succeeded,
)
from tierq.client.worker.process import ISOLATIONS, HandlerProcess, check_picklable
from tierq.client.worker.task import WorkerTask
from tierq.core.pointers import looks_like_pointer
from tierq.errors import TierqError
from tierq.models import ClaimedTask, QueueView, TenantQueueView

log = logging.getLogger("tierq.client.worker")

Handler = Callable[[ClaimedTask], Any]


class Worker(WorkerBase):
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
    ``tracer``: what starts each handler's span in the task's trace (``"auto"``: OpenTelemetry
    or X-Ray when installed, :func:`tierq.client.tracing.default_tracer`; ``None``: no span;
    or any object with ``span(task, name)``). ``isolation``: ``"thread"``, or ``"process"``
    to run each slot's handlers in a child process that can be killed at a time limit
    (:mod:`tierq.client.worker.process`: the payload is fetched and the span started in the
    Worker's process; progress is relayed from the child). ``claim_with_acks`` (on by
    default): a report's acks claim the slots they free in the same request
    (``Client.ack_and_claim``), so a busy worker makes one request per batch it finishes
    instead of two; the claim loop still long-polls for the slots nothing claims.

    A handler still running when :meth:`run` returns (``stats.abandoned > 0``) goes on, with
    the threads and child processes it started: end the process then, with ``os._exit``
    after flushing its output (a normal exit waits for non-daemon threads), as ``tierq
    worker`` does, before the abandoned tasks' leases run out (the module docstring, 5).
    """

    _stopping: threading.Event
    _abort: threading.Event

    def __init__(self, client: Client, queue: str, handler: Handler, *,
                 freeze_gc: bool = True, isolation: str = "thread", **options: Any) -> None:
        super().__init__(client, queue, handler, **options)
        if isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
        if isolation == "process":
            check_picklable(handler)
        self.client: Client = client
        self.handler: Handler = handler
        self.freeze_gc = freeze_gc
        self.isolation = isolation
        self._children = [HandlerProcess(handler, f"tierq-handler-{i}")
                          for i in range(self.concurrency)] if isolation == "process" else []
        self._work: queue_module.Queue[HeldLease | None] = queue_module.Queue()
        self._reports: queue_module.Queue[HeldLease | None] = queue_module.Queue()
        self._stopping = threading.Event()
        self._abort = threading.Event()
        self._heartbeats_done = threading.Event()
        self._slot = threading.local()  # (each handler thread's slot)

    # -- public ------------------------------------------------------------------------

    @property
    def stopping(self) -> threading.Event:
        """Set once a stop was asked for; long handlers may check it to finish early."""
        return self._stopping

    def run(self) -> WorkerStats:
        """Work until stopped (or, with ``burst``, until the queue is empty); returns what
        was done. Raises when the queue's settings cannot be read or a claim is refused
        as invalid (a 4xx other than 429): that is a configuration error."""
        self._starting()
        if self.freeze_gc:
            gc.collect()
            gc.freeze()
        restore_signals = self._install_signals()
        threads: list[threading.Thread] = []
        try:
            self._resolve_lease_seconds()
            for child in self._children:
                child.warm_up()
            executors = [threading.Thread(target=self._executor, args=(i,), daemon=True,
                                          name=f"tierq-worker-{i}")
                         for i in range(self.concurrency)]
            reporter = threading.Thread(target=self._report_loop, daemon=True,
                                        name="tierq-worker-reports")
            heartbeater = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                           name="tierq-worker-heartbeats")
            threads = [*executors, reporter, heartbeater]
            for thread in threads:
                thread.start()
            self._claim_loop()
        finally:
            try:
                if threads:
                    self._shutdown(threads)
            finally:
                for child in self._children:
                    child.close()
                restore_signals()
                self._finished.set()
        return self._stopped()

    # -- setup ---------------------------------------------------------------------------

    def _resolve_lease_seconds(self) -> int:
        view: QueueView | TenantQueueView | None = None
        if self.lease_seconds is None:
            with contextlib.suppress(NotFoundError):  # an admin's 404: no settings yet
                view = self.client.get_queue(self.queue)
        return self._lease_resolved(view)

    def _settle_lease(self) -> None:
        try:
            view: QueueView | TenantQueueView | TierqError = self.client.get_queue(self.queue)
        except TierqError as exc:
            view = exc
        self._settled_lease(view)

    def _install_signals(self) -> Callable[[], None]:
        if not self.install_signal_handlers or \
                threading.current_thread() is not threading.main_thread():
            return lambda: None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.stop(abort=self._stopping.is_set())

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    # -- claiming ------------------------------------------------------------------------

    def _claim_loop(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            free = self._free()
            if free <= 0:
                with self._cond:
                    self._cond.wait(timeout=0.2)
                continue
            options = self._claim_options()
            if options is None:  # (a claim riding with acks took the slots meanwhile)
                continue
            try:
                tasks = self.client.claim(self.queue, **options)
            except TierqError as exc:
                self._unclaimed(options)
                failures += 1
                self._stopping.wait(self._claim_failed(exc, failures))
                continue
            failures = 0
            late = self._stopping.is_set()
            held, done = self._claimed(tasks, options, late=late)
            if late:
                # a long poll under way when the stop came brought these: released at once,
                # never started (the grace is for what was running)
                if held:
                    self._let_go(held)
                return
            self._start(held)
            if done:
                break

    def _start(self, held: list[HeldLease]) -> None:
        """Hand the leases a claim brought to the handler threads (the first tasks read the
        queue's lease again when it was provisional)."""
        for lease in held:
            self._work.put(lease)
        if held and self._ledger.provisional:
            self._settle_lease()

    # -- running -------------------------------------------------------------------------

    def _executor(self, slot: int) -> None:
        """A handler thread: its slot (the child process it runs handlers in, with
        ``isolation="process"``), then the loop."""
        self._slot.index = slot
        self._execute_loop()

    def _execute_loop(self) -> None:
        slot: int = getattr(self._slot, "index", 0)
        while True:
            lease = self._work.get()
            if lease is None:
                return
            with self._cond:
                if lease.let_go:
                    continue
                if lease.told_to_stop():  # cancelled before it started
                    self._ledger.stopped_returned(lease, None)
                    self._dropped()
                    continue
                lease.started_at = time.monotonic()
            if self._children:
                outcome = self._call_in(self._children[slot], lease)
            else:
                outcome = self._call(lease.task)
            self._hand_over(lease, outcome)

    def _hand_over(self, lease: HeldLease, outcome: Ack | Nack | None) -> None:
        """Hand ``outcome`` to the reporter, unless the lease was let go at shutdown while the
        handler ran (its lease runs out and the task runs again) or its handler was told to
        stop (cancelled, or past its time limit: its slot is free again now). None: the
        handler's process was killed."""
        with self._cond:
            if outcome is None:
                self._ledger.stats.killed += 1
            if outcome is None or not self._ledger.hand_over(lease, outcome):
                if lease.told_to_stop() and not lease.let_go:
                    self._ledger.stopped_returned(lease, outcome)
                    self._dropped()
                return
        self._reports.put(lease)

    def _call(self, task: ClaimedTask) -> Ack | Nack:
        tracer = self.tracer
        try:
            self._fetch(task)
            if tracer is None:
                result = self.handler(task)
            else:  # the handler's span, a child of the task's trace (client/tracing.py)
                with tracer.span(task, handler_span_name(task)):
                    result = self.handler(task)
        except BaseException as exc:  # a handler's failure, whatever it is, is the task's
            return failed(exc, task)
        return succeeded(result)

    def _call_in(self, child: HandlerProcess, lease: HeldLease) -> Ack | Nack | None:
        """``_call`` with ``isolation="process"``: the payload fetched and the handler's span
        started here, the handler run in ``child``, the progress it reports relayed to the
        lease (None: the child was killed)."""
        task = lease.task
        try:
            self._fetch(task)
        except BaseException as exc:  # (as when the thread's handler gets no payload)
            return failed(exc, task)
        def progress(value: Any) -> None:  # (checked in the child already)
            if isinstance(task, WorkerTask):
                try:
                    task.set_progress(value)
                except ValueError as exc:
                    log.warning("worker %s: task %s: progress dropped (%s)", self.name,
                                task.id, exc)

        def run() -> Ack | Nack | None:
            return child.run(task, cancel_grace_seconds=self.cancel_grace_seconds,
                             aborted=lambda: lease.let_go, progress=progress)

        if self.tracer is None:
            return run()
        # the span is the Worker's, around the child's run: a span does not cross processes
        with self.tracer.span(task, handler_span_name(task)):
            return run()

    def _fetch(self, task: ClaimedTask) -> None:
        """Put a big payload in place of the pointer the task carries, on the task itself: a
        copy would not be the task its lease signals (``task.cancelled``) when it must
        stop."""
        if looks_like_pointer(task.payload):
            object.__setattr__(task, "payload",
                               self.client.fetch_payload(task.queue, task.payload))

    # -- heartbeats ----------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self._heartbeats_done.wait(self._tick()):
            self._check_limits()
            self.client._run(self._beat())

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
        self._start(self.client._run(self._reported(batch)))

    # -- stopping ------------------------------------------------------------------------

    def _shutdown(self, threads: list[threading.Thread]) -> None:
        self.stop()
        with self._cond:
            while (wait := self._grace_left()) > 0:
                self._cond.wait(wait)
            unfinished = self._ledger.unfinished()
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
            # a handler still running is left to its daemon thread (isolation="process":
            # its child was killed when it was let go)
            thread.join(timeout=0.05 if not self._children else 6.0)

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
        self.client._run(self._released(leases))


__all__ = ["Ack", "Handler", "HeldLease", "Nack", "Worker", "WorkerStats", "describe"]
