"""``AsyncWorker``: the :class:`~tierq.client.worker.Worker` for coroutine handlers, on one
event loop over an :class:`~tierq.client.AsyncClient`.

    import asyncio
    from tierq.client import AsyncClient
    from tierq.client.worker import AsyncWorker, PermanentError

    async def send_email(task):            # task: tierq.client.worker.WorkerTask
        if "to" not in task.payload:
            raise PermanentError("no recipient")
        await deliver(task.payload)
        return {"sent": True}

    async def main():
        async with AsyncClient("http://127.0.0.1:3000") as api:
            await AsyncWorker(api, "emails", send_email, concurrency=50).run()

    asyncio.run(main())

It claims, heartbeats, reports and stops as the Worker does (the Worker's module docstring:
the outcomes table, the stop and its grace), with the same bookkeeping
(:mod:`tierq.client.worker.ledger`): ``concurrency`` handler coroutines at most run at once
(and as many leases are held); ``task.parents`` reaches the handler as there.

**Stop and cancellation.** A stop (SIGTERM or SIGINT, :meth:`AsyncWorker.stop` from any
thread, or the task running :meth:`AsyncWorker.run` being cancelled, which ends the grace at
once) claims nothing more and lets the running handlers finish for up to ``grace_seconds``.
Past it, the tasks not started are released and the handlers still running are *abandoned*,
as by the Worker: no nack, no more heartbeats, their leases run out and the reaper retries
them. Unlike a thread, a coroutine can be stopped: the AsyncWorker cancels each abandoned
handler (``CancelledError`` at its next ``await``) so that nothing of it runs on once
:meth:`run` has returned, and reports nothing for it.

A handler whose coroutine ends in ``CancelledError`` otherwise (cancelled by code of its own,
not by the stop) has failed its attempt: it is nacked for a retry with the queue's backoff,
or dead-lettered at ``max_attempts``, as for any exception. ``KeyboardInterrupt`` and
``SystemExit`` are not a task's failure: they end the loop.

A handler that blocks (a synchronous call without ``await``) blocks the loop, and the
heartbeats with it: run blocking work with ``asyncio.to_thread``, or use the Worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from tierq.client.aio import AsyncClient
from tierq.client.errors import NotFoundError
from tierq.client.tracing import handler_span_name
from tierq.client.worker.ledger import (
    REPORT_BATCH,
    Ack,
    HeldLease,
    Nack,
    WorkerBase,
    WorkerStats,
    failed,
    succeeded,
)
from tierq.core.pointers import looks_like_pointer
from tierq.errors import TierqError
from tierq.models import ClaimedTask, QueueView, TenantQueueView

AsyncHandler = Callable[[ClaimedTask], Awaitable[Any]]


def is_coroutine_handler(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` is a coroutine function (or an object whose ``__call__`` is one):
    what the AsyncWorker runs, and ``tierq worker`` looks for."""
    return inspect.iscoroutinefunction(handler) or (
        not inspect.isroutine(handler) and inspect.iscoroutinefunction(type(handler).__call__))


class AsyncWorker(WorkerBase):
    """Runs the coroutine function ``handler`` for the tasks of ``queue`` (the module
    docstring); the arguments are the Worker's, ``concurrency`` being the most handler
    coroutines at once. :meth:`run` is a coroutine."""

    _stopping: asyncio.Event
    _abort: asyncio.Event

    def __init__(self, client: AsyncClient, queue: str, handler: AsyncHandler,
                 **options: Any) -> None:
        if not is_coroutine_handler(handler):
            raise TypeError(f"{handler!r} is not a coroutine function (async def): run it "
                            "with tierq.client.worker.Worker")
        super().__init__(client, queue, handler, **options)
        self.client: AsyncClient = client
        self.handler: AsyncHandler = handler
        self._stopping = asyncio.Event()
        self._abort = asyncio.Event()
        self._heartbeats_done = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._reports: asyncio.Queue[HeldLease | None] = asyncio.Queue()
        self._running: dict[UUID, asyncio.Task[None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- public ------------------------------------------------------------------------

    @property
    def stopping(self) -> asyncio.Event:
        """Set once a stop was asked for; long handlers may check it (or wait on it) to
        finish early."""
        return self._stopping

    def _stop_now(self, abort: bool) -> None:
        """Set the stop on the loop's thread (asyncio's events are not thread-safe)."""
        loop = self._loop
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if loop is None or on_loop or loop.is_closed():
            super()._stop_now(abort)
        else:
            loop.call_soon_threadsafe(super()._stop_now, abort)

    async def run(self) -> WorkerStats:
        """Work until stopped (or, with ``burst``, until the queue is empty); returns what
        was done. Raises when the queue's settings cannot be read or a claim is refused
        as invalid (a 4xx other than 429). Cancelled, it stops without a grace and
        re-raises."""
        self._starting()
        self._loop = asyncio.get_running_loop()
        restore_signals = self._install_signals()
        helpers: list[asyncio.Task[None]] = []
        try:
            await self._resolve_lease_seconds()
            helpers = [asyncio.create_task(self._report_loop(), name="tierq-worker-reports"),
                       asyncio.create_task(self._heartbeat_loop(),
                                           name="tierq-worker-heartbeats")]
            await self._claim_loop()
        except asyncio.CancelledError:
            self.stop(abort=True)
            raise
        finally:
            try:
                if helpers:
                    await self._shutdown(*helpers)
            finally:
                restore_signals()
                self._finished.set()
        return self._stopped()

    # -- setup ---------------------------------------------------------------------------

    async def _resolve_lease_seconds(self) -> int:
        view: QueueView | TenantQueueView | None = None
        if self.lease_seconds is None:
            with contextlib.suppress(NotFoundError):  # an admin's 404: no settings yet
                view = await self.client.get_queue(self.queue)
        return self._lease_resolved(view)

    async def _settle_lease(self) -> None:
        view: QueueView | TenantQueueView | TierqError
        try:
            view = await self.client.get_queue(self.queue)
        except TierqError as exc:
            view = exc
        self._settled_lease(view)

    def _install_signals(self) -> Callable[[], None]:
        """SIGTERM and SIGINT stop the worker (a second one ends the grace), while
        :meth:`run` runs on the main thread's loop."""
        loop = self._loop
        if (loop is None or not self.install_signal_handlers
                or threading.current_thread() is not threading.main_thread()):
            return lambda: None
        signals = (signal.SIGTERM, signal.SIGINT)
        for sig in signals:
            loop.add_signal_handler(sig, lambda: self.stop(abort=self._stopping.is_set()))

        def restore() -> None:
            for sig in signals:
                loop.remove_signal_handler(sig)

        return restore

    # -- claiming ------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            free = self._free()
            if free <= 0:
                self._slot_freed.clear()
                await _until(self._slot_freed, 0.2)
                continue
            options = self._claim_options()
            if options is None:  # (a claim riding with acks took the slots meanwhile)
                continue
            try:
                tasks = await self.client.claim(self.queue, **options)
            except TierqError as exc:
                self._unclaimed(options)
                failures += 1
                await _until(self._stopping, self._claim_failed(exc, failures))
                continue
            failures = 0
            late = self._stopping.is_set()
            held, done = self._claimed(tasks, options, late=late)
            if late:
                if held:  # brought by a long poll under way at the stop: never started
                    await self._let_go(held)
                return
            await self._start(held)
            if done:
                return

    async def _start(self, held: list[HeldLease]) -> None:
        """Run the handlers of the leases a claim brought (the first tasks read the queue's
        lease again when it was provisional)."""
        for lease in held:
            lease.task.with_signal(asyncio.Event())  # (its task.cancelled)
            self._running[lease.task.id] = asyncio.create_task(
                self._execute(lease), name=f"tierq-task-{lease.task.id}")
        if held and self._ledger.provisional:
            await self._settle_lease()

    def _dropped(self) -> None:
        super()._dropped()
        self._slot_freed.set()

    # -- running -------------------------------------------------------------------------

    async def _execute(self, lease: HeldLease) -> None:
        try:
            with self._cond:
                if lease.let_go:
                    return
                if lease.told_to_stop():  # cancelled before it started
                    self._ledger.stopped_returned(lease, None)
                    self._dropped()
                    return
                lease.started_at = time.monotonic()
            outcome = await self._call(lease)
            with self._cond:
                if outcome is None:
                    self._ledger.stats.killed += 1
                keep = outcome is not None and self._ledger.hand_over(lease, outcome)
                if not keep and lease.told_to_stop() and not lease.let_go:
                    self._ledger.stopped_returned(lease, outcome)
                    self._dropped()
            if keep:
                self._reports.put_nowait(lease)
        finally:
            self._running.pop(lease.task.id, None)

    async def _call(self, lease: HeldLease) -> Ack | Nack | None:
        """The handler's outcome; None when the worker cancelled its coroutine (its task
        was cancelled and it did not return within ``cancel_grace_seconds``, or its time
        limit came)."""
        tracer = self.tracer
        try:
            given = lease.task
            if looks_like_pointer(given.payload):  # a big payload: fetched, on the task
                # itself (a copy would not see stop_reason when the lease signals it)
                object.__setattr__(given, "payload", await self.client.fetch_payload(
                    given.queue, given.payload))
            if tracer is None:
                result = await self.handler(given)
            else:  # the handler's span, a child of the task's trace (client/tracing.py)
                with tracer.span(given, handler_span_name(given)):
                    result = await self.handler(given)
        except asyncio.CancelledError as exc:
            if lease.let_go:
                raise  # the stop cancelled it past the grace: nothing is reported
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                task.uncancel()  # this task's cancel was the handler's own failure, or ours
            if lease.told_to_stop():
                return None  # (ours: cancelled or past its time limit)
            return failed(exc, lease.task)
        except Exception as exc:  # a handler's failure, whatever it is, is the task's
            return failed(exc, lease.task)
        return succeeded(result)

    # -- heartbeats and reports ----------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while not await _until(self._heartbeats_done, self._tick()):
            self._check_limits()
            await self.client._run(self._beat())

    def _signal(self, leases: list[HeldLease]) -> None:
        """Set the handlers' ``task.cancelled``; then, unlike a thread, a coroutine can be
        stopped: at its time limit at once, after ``cancel_grace_seconds`` for a cancel
        (``CancelledError`` at its next ``await``), and nothing is reported for it."""
        super()._signal(leases)
        loop = asyncio.get_running_loop()
        for lease in leases:
            handler = self._running.get(lease.task.id)
            if handler is None or lease.started_at is None:
                continue
            if lease.stopped == "timeout":
                handler.cancel()
            else:
                loop.call_later(self.cancel_grace_seconds, handler.cancel)

    async def _report_loop(self) -> None:
        """Report outcomes in batches: what comes within ``report_linger_seconds`` of the
        first goes with it, up to REPORT_BATCH. None (put at shutdown) ends the loop."""
        ended = False
        while not ended:
            batch = [await self._reports.get()]
            await asyncio.sleep(self.report_linger_seconds)
            while len(batch) < REPORT_BATCH and not self._reports.empty():
                batch.append(self._reports.get_nowait())
            ended = None in batch
            leases = [lease for lease in batch if lease is not None]
            if leases:
                await self._start(await self.client._run(self._reported(leases)))

    # -- stopping ------------------------------------------------------------------------

    async def _shutdown(self, reporter: asyncio.Task[None],
                        heartbeater: asyncio.Task[None]) -> None:
        self.stop()
        while True:
            with self._cond:
                wait = self._grace_left()
                if wait <= 0:
                    unfinished = self._ledger.unfinished()
                    break
            await _until(self._abort, wait)
        if unfinished:
            await self._let_go(unfinished)
        self._reports.put_nowait(None)
        await reporter
        self._heartbeats_done.set()
        await heartbeater

    async def _let_go(self, leases: list[HeldLease]) -> None:
        """Let go of what is unfinished at shutdown (``let_go`` already set on each): the
        tasks never started are released, the running handlers abandoned to their leases
        and cancelled (the module docstring)."""
        running = await self.client._run(self._released(leases))
        for lease in running:
            handler = self._running.get(lease.task.id)
            if handler is not None:
                handler.cancel()


async def _until(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``event``; whether it is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()


__all__ = ["AsyncHandler", "AsyncWorker", "is_coroutine_handler"]
