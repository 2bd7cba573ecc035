"""What :class:`~tierq.client.worker.Worker` and :class:`~tierq.client.worker.AsyncWorker`
share: the leases a worker holds and what it did (:class:`Ledger`), what a handler's return
or exception becomes (:func:`succeeded`, :func:`failed`), and the reports whose course
depends on the API's answers (:func:`report`, :func:`release`), written as the client's
steps (:mod:`tierq.client.core`) that either worker walks with its own client.

Nothing here does I/O or takes a lock: the Worker calls the ledger under its lock, the
AsyncWorker from its event loop (under the same kind of lock, so that ``stats`` may be read
from any thread).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any
from uuid import UUID

from pydantic_core import to_jsonable_python

from tierq.client import tracing
from tierq.client.core import Operations, Steps
from tierq.client.errors import ApiError
from tierq.client.tracing import TaskTracer
from tierq.client.worker.errors import PermanentError, RetryableError
from tierq.client.worker.task import WorkerTask
from tierq.errors import TierqError
from tierq.models import AckResult, ClaimedTask, HeartbeatResult, QueueView, TenantQueueView
from tierq.models.leases import MAX_CLAIM, StopReason

log = logging.getLogger("tierq.client.worker")

# What a task's last_error keeps, in UTF-8 bytes (tierq.logic.leases.MAX_ERROR_BYTES): the
# server keeps the first 2 KiB of an error, so the Worker sends no more, chosen here.
MAX_ERROR_BYTES = 2048
# The most of it the error's message takes when the whole text does not fit: the rest goes to
# the innermost frames of its traceback.
MAX_MESSAGE_BYTES = 1024
TRUNCATED = "…(truncated)"
DEFAULT_LEASE_SECONDS = 300
REPORT_BATCH = 500
# A lease whose handler reported progress (WorkerTask.set_progress) is heartbeated at most
# this often for it, seconds: the last value set rides the next heartbeat.
PROGRESS_EVERY_SECONDS = 1.0


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
    cancelled: int = 0  # tasks cancelled while this worker held them (nothing reported)
    timed_out: int = 0  # attempts that reached their time limit (the server fails them)
    killed: int = 0  # handlers killed (isolation="process": past their limit or a cancel)
    report_failures: int = 0  # reports that could not be delivered
    claim_failures: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def add(self, other: WorkerStats) -> None:
        """Count what ``other`` counted too."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


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
    # the handler's progress not sent yet (a 1-tuple of the last value set), and when the
    # last heartbeat that carried one was sent (monotonic)
    progress: tuple[Any] | None = None
    progress_sent_at: float = 0.0
    # when the attempt's time limit comes (monotonic; the claim's arrival plus the task's
    # timeout_seconds: never before the server's own limit, which counts from the claim)
    limit_at: float | None = None
    # why the handler was told to stop (task.cancelled set): no more heartbeats, and its
    # outcome is not reported (the server refuses it: cancelled, or failed as timeout)
    stopped: StopReason | None = None
    stopped_at: float | None = None

    def item(self) -> dict[str, Any]:
        return {"id": self.task.id, "lease_token": self.task.lease_token}

    def told_to_stop(self) -> bool:
        """Whether its handler was told to stop (``stopped`` is set: by another thread, or
        while the handler ran, which a type checker does not see)."""
        return self.stopped is not None


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



def failed(exc: BaseException, task: ClaimedTask) -> Nack:
    """The nack of a handler's exception (the table in :mod:`tierq.client.worker.worker`):
    dead for :class:`PermanentError`, a retry after its ``retry_in_seconds`` for
    :class:`RetryableError`, a retry with the queue's backoff for any other."""
    if isinstance(exc, PermanentError):
        return Nack(describe(exc), dead=True)
    if isinstance(exc, RetryableError):
        return Nack(describe(exc), retry_in_seconds=exc.retry_in_seconds)
    log.debug("task %s failed", task.id, exc_info=exc)
    return Nack(describe(exc))


def succeeded(result: Any) -> Ack:
    """The ack of a handler's return value, made JSON (``repr`` for what JSON cannot hold)."""
    return Ack(to_jsonable_python(result, fallback=repr))


def lease_of(view: QueueView | TenantQueueView | None) -> tuple[int, bool]:
    """The lease to claim with, read from the queue's view, and whether it is provisional.

    ======================================  ===========================================
    the view                                what it shows
    ======================================  ===========================================
    an admin's                              the queue's setting
    None (an admin's 404: no settings, no   nothing: DEFAULT_LEASE_SECONDS, provisional
    tasks)
    a tenant's                              the queue's setting once the tenant has
                                            tasks there, the deployment's default
                                            before: provisional
    ======================================  ===========================================

    A provisional lease is read again when the first tasks come."""
    if view is None:
        return DEFAULT_LEASE_SECONDS, True
    return view.settings.lease_seconds, isinstance(view, TenantQueueView)


def claim_pause(failures: int) -> float:
    """Seconds to wait after ``failures`` claims in a row failed (the API unreachable,
    429 or 5xx), growing to 30."""
    return min(30.0, 0.5 * 2 ** min(failures, 6))


def is_configuration_error(exc: TierqError) -> bool:
    """A claim refused as invalid (a 4xx other than 429: a bad queue name or tenant): the
    worker stops and raises it rather than trying again."""
    return isinstance(exc, ApiError) and exc.status < 500 and exc.status != 429


class Ledger:
    """The leases a worker holds, from claim to report, and what it did (:attr:`stats`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.held: dict[UUID, HeldLease] = {}
        self.stats = WorkerStats()
        self.lease_seconds: int | None = None  # resolved when the worker starts
        # the lease was read from a view that may show the defaults rather than the queue's
        # settings (a tenant's, or none): read again once the first tasks come
        self.provisional = False
        # slots a claim under way may fill: the claim loop's, or one riding with acks
        self.claiming = 0

    def take(self, tasks: list[ClaimedTask], lease_seconds: int, *, late: bool,
             progress_to: Callable[[HeldLease, Any], None] | None = None) -> list[HeldLease]:
        """Hold the tasks a claim brought. ``late``: the stop came while the claim was under
        way, so they are let go at once (released, never started). ``progress_to``: takes
        what a task's handler reports (``WorkerTask.set_progress``), with its lease."""
        now = time.monotonic()
        held = [HeldLease(task, now, lease_seconds, let_go=late,
                          limit_at=None if task.timeout_seconds is None
                          else now + task.timeout_seconds) for task in tasks]
        for lease in held:
            if progress_to is not None:
                lease.task = WorkerTask.of(lease.task, functools.partial(progress_to, lease))
            self.held[lease.task.id] = lease
        self.stats.claimed += len(held)
        return held

    def hand_over(self, lease: HeldLease, outcome: Ack | Nack) -> bool:
        """Keep the handler's outcome, unless the lease was let go at shutdown while the
        handler ran (its lease runs out and the task runs again) or the handler was told to
        stop (:meth:`stopped_returned`): whether to report it."""
        if lease.let_go or lease.stopped is not None:
            return False
        lease.outcome = outcome
        return True

    def stop(self, lease: HeldLease, reason: StopReason) -> bool:
        """Mark the lease's handler told to stop for ``reason``: no more heartbeats, no
        report; whether it was not already (the caller then sets ``task.cancelled``)."""
        if lease.stopped is not None or lease.let_go or lease.outcome is not None:
            return False
        lease.stopped, lease.stopped_at, lease.lost = reason, time.monotonic(), True
        if reason == "cancelled":
            self.stats.cancelled += 1
            log.info("worker %s: task %s was cancelled; its handler is told to stop "
                     "(task.cancelled) and nothing is reported", self.name, lease.task.id)
        else:
            self.stats.timed_out += 1
            log.warning("worker %s: task %s reached its time limit of %ss (attempt %d): its "
                        "handler is told to stop and no longer heartbeated; the server fails "
                        "the attempt (timeout). Its slot stays taken until the handler "
                        "returns", self.name, lease.task.id, lease.task.timeout_seconds,
                        lease.task.attempt)
        return True

    def past_limit(self) -> list[HeldLease]:
        """The running leases whose time limit has come, marked stopped (``timeout``)."""
        now = time.monotonic()
        return [lease for lease in self.held.values()
                if lease.limit_at is not None and lease.limit_at <= now
                and self.stop(lease, "timeout")]

    def stopped_returned(self, lease: HeldLease, outcome: Ack | Nack | None) -> None:
        """A handler told to stop returned (``outcome`` None: it was killed): its lease is
        let go of, unreported, and its slot is free again."""
        self.held.pop(lease.task.id, None)
        late = time.monotonic() - (lease.stopped_at or time.monotonic())
        how = ("was killed" if outcome is None
               else "returned" if isinstance(outcome, Ack) else "raised")
        log.info("worker %s: task %s (%s): its handler %s %.1fs after it was told to stop; "
                 "nothing reported", self.name, lease.task.id, lease.stopped, how, late)

    def tick(self, fraction: float) -> float:
        """How often to look for leases due: a third of the shortest interval between
        heartbeats (a ``fraction`` of a lease), 0.05 to 1 s, and no later than the next
        time limit."""
        shortest = min((lease.lease_seconds for lease in self.held.values()),
                       default=self.lease_seconds or DEFAULT_LEASE_SECONDS)
        shortest = min(shortest, self.lease_seconds or shortest)
        tick = max(0.05, min(1.0, shortest * fraction / 3))
        limits = [lease.limit_at for lease in self.held.values()
                  if lease.limit_at is not None and lease.stopped is None]
        if limits:
            tick = max(0.02, min(tick, min(limits) - time.monotonic()))
        return tick

    def due(self, fraction: float) -> list[HeldLease]:
        """The leases to extend now: held, neither let go nor lost (nor told to stop), and
        a ``fraction`` of each gone since it was claimed or last extended, or progress to send
        and ``PROGRESS_EVERY_SECONDS`` gone since the last progress was sent."""
        now = time.monotonic()
        return [lease for lease in self.held.values()
                if not lease.let_go and not lease.lost
                and (now - lease.extended_at >= lease.lease_seconds * fraction
                     or (lease.progress is not None
                         and now - lease.progress_sent_at >= PROGRESS_EVERY_SECONDS))]

    def heartbeat_items(self, due: list[HeldLease]) -> list[dict[str, Any]]:
        """The heartbeat of ``due``: each extended by the current lease, with the progress
        its handler set since the last heartbeat (taken: :meth:`unsent` puts it back)."""
        assert self.lease_seconds is not None
        now = time.monotonic()
        items = []
        for lease in due:
            item = {**lease.item(), "extend_seconds": self.lease_seconds}
            if lease.progress is not None:
                item["progress"] = to_jsonable_python(lease.progress[0])
                lease.progress, lease.progress_sent_at = None, now
            items.append(item)
        return items

    @staticmethod
    def unsent(due: list[HeldLease], items: list[dict[str, Any]]) -> None:
        """A heartbeat failed: the progress it carried is sent with the next, unless the
        handler set a newer one meanwhile."""
        for lease, item in zip(due, items, strict=True):
            if "progress" in item and lease.progress is None:
                lease.progress, lease.progress_sent_at = (item["progress"],), 0.0

    def extended(self, due: list[HeldLease], result: HeartbeatResult, sent_at: float,
                 lease_seconds: int) -> list[HeldLease]:
        """Record a heartbeat's answer: the leases extended from ``sent_at``, the refused
        ones lost (never extended again; their outcome will be refused). A refused lease
        whose handler had already returned is not counted lost: its ack may have finished
        the task before the heartbeat came (a report the API refuses is counted then).
        Returns the leases the answer says were cancelled (marked stopped): the caller sets
        their ``task.cancelled``."""
        refused = {r.id for r in result.rejected}
        cancelled = set(result.cancelled)
        self.stats.heartbeats += len(result.extended)
        stop: list[HeldLease] = []
        for lease in due:
            if lease.task.id in cancelled and self.stop(lease, "cancelled"):
                stop.append(lease)
                continue
            if lease.task.id not in refused:
                lease.extended_at = sent_at
                lease.lease_seconds = lease_seconds
                continue
            if lease.stopped is not None:
                continue  # (its time limit came while the heartbeat was under way)
            lease.lost = True
            if lease.outcome is None:
                self.stats.leases_lost += 1
                log.warning("worker %s: lease of task %s was lost (expired or taken over); "
                            "its outcome will be refused", self.name, lease.task.id)
        return stop

    def drop(self, leases: list[HeldLease]) -> None:
        for lease in leases:
            self.held.pop(lease.task.id, None)

    def unfinished(self) -> list[HeldLease]:
        """At the end of the grace: the leases without an outcome, marked let go (no heartbeat
        from now on, a late outcome dropped)."""
        out = [lease for lease in self.held.values()
               if lease.outcome is None and not lease.let_go]  # (let go: being released)
        for lease in out:
            lease.let_go = True
        return out

    def lease_end(self, leases: list[HeldLease]) -> str:
        """When the last of these leases runs out, as far as this worker knows (for the log)."""
        last = max(lease.extended_at + lease.lease_seconds for lease in leases)
        return f"within {max(0.0, last - time.monotonic()):.0f}s"

    def letting_go(self, leases: list[HeldLease],
                   grace_seconds: float) -> tuple[list[HeldLease], list[HeldLease]]:
        """Split what is let go at shutdown into (never started, handler running), logging
        what becomes of each (:meth:`Worker._let_go`)."""
        waiting = [lease for lease in leases if lease.started_at is None]
        running = [lease for lease in leases if lease.started_at is not None]
        if running:
            log.warning("worker %s: %d task(s) still running after the grace of %gs: left to "
                        "their leases (no nack, no more heartbeats), which run out %s; the "
                        "reaper then retries them", self.name, len(running), grace_seconds,
                        self.lease_end(running))
        if waiting:
            log.info("worker %s: releasing %d task(s) not started", self.name, len(waiting))
        return waiting, running


# -- reports, as steps of the client ---------------------------------------------------------


def _ack_item(lease: HeldLease, with_result: bool = True) -> dict[str, Any]:
    item = lease.item()
    assert isinstance(lease.outcome, Ack)
    if with_result and lease.outcome.result is not None:
        item["result"] = lease.outcome.result
    return item


def _nack_item(lease: HeldLease) -> dict[str, Any]:
    outcome = lease.outcome
    assert isinstance(outcome, Nack)
    item: dict[str, Any] = {**lease.item(), "error": outcome.error}
    if outcome.retry_in_seconds is not None:
        item["retry_in_seconds"] = outcome.retry_in_seconds
    if outcome.dead:
        item["dead"] = True
    return item


def report_failed(name: str, what: str, leases: list[HeldLease], exc: Exception,
                  tally: WorkerStats) -> None:
    tally.report_failures += len(leases)
    log.error("worker %s: could not %s %d task(s) (%s); they run again once their "
              "leases expire", name, what, len(leases), exc)


def report(client: Operations, queue: str, name: str, batch: list[HeldLease],
           claim: dict[str, Any] | None = None
           ) -> Steps[tuple[WorkerStats, list[ClaimedTask]]]:
    """Ack and nack a batch of outcomes; what it counted, and the tasks ``claim`` (a claim's
    options) brought with the acks (``Client.ack_and_claim``; none without acks, or when the
    acks went apart). A report that cannot be delivered is logged (the lease then expires
    and the task runs again)."""
    tally = WorkerStats()
    acks = [lease for lease in batch if isinstance(lease.outcome, Ack)]
    nacks = [lease for lease in batch if isinstance(lease.outcome, Nack)]
    claimed: list[ClaimedTask] = []
    # (the nacks first: the acks' claim comes last, its tasks started as soon as it answers,
    # and the nacked leases' room is free for it)
    if nacks:
        try:
            result = yield from Operations.nack.steps(client, queue,
                                                      [_nack_item(n) for n in nacks])
        except TierqError as exc:
            report_failed(name, "nack", nacks, exc, tally)
        else:
            tally.retried += len(result.retried)
            tally.dead += len(result.dead)
            tally.rejected += len(result.rejected)
            _cancelled(name, "nack", result.cancelled, tally)
            for rejection in result.rejected:
                if rejection.id not in result.cancelled:
                    log.warning("worker %s: nack of task %s refused (%s)", name,
                                rejection.id, rejection.reason)
    if acks:
        claimed = yield from _send_acks(client, queue, name, acks, tally, claim=claim)
    return tally, claimed


def _send_acks(client: Operations, queue: str, name: str, acks: list[HeldLease],
               tally: WorkerStats, with_result: bool = True,
               claim: dict[str, Any] | None = None) -> Steps[list[ClaimedTask]]:
    """Ack, with ``claim`` riding along when given (the tasks it brought are returned); a
    result the API refuses (a 4xx) is sent alone, then acked without it, so one bad result
    does not hold back the others (those acks claim nothing)."""
    items = [_ack_item(a, with_result) for a in acks]
    claimed: list[ClaimedTask] = []
    try:
        if claim is None:
            result: AckResult = yield from Operations.ack.steps(client, queue, items)
        else:
            options = {k: v for k, v in claim.items() if k != "refused"}
            along = yield from Operations.ack_and_claim.steps(client, queue, items, **options)
            result, claimed = along, along.tasks
            if along.claim_error is not None:  # (the claim loop claims again)
                log.info("worker %s: the claim riding with an ack failed (%s)", name,
                         along.claim_error)
    except ApiError as exc:
        if claim is not None and 400 <= exc.status < 500 and exc.status != 429:
            # (the claim may be what was refused: an API without it, or options it does
            # not take; the acks go again without it, and the worker claims apart)
            log.warning("worker %s: an ack with a claim was refused (%s); acking without "
                        "the claim, and claiming apart from now on", name, exc)
            claim["refused"] = True
            return (yield from _send_acks(client, queue, name, acks, tally, with_result))
        if exc.status >= 500 or exc.status == 429 or not with_result:
            report_failed(name, "ack", acks, exc, tally)
        elif len(acks) > 1:
            for lease in acks:
                yield from _send_acks(client, queue, name, [lease], tally)
        else:
            log.error("worker %s: the API refused the result of task %s (%s); acking "
                      "without it", name, acks[0].task.id, exc)
            yield from _send_acks(client, queue, name, acks, tally, with_result=False)
        return []
    except TierqError as exc:
        report_failed(name, "ack", acks, exc, tally)
        return []
    tally.acked += len(result.acked)
    tally.rejected += len(result.rejected)
    _cancelled(name, "ack", result.cancelled, tally)
    for rejection in result.rejected:
        if rejection.id not in result.cancelled:
            log.warning("worker %s: ack of task %s refused (%s): its lease was lost, so it "
                        "may run again", name, rejection.id, rejection.reason)
    return claimed


def _cancelled(name: str, what: str, ids: list[UUID], tally: WorkerStats) -> None:
    """Count and log the tasks a report's answer says were cancelled while they ran (the
    handler finished before a heartbeat could tell it): nothing runs again."""
    tally.cancelled += len(ids)
    for task_id in ids:
        log.info("worker %s: %s of task %s refused: it was cancelled while it ran (nothing "
                 "runs again)", name, what, task_id)


def release(client: Operations, queue: str, name: str,
            waiting: list[HeldLease]) -> Steps[WorkerStats]:
    """Release tasks never started (back in their places, no attempt counted); what it
    counted."""
    tally = WorkerStats()
    try:
        released = yield from Operations.release.steps(client, queue,
                                                       [lease.item() for lease in waiting])
    except TierqError as exc:
        report_failed(name, "release", waiting, exc, tally)
    else:
        tally.released += len(released.released)
        tally.rejected += len(released.rejected)
    return tally


class WorkerBase:
    """The settings, the ledger and the stop request both workers have (the arguments:
    :class:`~tierq.client.worker.Worker`)."""

    def __init__(self, client: Any, queue: str, handler: Any, *,
                 concurrency: int = 4, tenant: str | None = None,
                 lease_seconds: int | None = None, wait_seconds: float = 5.0,
                 grace_seconds: float = 25.0, name: str | None = None, burst: bool = False,
                 heartbeat_fraction: float = 1 / 3, install_signal_handlers: bool = True,
                 report_linger_seconds: float = 0.01, cancel_grace_seconds: float = 5.0,
                 tracer: TaskTracer | str | None = "auto",
                 claim_with_acks: bool = True) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if not 0 < heartbeat_fraction < 1:
            raise ValueError("heartbeat_fraction must be between 0 and 1")
        if not 0 <= wait_seconds <= 20:
            raise ValueError("wait_seconds must be between 0 and 20")
        if grace_seconds < 0:
            raise ValueError("grace_seconds must be >= 0")
        if cancel_grace_seconds < 0:
            raise ValueError("cancel_grace_seconds must be >= 0")
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
        self.cancel_grace_seconds = cancel_grace_seconds
        # the acks of a report claim the slots they free (``_claim_along``)
        self.claim_with_acks = claim_with_acks
        # starts each handler's span in the task's trace (tierq.client.tracing), or None
        self.tracer: TaskTracer | None = tracing.resolve(tracer)
        self._ledger = Ledger(self.name)
        # guards the ledger: the Worker's threads share it; the AsyncWorker's stats may be
        # read from another thread
        self._cond = threading.Condition()
        self._stop_requested_at: float | None = None
        self._stopping: threading.Event | asyncio.Event
        self._abort: threading.Event | asyncio.Event
        self._started = False
        self._finished = threading.Event()

    @property
    def finished(self) -> threading.Event:
        """Set when :meth:`run` has returned (any thread may wait on it)."""
        return self._finished

    def stop(self, *, abort: bool = False) -> None:
        """Stop claiming and finish (the Worker's module docstring). ``abort``: end the grace
        now (release the tasks not started, abandon the running ones to their leases)
        instead of waiting up to ``grace_seconds``. Safe from any thread and from signal
        handlers."""
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        self._stop_now(abort)

    def _stopped(self) -> WorkerStats:
        stats = self.stats
        log.info("worker %s stopped: %s", self.name, stats.as_dict())
        return stats

    def _stop_now(self, abort: bool) -> None:
        self._stopping.set()
        if abort:
            self._abort.set()

    @property
    def stats(self) -> WorkerStats:
        """What the worker did so far (a copy)."""
        with self._cond:
            return WorkerStats(**self._ledger.stats.as_dict())

    @property
    def held(self) -> int:
        """Leases held right now (running or being reported)."""
        with self._cond:
            return len(self._ledger.held)

    def _count(self, tally: WorkerStats) -> None:
        with self._cond:
            self._ledger.stats.add(tally)

    def _starting(self) -> None:
        if self._started:
            raise RuntimeError(f"a {type(self).__name__} runs once; make a new one")
        self._started = True

    def _settled_lease(self, view: QueueView | TenantQueueView | TierqError) -> None:
        """The queue's lease read again once the first tasks came (a tenant's view shows the
        queue's settings from then on); the held tasks take it at their first heartbeat. A
        failed read is tried again after the next claim that brings tasks."""
        if isinstance(view, TierqError):
            log.warning("worker %s: could not read the queue's lease (%s); trying again",
                        self.name, view)
            return
        with self._cond:
            self._ledger.lease_seconds = view.settings.lease_seconds
            self._ledger.provisional = False
        log.info("worker %s: lease %ds (the queue's)", self.name, view.settings.lease_seconds)

    def _free(self) -> int:
        """Slots no lease holds and no claim under way may fill."""
        with self._cond:
            return self.concurrency - len(self._ledger.held) - self._ledger.claiming

    def _claim_options(self) -> dict[str, Any] | None:
        """The arguments of a claim for the free slots (``_free``, counted and reserved at
        once: the reporter's claims reserve too), with the current lease; those slots are
        the claim's until ``_claimed`` or ``_unclaimed``. None when no slot is free."""
        with self._cond:
            n = min(MAX_CLAIM, self.concurrency - len(self._ledger.held)
                    - self._ledger.claiming)
            if n <= 0:
                return None
            self._ledger.claiming += n
            lease_seconds = self._ledger.lease_seconds
        return {"max": n, "lease_seconds": lease_seconds, "tenant": self.tenant,
                "worker": self.name, "wait_seconds": self.wait_seconds}

    def _unclaimed(self, options: dict[str, Any]) -> None:
        """A claim for these options failed: its slots are free again."""
        with self._cond:
            self._ledger.claiming -= options["max"]
            self._dropped()

    def _claim_along(self, batch: list[HeldLease]) -> dict[str, Any] | None:
        """The claim to send with a report's acks (``Client.ack_and_claim``), for the slots
        its leases free and those free now that no claim under way may fill; None when the
        worker is stopping, the batch has no ack, no slot is left or ``claim_with_acks`` is
        off. Its slots are the claim's until ``_reported`` takes what it brought."""
        if not self.claim_with_acks or self._stopping.is_set() \
                or not any(isinstance(lease.outcome, Ack) for lease in batch):
            return None
        with self._cond:
            lease_seconds = self._ledger.lease_seconds
            n = min(MAX_CLAIM, self.concurrency - len(self._ledger.held) + len(batch)
                    - self._ledger.claiming)
            if n <= 0 or lease_seconds is None:
                return None
            self._ledger.claiming += n
        return {"max": n, "lease_seconds": lease_seconds, "tenant": self.tenant,
                "worker": self.name}

    def _claim_failed(self, exc: TierqError, failures: int) -> float:
        """Count a failed claim, the ``failures``-th in a row; how long to wait before the
        next. An invalid claim (:func:`is_configuration_error`) is raised."""
        if is_configuration_error(exc):
            raise exc
        self._count(WorkerStats(claim_failures=1))
        pause = claim_pause(failures)
        log.warning("worker %s: claim failed (%s); trying again in %.1fs", self.name, exc,
                    pause)
        return pause

    def _claimed(self, tasks: list[ClaimedTask], options: dict[str, Any],
                 late: bool) -> tuple[list[HeldLease], bool]:
        """Hold what a claim brought (let go at once when ``late``: the stop came while it
        was under way); returns the leases and whether the worker is done (``burst`` and
        nothing held or brought)."""
        with self._cond:
            self._ledger.claiming -= options["max"]
            held = self._ledger.take(tasks, options["lease_seconds"], late=late,
                                     progress_to=self._progress)
            empty = not self._ledger.held
        done = self.burst and not tasks and empty
        if done:
            log.info("worker %s: queue %r is empty (burst mode)", self.name, self.queue)
        return held, done

    def _progress(self, lease: HeldLease, value: Any) -> None:
        """What a handler reported (``WorkerTask.set_progress``): sent with the lease's next
        heartbeat, the last value set winning; from any thread."""
        with self._cond:
            lease.progress = (value,)

    def _lease_resolved(self, view: QueueView | TenantQueueView | None) -> int:
        """Keep the lease to claim with: ``lease_seconds`` if given, else the queue's view's
        (:func:`lease_of`; None: an admin's 404)."""
        if self.lease_seconds is not None:
            seconds, provisional = self.lease_seconds, False
        else:
            seconds, provisional = lease_of(view)
        with self._cond:
            self._ledger.lease_seconds, self._ledger.provisional = seconds, provisional
        log.info("worker %s: queue %r, concurrency %d, lease %ds", self.name, self.queue,
                 self.concurrency, seconds)
        return seconds

    def _grace_left(self) -> float:
        """How long to wait more for the running tasks at a stop, at most 0.1 s at a time
        (0: nothing is held, the grace is over, or a second stop ended it). Called under the
        lock."""
        if not self._ledger.held or self._abort.is_set():
            return 0.0
        deadline = (self._stop_requested_at or time.monotonic()) + self.grace_seconds
        return max(0.0, min(deadline - time.monotonic(), 0.1))

    def _tick(self) -> float:
        with self._cond:
            return self._ledger.tick(self.heartbeat_fraction)

    def _dropped(self) -> None:
        """Leases were let go or reported (called under the lock): wake what waits for a
        free slot or for the last lease."""
        self._cond.notify_all()

    # Each worker walks these steps with its own client: the lock is held between steps,
    # never across one.

    def _beat(self) -> Steps[None]:
        """Extend each held lease once ``heartbeat_fraction`` of it has passed, by the current
        lease, all the leases due in one request. A lease let go at shutdown, or lost, is
        never extended again."""
        with self._cond:
            due = self._ledger.due(self.heartbeat_fraction)
            lease_seconds = self._ledger.lease_seconds
            items = self._ledger.heartbeat_items(due)
        if not due or lease_seconds is None:
            return
        sent_at = time.monotonic()
        try:
            result = yield from Operations.heartbeat.steps(self.client, self.queue, items)
        except TierqError as exc:
            log.warning("worker %s: heartbeat failed (%s); trying again", self.name, exc)
            with self._cond:
                self._ledger.unsent(due, items)
            return
        with self._cond:
            stop = self._ledger.extended(due, result, sent_at, lease_seconds)
        self._signal(stop)

    def _check_limits(self) -> None:
        """Tell the handlers whose attempt reached its time limit to stop."""
        with self._cond:
            stop = self._ledger.past_limit()
        self._signal(stop)

    def _signal(self, leases: list[HeldLease]) -> None:
        """Set ``task.cancelled`` of these leases (marked stopped by the ledger). Called
        where the tasks' events may be set (the AsyncWorker's loop)."""
        for lease in leases:
            assert lease.stopped is not None
            lease.task.signal_stop(lease.stopped)

    def _reported(self, batch: list[HeldLease]) -> Steps[list[HeldLease]]:
        """Report a batch of outcomes (:func:`report`), its acks claiming the slots they
        free (``_claim_along``), then let go of their leases; returns the leases of the
        tasks the claim brought, for the worker to start. Brought once a stop came, they
        are released at once, never started."""
        claim = self._claim_along(batch)
        try:
            tally, tasks = yield from report(self.client, self.queue, self.name, batch, claim)
        except BaseException:
            if claim is not None:
                self._unclaimed(claim)
            raise
        if claim is not None and claim.get("refused"):
            self.claim_with_acks = False
        with self._cond:
            # (read under the lock: a stop's ``unfinished`` either sees these leases or
            # comes after they were taken as let go)
            late = self._stopping.is_set()
            self._ledger.stats.add(tally)
            self._ledger.drop(batch)
            held: list[HeldLease] = []
            if claim is not None:
                self._ledger.claiming -= claim["max"]
                held = self._ledger.take(tasks, claim["lease_seconds"], late=late,
                                         progress_to=self._progress)
            self._dropped()
        if late and held:
            yield from self._released(held)
            return []
        return held

    def _released(self, leases: list[HeldLease]) -> Steps[list[HeldLease]]:
        """Let go of what is unfinished at shutdown (``let_go`` already set on each): release
        the tasks never started, abandon the running ones to their leases; returns these."""
        waiting, running = self._ledger.letting_go(leases, self.grace_seconds)
        if waiting:
            self._count((yield from release(self.client, self.queue, self.name, waiting)))
        with self._cond:
            self._ledger.stats.abandoned += len(running)
            self._ledger.drop(leases)
            self._dropped()
        return running
