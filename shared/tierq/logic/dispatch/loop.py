"""The dispatcher's loop: claims batches of one tenant's tasks for every queue with a
consumer, invokes the function and settles the outcome (:class:`Dispatcher`; the rules are in
:mod:`tierq.logic.dispatch`)."""

from __future__ import annotations

import bisect
import logging
import math
import random
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tierq.errors import DatabaseTimedOut, WarmTierFull, WarmTierUnavailable
from tierq.logic import claim_isolation, limits, ready_tenants
from tierq.logic.claim import claim_once
from tierq.logic.context import Context, to_ms
from tierq.logic.dispatch.counters import DispatchCounts, record_counts, saved_turn
from tierq.logic.dispatch.events import claim_budget, claimed_cost, in_group_order, sqs_event
from tierq.logic.dispatch.invocation import (
    Consumer,
    ConsumerFunctions,
    Invocation,
    InvocationSlots,
)
from tierq.logic.dispatch.settle import release_tasks, settle
from tierq.logic.dispatch.shares import queue_shares, tenant_share
from tierq.models.leases import ClaimedTask, ClaimRequest

# one logger for the whole dispatcher (its package's name)
log = logging.getLogger("tierq.logic.dispatch")

# A queue that had nothing is looked at again after POLL_FIRST, doubling up to the
# dispatcher's tick (TIERQ_DISPATCHER_EVERY); one whose batch got tasks at once.
POLL_FIRST = 0.02
THROTTLE_FIRST, THROTTLE_MAX = 0.2, 10.0
REFUSED_BACKOFF = 30.0  # not invoked (no such function, access denied): look again later
FAILED_BACKOFF = 1.0  # claiming failed (a store error)
CONSUMERS_EVERY = 1.0  # the list of queues with a consumer is read at most this often
WINDOW_POLL = 0.02  # re-claim while a batching window is open
# The lease holder a dispatched task's view and the running list show (to its tenant too):
# never the function's name, which may be its ARN (with the account id).
DISPATCHER_WORKER = "dispatcher"
# What of a failed invocation's message the dispatcher's log line keeps.
LOG_DETAIL_CHARS = 4096


@dataclass
class QueueState:
    """What the dispatcher keeps of a queue between batches (changed under its lock)."""

    in_flight: int = 0
    not_before: float = 0.0  # time.monotonic(): claim no batch before
    poll_delay: float = POLL_FIRST
    throttle_delay: float = THROTTLE_FIRST
    # how many batches of the queue may run at once now (below its free slots): one more
    # after each claim that got tasks while more is likely ready, half after an empty one
    width: int = 1
    fed: int = 0  # batches running now that got tasks
    fed_claims: int = 0  # claims that got tasks so far (an empty batch compares)
    # the tenant whose turn came last (round robin by name)
    last_tenant: str | None = None
    resumed: bool = False  # the turn saved in Valkey was read (once per dispatcher)
    # the queue's share of the dispatcher's threads, set by each pass that may start its
    # batches (0: not set yet, all of them)
    share: int = 0
    # this dispatcher's batches claiming or holding each tenant's tasks (no zero entries)
    running: dict[str, int] = field(default_factory=dict)


# How long a consumer function's timeout is trusted before it is read again: a raised
# timeout lengthens the leases of batches started after this (until then a batch that runs
# past the old timeout could be handed out again). One control-plane call per function
# per dispatcher and minute stays far below Lambda's API limits.
FUNCTION_TIMEOUT_CACHE_SECONDS = 60.0

CountsSink = Callable[[str, Mapping[str, int]], None]


@dataclass
class Dispatcher:
    """Claims and invokes for every queue with a consumer; its invocations run on a pool of
    ``max_in_flight`` threads and outlive a pass (:meth:`run`), so a pass that ends does not
    wait for them (:meth:`drain` does)."""

    ctx: Context
    functions: ConsumerFunctions
    max_in_flight: int = 64
    poll_max: float = 1.0
    sink: CountsSink | None = None  # per-queue metrics (EMF on AWS)
    # set by the invocation that runs the dispatcher: no batch starts after start_until or
    # whose lease would end after finish_by (time.monotonic(); inf: no limit)
    start_until: float = math.inf
    finish_by: float = math.inf
    # set by the invocation too: true once it must stop taking batches (its platform is
    # stopping it: the local stack's shutdown)
    stop_when: Callable[[], bool] | None = None
    totals: DispatchCounts = field(default_factory=DispatchCounts)
    last_busy: float = field(default_factory=time.monotonic)
    _states: dict[str, QueueState] = field(default_factory=dict)
    _consumers: list[str] = field(default_factory=list)
    _consumers_at: float = -math.inf
    _timeouts: dict[str, tuple[float, float]] = field(default_factory=dict)
    # queues whose batch lease is longer than this dispatcher's whole time (from
    # ``began`` to ``finish_by``): never dispatched by it, said once each
    began: float = field(default_factory=time.monotonic)
    unfit: set[str] = field(default_factory=set)
    _in_flight: int = 0
    _rotation: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _pool: ThreadPoolExecutor | None = None
    _slots: InvocationSlots | None = None

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="tierq-dispatch")
        self._slots = InvocationSlots(self.ctx)

    # -- what to dispatch ------------------------------------------------------------------

    def consumer_queues(self) -> list[str]:
        now = time.monotonic()
        if now - self._consumers_at >= CONSUMERS_EVERY:
            self._consumers = self.ctx.store.consumer_queues()
            self._consumers_at = now
        return self._consumers

    def _timeout_of(self, function: str) -> float:
        cached = self._timeouts.get(function)
        now = time.monotonic()
        if cached is None or now - cached[1] > FUNCTION_TIMEOUT_CACHE_SECONDS:
            cached = (float(self.functions.timeout_seconds(function)), now)
            self._timeouts[function] = cached
        return cached[0]

    def consumer(self, queue: str) -> Consumer | None:
        settings = self.ctx.queue_settings.get(queue)
        found = getattr(settings, "consumer", None)
        if found is None or settings.paused:
            return None
        return Consumer(queue=queue, function=found.function, batch_size=found.batch_size,
                        max_concurrency=found.max_concurrency,
                        window_ms=found.max_batching_window_ms,
                        timeout=self._timeout_of(found.function))

    # -- a pass ----------------------------------------------------------------------------

    def run(self, *, until: float, idle_seconds: float,
            should_stop: Callable[[], bool] | None = None) -> tuple[DispatchCounts, bool]:
        """Start batches until ``until`` (``time.monotonic()``, and never past
        ``start_until``), each only if its lease ends before ``finish_by``; stop early once
        nothing was claimed and nothing ran for ``idle_seconds`` (counted across passes).
        Returns what the batches that finished meanwhile did, and whether it ended idle."""
        before = self.counts()
        until = min(until, self.start_until)
        idle = False
        while True:
            now = time.monotonic()
            if now >= until or (should_stop is not None and should_stop()) \
                    or (self.stop_when is not None and self.stop_when()):
                break
            started, wake_at = self._start(now, self.finish_by)
            with self._changed:
                busy = started > 0 or self._in_flight > 0
            if busy:
                self.last_busy = now
            elif now - self.last_busy >= idle_seconds:
                idle = True
                break
            if not started:
                pause = min(max(0.0, wake_at - time.monotonic()), self.poll_max,
                            max(0.0, until - time.monotonic()),
                            max(0.0, self.last_busy + idle_seconds - time.monotonic()))
                with self._changed:
                    self._changed.wait(max(pause, 0.001))
        return self.counts().minus(before), idle

    def has_ready_work(self) -> bool:
        """Whether a queue with a consumer has ready tasks now that this dispatcher could
        take (the last look before a dispatcher that released its flag ends)."""
        now = time.monotonic()
        for queue in self.consumer_queues():
            consumer = self.consumer(queue)
            if consumer is None or now + consumer.lease_seconds() > self.finish_by:
                continue  # (nothing this dispatcher could take)
            window, registered = ready_tenants.window(self.ctx, queue, None,
                                                      ready_tenants.DISPATCH_WINDOW)
            if registered:  # (mostly idle; those of a master set aside are not asked)
                window = claim_isolation.usable(self.ctx, queue, window)
            # (a full window of the index may have more after it: taken as work, a batch
            # tells)
            if (len(window) == ready_tenants.DISPATCH_WINDOW and not registered) \
                    or any(self.ctx.warm.ready_counts(queue, window)):
                return True
        return False

    def in_flight(self) -> int:
        with self._changed:
            return self._in_flight

    def drain(self, timeout: float | None = None) -> bool:
        """Wait for the running batches; whether all ended within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def close(self) -> None:
        self.drain()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def counts(self) -> DispatchCounts:
        """What every batch that finished so far did."""
        with self._changed:
            copy = DispatchCounts()
            copy.add(self.totals)
            return copy

    def _start(self, now: float, finish_by: float) -> tuple[int, float]:
        """Start what may start now; how many batches, and when to look again."""
        queues = self.consumer_queues()
        started = 0
        wake_at = now + self.poll_max
        if not queues:
            return 0, wake_at
        self._rotation = (self._rotation + 1) % len(queues)
        due: list[tuple[Consumer, QueueState, int]] = []
        for queue in queues[self._rotation:] + queues[:self._rotation]:
            state = self._states.setdefault(queue, QueueState())
            if now < state.not_before:
                wake_at = min(wake_at, state.not_before)
                continue
            consumer = self.consumer(queue)
            if consumer is None:
                continue
            lease = consumer.lease_seconds()
            if now + lease > finish_by:
                if self.began + lease > finish_by:
                    self._say_unfit(consumer, lease, finish_by)
                continue  # its invoke could outlive this dispatcher
            due.append((consumer, state, lease))
        shares = self._shares(due)
        for consumer, state, lease in due:
            cap = self._cap(consumer)
            with self._changed:
                state.share = shares[consumer.queue]
                room = min(min(cap, state.share) - state.in_flight,
                           self.max_in_flight - self._in_flight)
                want = min(room, state.width - state.in_flight)  # (see _fed)
                if want <= 0:
                    continue
                state.in_flight += want
                self._in_flight += want
            assert self._pool is not None
            for _ in range(want):
                self._pool.submit(self._batch, consumer, state, lease)
            started += want
        return started, wake_at

    def _shares(self, due: Sequence[tuple[Consumer, QueueState, int]]) -> dict[str, int]:
        """Each queue's share of the threads (:func:`queue_shares`) among the queues with
        batches running and those due to start some: a due queue would use as many as its
        width (at most its cap), a queue not due those it runs."""
        with self._changed:
            demands = {queue: state.in_flight for queue, state in self._states.items()
                       if state.in_flight > 0}
            for consumer, state, _ in due:
                demands[consumer.queue] = min(self._cap(consumer),
                                              max(state.in_flight, state.width))
        return queue_shares(self.max_in_flight, demands)

    def _say_unfit(self, consumer: Consumer, lease: int, finish_by: float) -> None:
        """A queue this dispatcher can never serve: a configuration error, not a wait."""
        if consumer.queue in self.unfit:
            return
        self.unfit.add(consumer.queue)
        log.warning(
            "queue %s is not dispatched: a batch of its consumer %s needs a lease of %d s "
            "(the function's timeout %g s, its batching window and margins), longer than "
            "the dispatcher's %d s; lower the function's timeout or raise the dispatcher's",
            consumer.queue, consumer.function, lease, consumer.timeout,
            int(finish_by - self.began))

    def dispatch_once(self, queue: str) -> DispatchCounts:
        """One batch of ``queue`` now (of the next tenant in turn), in this thread: claim,
        invoke, settle. What it did (nothing when the queue has no consumer, is paused or
        has nothing ready)."""
        consumer = self.consumer(queue)
        if consumer is None:
            return DispatchCounts()
        state = self._states.setdefault(queue, QueueState())
        before = self.counts()
        with self._changed:
            state.in_flight += 1
            self._in_flight += 1
        self._batch(consumer, state, consumer.lease_seconds())
        return self.counts().minus(before)

    # -- one batch (on a pool thread) ------------------------------------------------------

    def _cap(self, consumer: Consumer) -> int:
        return consumer.max_concurrency or self.max_in_flight

    def _batch(self, consumer: Consumer, state: QueueState, lease: int) -> None:
        counts = DispatchCounts()
        slot: limits.Held | None = None
        tasks: list[ClaimedTask] = []
        invoked = fed = counted = False
        tenant = ""  # whose tasks the batch got (entered in state.running by _claim_window)
        with self._changed:
            fed_claims = state.fed_claims
        try:
            if consumer.max_concurrency is not None:
                assert self._slots is not None
                slot = self._slots.acquire(consumer.queue, consumer.max_concurrency, lease)
                if slot is None:  # every slot is taken (by other dispatchers too)
                    self._later(state, POLL_FIRST * 5)
                    return
            tasks, listed = self._claim(consumer, state, lease)
            if not tasks:
                self._found_nothing(state, fed_claims)
                return
            fed = True
            tenant = tasks[0].tenant
            tasks = in_group_order(tasks)  # each group's records in order, as SQS FIFO's
            delivered_ms = to_ms(self.ctx.now())
            event, fit = sqs_event(tasks, delivered_ms=delivered_ms,
                                   region=self.functions.region,
                                   account=self.functions.account)
            # more is likely ready: this tenant filled its batch (or gives its tail back),
            # or other tenants are listed with ready work
            self._fed(consumer, state, more=len(tasks) >= consumer.batch_size
                      or fit < len(tasks) or listed > 1)
            counted = True  # (state.fed: given back below only once taken)
            if fit < len(tasks):  # larger than an invoke may carry: the tail goes back
                release_tasks(self.ctx, consumer.queue, tasks[fit:], counts)
                tasks = tasks[:fit]
            invoked = True
            logged = False
            try:
                invocation = self.functions.invoke(consumer.function, event,
                                                   read_timeout=consumer.read_timeout)
            except Exception as exc:  # whether the function ran is unknown: an attempt
                log.warning("invoking %s for queue %r, tenant %r raised; whether it ran is "
                            "unknown", consumer.function, consumer.queue, tasks[0].tenant,
                            exc_info=True, extra=self._fields(consumer, tasks[0].tenant))
                logged = True
                invocation = Invocation("failed", error=type(exc).__name__,
                                        detail="".join(traceback.format_exception(exc)))
            if not logged:
                self._log_outcome(consumer, tasks[0].tenant, invocation)
            counts.batches += 1
            counts.add(settle(self.ctx, consumer, tasks, invocation))
            self._after(consumer, state, invocation)
        except Exception:
            log.exception("dispatching a batch of %r to %s failed", consumer.queue,
                          consumer.function)
            if tasks and not invoked:
                # the function never saw them: back to their places, no attempt counted.
                # (Once invoked, an unsettled batch's leases expire and the reaper counts
                # the attempt: the function may have run.)
                try:
                    release_tasks(self.ctx, consumer.queue, tasks, counts)
                except Exception:
                    log.warning("giving back an unsent batch of %r failed; its leases "
                                "expire", consumer.queue, exc_info=True)
            self._later(state, FAILED_BACKOFF, narrow=True)
        finally:
            if slot is not None:
                assert self._slots is not None
                try:
                    self._slots.release(slot)
                except Exception:
                    log.warning("giving back an invocation slot of %r failed; it frees itself "
                                "at its deadline", consumer.queue, exc_info=True)
            with self._changed:
                state.in_flight -= 1
                self._in_flight -= 1
                if counted:
                    state.fed -= 1
                if fed:
                    self._leave(state, tenant)
                self.totals.add(counts)
                self._changed.notify_all()
            try:
                record_counts(self.ctx, consumer.queue, counts,
                              turn=tasks[0].tenant if fed and tasks else None)
            except Exception:
                log.warning("recording dispatch counters of %r failed", consumer.queue,
                            exc_info=True)
            if self.sink is not None and any(counts.metrics().values()):
                try:
                    self.sink(consumer.queue, counts.metrics())
                except Exception:
                    log.warning("emitting dispatch metrics failed", exc_info=True)

    def _fed(self, consumer: Consumer, state: QueueState, *, more: bool) -> None:
        """A claim got tasks. While more is likely ready, the queue may run one more batch
        at once (so the pass starts one now): concurrency follows the batches that find
        work, never the length of the tenants' list. A short batch with no other tenant
        listed drained the queue: one batch at a time again."""
        with self._changed:
            state.fed += 1
            state.fed_claims += 1
            state.poll_delay = POLL_FIRST
            if more:
                state.width = min(state.width + 1, self._cap(consumer))
                self._changed.notify_all()
            else:
                state.width = 1

    def _found_nothing(self, state: QueueState, fed_claims: int) -> None:
        """A batch found no tasks (every listed tenant passed its turn). The queue runs half
        as many batches at once; it backs off (the poll delay doubling) only when no other
        batch of it holds tasks or got some since this one started: a probe for more work
        that found none says the queue needs no more batches, not that it is idle."""
        with self._changed:
            state.width = max(1, state.width // 2)
            busy = state.fed > 0 or state.fed_claims != fed_claims
            if busy:
                return
            delay = state.poll_delay
            state.poll_delay = min(state.poll_delay * 2, self.poll_max)
        self._later(state, delay)

    def _claim(self, consumer: Consumer, state: QueueState,
               lease: int) -> tuple[list[ClaimedTask], int]:
        """A batch of one tenant's tasks: the next tenant in turn with ready work. A tenant
        passes its turn on when it has nothing to claim (the list may lag, the tenant may
        be at its own limits), when its cold work finds no room warm (``WarmTierFull``) and
        when its pair fails (``WarmTierUnavailable``: its master does not answer;
        ``DatabaseTimedOut``): each listed tenant is tried once at most, and the tenants of a
        master that failed are passed over for the rest of the batch without a call. The
        batch fails (its error raised) only when every listed tenant failed; PostgreSQL not
        answering (``Unavailable``) fails it at once, as every tenant needs it. A tenant
        that holds its share of the queue's running invocations passes its turn too, unless
        no tenant under its share gives tasks (:meth:`_claim_window`, :meth:`_enter`).
        Returns the tasks, and how many tenants were listed (more is likely ready when
        others were); the tenant of the tasks stays entered in ``state.running`` until the
        batch ends."""
        queue = consumer.queue
        self._resume_turn(queue, state)
        with self._changed:
            after = state.last_tenant
        listed, registered = ready_tenants.window(self.ctx, queue, after,
                                                  ready_tenants.DISPATCH_WINDOW)
        if registered:  # (the tenants of a master set aside are not asked)
            listed = claim_isolation.usable(self.ctx, queue, listed)
        tenants = sorted(set(listed))
        empty: list[str] = []
        try:
            return self._claim_window(consumer, state, lease, tenants, empty)
        finally:
            # best-effort: the tasks got must still reach their batch, which uncounts their
            # tenant (state.running) when it ends
            try:
                ready_tenants.forget(self.ctx, queue, empty)
            except Exception:
                log.warning("taking tenants of %r out of its ready-tenant index failed",
                            queue, exc_info=True)

    def _claim_window(self, consumer: Consumer, state: QueueState, lease: int,
                      tenants: Sequence[str], empty: list[str],
                      ) -> tuple[list[ClaimedTask], int]:
        """``_claim`` over a window of tenants; the tenants found without ready work are
        added to ``empty``. The tenants under their share are tried first, in turn; only
        when none of them gives tasks are those that hold their share tried (in the same
        order), so a share binds while another tenant gets work and does not leave a slot
        idle: a tenant whose batch still runs with nothing more ready, or one that cannot
        claim (warm tier full, master down, at its own limits), lends its part to the
        others."""
        queue = consumer.queue
        failures = 0
        failure: Exception | None = None
        down: set[str] = set()  # masters that failed in this batch ("": a single server)

        def attempt(tenant: str, *, over_share: bool) -> list[ClaimedTask] | None:
            """The tenant's tasks ([] when it had none, failed or is passed over); None
            when it holds its share and ``over_share`` is off. A tenant with tasks stays
            counted in ``state.running`` until its batch ends."""
            nonlocal failures, failure
            if down and self.ctx.warm.master_of(queue, tenant) in down:
                failures += 1
                return []
            if not self._enter(consumer, state, tenant, tenants, over_share=over_share):
                return None  # it holds its share while others may have work
            tasks: list[ClaimedTask] = []
            try:
                tasks = self._claim_tenant(consumer, tenant, lease, empty)
            except WarmTierFull:  # its cold work finds no room warm: the others go on
                log.info("queue %r, tenant %r: the warm tier is full; its turn passes",
                         queue, tenant, extra=self._fields(consumer, tenant))
            except (WarmTierUnavailable, DatabaseTimedOut) as exc:
                failures += 1
                failure = exc
                master = self.ctx.warm.master_of(queue, tenant) \
                    if isinstance(exc, WarmTierUnavailable) else None
                if master is not None:
                    down.add(master)
                log.warning("queue %r, tenant %r: claiming failed (%s); its turn passes: %s",
                            queue, tenant, exc.message, exc.detail or "",
                            extra=self._fields(consumer, tenant))
            finally:
                if not tasks:
                    with self._changed:
                        self._leave(state, tenant)
            return tasks

        at_share: list[str] = []
        for _ in range(len(tenants)):
            tenant = self._next_tenant(state, tenants)
            tasks = attempt(tenant, over_share=False)
            if tasks is None:
                at_share.append(tenant)
            elif tasks:
                return tasks, len(tenants)
        for tenant in at_share:  # none under its share had work: the slot is not left idle
            tasks = attempt(tenant, over_share=True)
            if tasks:
                return tasks, len(tenants)
        if failure is not None and failures == len(tenants):
            raise failure
        return [], len(tenants)

    def _enter(self, consumer: Consumer, state: QueueState, tenant: str,
               listed: Sequence[str], *, over_share: bool = False) -> bool:
        """Count a batch for ``tenant`` before it claims, unless the tenant holds its share
        already (and ``over_share`` is off: no tenant under its share had work): the
        queue's limit (its ``max_concurrency`` and its share of the threads) split among
        the tenants listed with ready work and those with batches running
        (:func:`tenant_share`). Checked and counted under the lock, so concurrent batches
        of this dispatcher take a tenant past its share only when the others had none."""
        with self._changed:
            limit = min(self._cap(consumer), state.share or self.max_in_flight)
            tenants = len(set(listed).union(state.running))
            held = state.running.get(tenant, 0)
            if not over_share and held >= tenant_share(limit, tenants):
                return False
            state.running[tenant] = held + 1
            return True

    @staticmethod
    def _leave(state: QueueState, tenant: str) -> None:
        """Uncount a batch of ``tenant`` (:meth:`_enter`; under the lock)."""
        held = state.running.get(tenant, 0) - 1
        if held > 0:
            state.running[tenant] = held
        else:
            state.running.pop(tenant, None)

    def _resume_turn(self, queue: str, state: QueueState) -> None:
        """Once per queue and dispatcher: resume the turns after the tenant the queue's last
        batch served (kept in Valkey by :func:`record_counts`), so a new dispatcher — a
        fresh Lambda environment, a restart — does not start again at the first name."""
        with self._changed:
            if state.resumed:
                return
            state.resumed = True
        try:
            saved = saved_turn(self.ctx, queue)
        except Exception:
            log.warning("reading the turn of %r failed; its turns start at the first tenant",
                        queue, exc_info=True)
            return
        if saved is not None:
            with self._changed:
                if state.last_tenant is None:
                    state.last_tenant = saved

    def _next_tenant(self, state: QueueState, tenants: Sequence[str]) -> str:
        """The tenant after the one whose turn came last, by name (``tenants`` sorted), so
        the turn goes round whatever the list gained or lost meanwhile. The turn moves on
        before the claim, so concurrent batches of a queue take successive tenants."""
        with self._changed:
            after = state.last_tenant
            i = 0 if after is None else bisect.bisect_right(tenants, after)
            tenant = tenants[i % len(tenants)]
            state.last_tenant = tenant
        return tenant

    def _claim_tenant(self, consumer: Consumer, tenant: str,
                      lease: int, empty: list[str] | None = None) -> list[ClaimedTask]:
        """Up to ``batch_size`` of ``tenant``'s tasks, waiting up to the batching window for
        a full batch once the first task is claimed (as Lambda's SQS poller: with nothing
        ready there is no batch to wait for, and an idle queue must let its dispatcher go
        idle). A claim that fails during the window ends it: the batch is what was had.
        ``empty``: the tenant is added when its pair has no ready work at all."""
        request = ClaimRequest(max=consumer.batch_size, lease_seconds=lease,
                               worker=DISPATCHER_WORKER, tenant=tenant)
        budget = claim_budget(consumer.batch_size)
        tasks = claim_once(self.ctx, consumer.queue, request, max_bytes=budget, empty=empty)
        if not tasks or not consumer.window_ms or len(tasks) >= consumer.batch_size:
            return tasks
        window_ends = time.monotonic() + consumer.window_ms / 1000
        used = sum(claimed_cost(t) for t in tasks)
        while len(tasks) < consumer.batch_size and used < budget:
            left = window_ends - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(WINDOW_POLL, left))
            try:
                more = claim_once(self.ctx, consumer.queue,
                                  request.model_copy(update={"max": consumer.batch_size
                                                             - len(tasks)}),
                                  max_bytes=max(1, budget - used))
            except Exception:
                log.warning("claiming more of %r for %r's batch failed; sending what it has",
                            consumer.queue, tenant, exc_info=True)
                break
            tasks.extend(more)
            used += sum(claimed_cost(t) for t in more)
        return tasks

    def _later(self, state: QueueState, delay: float, *, narrow: bool = False) -> None:
        """No batch of the queue before ``delay`` from now; ``narrow``: then one at a time."""
        with self._changed:
            state.not_before = time.monotonic() + delay
            if narrow:
                state.width = 1

    @staticmethod
    def _fields(consumer: Consumer, tenant: str) -> dict[str, str]:
        """The structured fields of a log line about one batch (Powertools' logger keeps
        them as keys of its JSON line)."""
        return {"queue": consumer.queue, "tenant": tenant, "function": consumer.function}

    def _log_outcome(self, consumer: Consumer, tenant: str, invocation: Invocation) -> None:
        """The operator's log of an invocation that failed, with its message
        (``Invocation.detail``: the function's error message, the AWS SDK's), which is
        never stored on the tasks."""
        detail = invocation.detail or invocation.error
        if len(detail) > LOG_DETAIL_CHARS:
            detail = detail[:LOG_DETAIL_CHARS] + f"… ({len(detail)} characters)"
        fields = self._fields(consumer, tenant)
        if invocation.outcome == "function_error":
            log.warning("%s failed on a batch of queue %r, tenant %r (%s): %s",
                        consumer.function, consumer.queue, tenant, invocation.error, detail,
                        extra=fields)
        elif invocation.outcome == "failed":
            log.warning("invoking %s for a batch of queue %r, tenant %r failed, whether it ran "
                        "is unknown (%s): %s", consumer.function, consumer.queue, tenant,
                        invocation.error, detail, extra=fields)
        elif invocation.outcome == "not_invoked":
            log.error("%s could not be invoked for queue %r (%s): %s", consumer.function,
                      consumer.queue, invocation.error, detail, extra=fields)
        elif invocation.outcome == "throttled":
            log.info("%s was throttled for queue %r: %s", consumer.function, consumer.queue,
                     detail, extra=fields)

    def _after(self, consumer: Consumer, state: QueueState, invocation: Invocation) -> None:
        if invocation.outcome == "throttled":
            # back off with jitter, as Lambda's own pollers do when a function is throttled
            delay = state.throttle_delay * (0.5 + random.random())
            state.throttle_delay = min(state.throttle_delay * 2, THROTTLE_MAX)
            self._later(state, delay)
        elif invocation.outcome == "not_invoked":
            self._later(state, REFUSED_BACKOFF, narrow=True)
        else:
            state.throttle_delay = THROTTLE_FIRST
