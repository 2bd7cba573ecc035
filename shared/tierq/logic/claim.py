"""Claim: pop ready tasks in order from the warm tier and lease them, with no Postgres round
trip on the warm path. Without a tenant, claims rotate fairly across the queue's tenants.
While cold work waits, a claim that leaves the warm set below its low-water mark refills it
inline (at most every LOW_WATER_EVERY seconds per process), so that the other claimers keep
finding work; one that finds it dry refills at once and takes what it still wants.

A claim never holds leases it will not answer with: a byte budget (``max_bytes``) sizes the
tasks as the response will carry them, and the warm tier puts back what is past it; a claim
that fails after it popped tasks gives them back through the release path before the error
goes up; and with a time limit (the Lambda function's and the HTTP API's), it stops polling,
refilling and popping early enough to answer in time."""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

import orjson

from tierq.core.ids import new_token_prefix
from tierq.core.sizing import body_cost
from tierq.dal.warm_tier import Claimed, QueueTake
from tierq.errors import WarmTierFull
from tierq.logic import leases, limits, ready_tenants, tiering
from tierq.logic.context import Context, from_ms, to_ms
from tierq.models.leases import CLAIMED_TASKS, ClaimedTask, ClaimRequest, ReleaseItem
from tierq.models.queues import RateLimit

log = logging.getLogger(__name__)

POLL_FIRST_SLEEP = 0.05
POLL_MAX_SLEEP = 0.5
# a claim that finds the warm set dry promotes one batch and returns (the other claimers are
# not held up for long); the scheduled cold_to_warm fills the rest of the room
INLINE_REFILL = 2000
# refill before the warm set runs dry: below a quarter of warm_max (at most 1000 tasks)
LOW_WATER_FRACTION = 4
LOW_WATER_EVERY = 0.05
LOW_WATER_REFILL = 500  # small: the claim that tops up returns soon


# A claim with a time limit (``answer_by``: the platform's cut-off less the time its caller
# needs to turn the tasks into the response and send it, see aws/http/routes/claims.py) pops
# nothing at or after it, and starts an inline refill only while the refill can end before
# it: a refill may wait the pool timeout (TIERQ_DB_POOL_TIMEOUT) for a connection, then run
# its statements — REFILL_WORK_ALLOWANCE (seconds) for one promotion batch, whose row locks
# it waits for 200 ms at most, and its pushes; while the claim holds popped tasks, the
# statement timeout instead (TIERQ_STATEMENT_TIMEOUT_MS), which PostgreSQL enforces. A
# refill skipped so is done by the scheduled cold -> warm mover.
REFILL_WORK_ALLOWANCE = 2.0
# the longest queue or tenant name (models.names.NAME_PATTERN)
LONGEST_NAME = 64


def low_water(warm_max: int) -> int:
    return min(INLINE_REFILL // 2, warm_max // LOW_WATER_FRACTION)


def _task_fields_cost() -> int:
    """What a claimed task costs in a response beyond its blob's JSON text (which holds its
    payload and key, lua/claim.lua): the other fields at their longest (names of 64
    characters, a lease token with 20-digit numbers, 40-character timestamps, 20-digit
    numbers), as the runtime sends them (body_cost), and the comma between two tasks."""
    name = "n" * LONGEST_NAME
    number = -(2**63)
    longest = {
        "id": "00000000-0000-0000-0000-000000000000",
        "queue": name,
        "tenant": name,
        "key": None,  # the key's JSON text is in the blob
        "priority": number,
        "payload": None,  # so is the payload's
        "attempt": number,
        "max_attempts": number,
        "lease_token": f"{new_token_prefix(name)}{number}~{number}",
        "lease_expires_at": "0" * 40,
        "redelivered": False,
        "enqueued_at": "0" * 40,
        "parents": None,  # a released task's are in its blob ("pa": logic/flows.py)
    }
    return body_cost(orjson.dumps(longest)) + 1


# Per task, on top of its blob's JSON text (see _task_fields_cost).
TASK_FIELDS_COST = _task_fields_cost()


@dataclass(frozen=True)
class ClaimOutcome:
    """What a claim handed out, and when more may be had if the queue's limits (max_leased,
    rate, tenant_max_leased, tenant_rate) cut it: ``retry_after_ms`` is None when they did
    not (the claim got all it asked for, or all that was ready). ``idempotent_replay``: the
    tasks are a keyed claim's first answer rebuilt (tierq.logic.claim_replay)."""

    tasks: list[ClaimedTask]
    retry_after_ms: int | None = None
    idempotent_replay: bool = False


def claim(ctx: Context, queue: str, request: ClaimRequest,
          tenants: Sequence[str] | None = None, *, max_bytes: int = 0,
          answer_by: float | None = None) -> list[ClaimedTask]:
    """The tasks of :func:`claim_outcome`."""
    return claim_outcome(ctx, queue, request, tenants, max_bytes=max_bytes,
                         answer_by=answer_by).tasks


def claim_outcome(ctx: Context, queue: str, request: ClaimRequest,
                  tenants: Sequence[str] | None = None, *, max_bytes: int = 0,
                  answer_by: float | None = None) -> ClaimOutcome:
    """Claim up to ``request.max`` tasks; long-polls up to ``request.wait_seconds`` (also
    while the queue's limits leave no room: it waits for capacity, waking no later than
    the limits say more may be had).
    ``tenants`` restricts the rotation (a caller pinned to one tenant passes it).
    ``max_bytes`` caps what the tasks cost in a Lambda response as the runtime sends it
    (``tierq.core.sizing.body_cost`` of their JSON): tasks beyond it stay in their places; the
    first task always comes. ``answer_by`` (a ``time.monotonic()`` instant) is when the
    claim must return: polling and popping stop then, and no refill starts that could end
    after it (REFILL_WORK_ALLOWANCE)."""
    poll_until = time.monotonic() + request.wait_seconds
    if answer_by is not None:
        poll_until = min(poll_until, answer_by)
    sleep = POLL_FIRST_SLEEP
    while True:
        got = claim_once_outcome(ctx, queue, request, tenants, max_bytes=max_bytes,
                                 answer_by=answer_by)
        remaining = poll_until - time.monotonic()
        if got.tasks or remaining <= 0:
            return got
        nap = min(sleep, remaining)
        if got.retry_after_ms is not None:
            nap = min(nap, got.retry_after_ms / 1000)
        time.sleep(nap)
        sleep = min(sleep * 2, POLL_MAX_SLEEP)


def give_back(ctx: Context, queue: str, popped: Sequence[tuple[str, str]]) -> None:
    """Return tasks a failing claim popped, (id, lease token) each, through the release
    path: the leases are taken back at once, each task returns to its place in line and no
    attempt is counted. Should the release fail past taking the leases (Postgres down), the
    tasks are out of Valkey but their rows still warm: the reconciler puts them back in line
    after its grace period, again without an attempt. A failure of the release is logged,
    not raised: the claim's own error is the one to answer with."""
    if not popped:
        return
    try:
        leases.release(ctx, queue, [ReleaseItem(id=UUID(task_id), lease_token=token)
                                    for task_id, token in popped])
    except Exception:
        log.exception("giving back %d tasks of a failed claim on %r failed; the reconciler "
                      "returns what left Valkey", len(popped), queue)


@dataclass
class _QueueGate:
    """The queue-wide limits of one claim call (max_leased, rate). Before the claim pops
    anything, it takes reservations and tokens for the whole claim on the queue's own slot
    (lua/capacity_take.lua): on a single server within its first pair's claim script
    (``riding``, one round trip), in cluster mode in a call of its own (``take``,
    lua/queue_capacity.lua). Each pair's pop takes at most what is left of them, and what
    no pop used is given back at the end (``flush``). The take is one entry
    ``<random>~`` holding the units ``<random>~1`` .. ``<random>~<granted>``, and the
    leases of the claim are numbered on from one pair to the next,
    ``<tenant>~<random>~<attempt>~<k>``: the k-th lease holds unit k
    (warm_tier.reservation_of). Every pop of the claim uses the take's ``now_ms``, so no
    lease ends after its reservation."""

    ctx: Context
    queue: str
    max_leased: int  # 0: none
    rate: tuple[float, int] | None
    random: str = field(default_factory=lambda: secrets.token_hex(12))
    now_ms: int = 0
    granted: int = 0
    used: int = 0
    # the take the first pop makes in its own script (single server), until it is made
    riding: QueueTake | None = None

    @property
    def left(self) -> int:
        return self.granted - self.used

    @property
    def holder(self) -> str:
        return f"{self.random}~"

    def prefix(self, tenant: str) -> str:
        """The token prefix of the claim's leases in ``tenant``."""
        return f"{tenant}~{self.random}~"

    def ride(self, want: int, shares: int) -> None:
        """Make the take with the first pop, in its script (single server); the first pair
        takes at most its share (``shares``: the tenants the grant is shared among)."""
        self.now_ms = to_ms(self.ctx.now())
        self.riding = QueueTake(self.queue, limits.LEASES_POOL, want, self.holder,
                                self.max_leased, self.rate, shares)

    def took(self, granted: int) -> None:
        """The first pop made the take: it granted ``granted``."""
        self.granted = granted
        self.riding = None

    def take(self, want: int, lease_ms: int) -> int:
        """Take capacity for up to ``want`` tasks in a call of its own; returns the
        retry-after (ms, 0: all granted)."""
        self.now_ms = to_ms(self.ctx.now())
        got = self.ctx.warm.take_capacity(
            self.queue, limits.LEASES_POOL, want=want, now_ms=self.now_ms,
            deadline_ms=self.now_ms + lease_ms, holder=self.holder,
            max_held=self.max_leased, rate=self.rate)
        self.granted = got.taken
        return got.retry_after_ms

    def flush(self) -> None:
        """Give back what no pop used (one call). Should it fail, the reservations end at
        their deadline (the lease deadline) and the tokens are lost: the safe side."""
        if self.left <= 0:
            return
        try:
            self.ctx.warm.take_capacity(
                self.queue, limits.LEASES_POOL, want=0, now_ms=to_ms(self.ctx.now()),
                deadline_ms=0, holder=self.holder, max_held=self.max_leased, rate=self.rate,
                give_back_tokens=self.left if self.rate is not None else 0,
                give_back_past=self.used if self.max_leased else None)
            self.granted = self.used
        except Exception:
            log.warning("giving back unused capacity of %r failed; it frees itself at the "
                        "lease deadline", self.queue, exc_info=True)


def _gate(ctx: Context, queue: str, max_leased: int | None,
          rate: tuple[float, int] | None) -> _QueueGate | None:
    if not max_leased and rate is None:
        return None
    return _QueueGate(ctx, queue, max_leased or 0, rate)


@dataclass
class _Claimer:
    """One claim call: its lease, its worker, what is left of its byte budget and of its
    time, and every lease it popped (to give them back should the claim fail)."""

    ctx: Context
    queue: str
    lease_ms: int
    worker: str
    max_bytes: int  # 0: no cap
    answer_by: float | None = None  # time.monotonic(): no pop at or after it
    used_bytes: int = 0
    popped: list[tuple[str, str]] = field(default_factory=list)  # (id, lease token)
    # an inline refill found Valkey out of memory (the cold work could not be moved warm)
    out_of_memory: bool = False
    gate: _QueueGate | None = None  # the queue-wide limits, if any
    tenant_max_leased: int = 0  # 0: none
    tenant_rate: tuple[float, int] | None = None
    # the soonest time a limit that cut this claim says more may be had (ms), if any
    retry_after_ms: int | None = None
    # the ready tasks the last pop left in its pair's warm set (None: no pop was made)
    ready_left: int | None = None
    # tenants whose pair this claim found empty: nothing ready warm, no cold row a refill
    # could bring (logic/ready_tenants.py takes them out of the queue's index)
    empty: list[str] = field(default_factory=list)

    def _limited(self, retry_ms: int) -> None:
        if retry_ms > 0:
            self.retry_after_ms = retry_ms if self.retry_after_ms is None \
                else min(self.retry_after_ms, retry_ms)

    @property
    def exhausted(self) -> bool:
        return self.max_bytes > 0 and self.used_bytes >= self.max_bytes

    def _budget(self) -> int:
        return 0 if self.max_bytes == 0 else max(1, self.max_bytes - self.used_bytes)

    def _time_left(self) -> float:
        return math.inf if self.answer_by is None else self.answer_by - time.monotonic()

    def may_pop(self) -> bool:
        return self._time_left() > 0

    def may_refill(self, *, holding: bool) -> bool:
        """Whether an inline refill started now ends before ``answer_by``. It may wait the
        pool timeout for a connection, then runs its statements. While it holds popped
        tasks, it must end in time whatever PostgreSQL does: its long statement (the
        promotion batch) is bounded by the statement timeout, which PostgreSQL enforces;
        holding none, REFILL_WORK_ALLOWANCE will do (should it overrun, nothing is
        stranded: no pop follows a refill once the time is up)."""
        if self.answer_by is None:
            return True
        settings = self.ctx.settings
        work = REFILL_WORK_ALLOWANCE
        if holding:
            if not settings.statement_timeout_ms:
                return False  # no bound on the statements
            work = max(work, settings.statement_timeout_ms / 1000)
        return self._time_left() > settings.db_pool_timeout + work

    def _pop(self, tenant: str, n: int) -> tuple[int, str, list[Claimed], int] | None:
        """Pop up to ``n`` of the pair's tasks under the limits; None when the queue-wide
        limits left no room for any."""
        gate = self.gate
        riding = None
        if gate is None:
            now_ms = to_ms(self.ctx.now())
            prefix = new_token_prefix(tenant)
            first_k = 0
        else:
            riding = gate.riding
            if riding is None:
                # within what the claim reserved, numbered on from the pairs before
                n = min(n, gate.left)
                if n <= 0:
                    return None
            now_ms, prefix, first_k = gate.now_ms, gate.prefix(tenant), gate.used
        left, mode, claimed, retry_ms, granted = self.ctx.warm.claim_limited(
            self.queue, tenant, n=n, now_ms=now_ms, lease_ms=self.lease_ms,
            token_prefix=prefix, worker=self.worker,
            max_bytes=self._budget(), strict=self.used_bytes > 0,
            per_task_bytes=TASK_FIELDS_COST if self.max_bytes else 0,
            tenant_max_leased=self.tenant_max_leased, tenant_rate=self.tenant_rate,
            first_k=first_k, take=riding)
        self.ready_left = left
        if gate is not None:
            if riding is not None:
                gate.took(granted)
            gate.used += len(claimed)
        self._limited(retry_ms)
        self.popped.extend((c[0].decode(), c[2].decode()) for c in claimed)
        if self.max_bytes:
            self.used_bytes += sum(body_cost(c[3]) for c in claimed)
            self.used_bytes += TASK_FIELDS_COST * len(claimed)
        return left, mode, claimed, now_ms

    def pair(self, tenant: str, n: int) -> list[ClaimedTask]:
        gate = self.gate
        if not self.may_pop() or (gate is not None and gate.riding is None
                                  and gate.left <= 0):
            return []
        popped = self._pop(tenant, n)
        if popped is None:
            return []
        left, mode, claimed, now_ms = popped
        out = self._tasks(tenant, claimed, now_ms)
        if mode != "cold":
            if not claimed and left == 0:
                self.empty.append(tenant)
            return out
        if len(claimed) < n and left == 0 and not self.exhausted:
            # the warm set ran dry while cold work may wait: refill now, not at the tick
            if self.may_refill(holding=bool(self.popped)):
                refilled = tiering.refill(self.ctx, self.queue, tenant, limit=INLINE_REFILL)
                self.out_of_memory |= refilled.out_of_memory
                if not claimed and not refilled.promoted and not refilled.skipped_busy \
                        and not refilled.out_of_memory:
                    self.empty.append(tenant)
                if refilled.promoted and self.may_pop():
                    again = self._pop(tenant, n - len(claimed))
                    if again is not None:
                        _, _, more, now_ms = again
                        out.extend(self._tasks(tenant, more, now_ms))
        elif (left < low_water(self.ctx.queue_settings.get(self.queue).warm_max)
              and self.may_refill(holding=bool(self.popped))):
            self._refill_before_dry(tenant)
        return out

    def _refill_before_dry(self, tenant: str) -> None:
        """Top the warm set up while it still holds work (one batch; a concurrent mover
        makes this a no-op), at most every LOW_WATER_EVERY seconds per process and pair."""
        now = self.ctx.now()
        pair = (self.queue, tenant)
        if now - self.ctx.low_water_refills.get(pair, float("-inf")) < LOW_WATER_EVERY:
            return
        self.ctx.low_water_refills[pair] = now
        tiering.refill(self.ctx, self.queue, tenant, limit=LOW_WATER_REFILL)

    def _tasks(self, tenant: str, claimed: list[Claimed], now_ms: int) -> list[ClaimedTask]:
        """The claimed tasks as models, validated as one list (see models.CLAIMED_TASKS)."""
        expires = from_ms(now_ms + self.lease_ms)
        queue = self.queue
        enqueued: dict[int, datetime] = {}  # tasks enqueued together share one instant
        fields = []
        for raw_id, attempt, raw_token, task_json in claimed:
            body = orjson.loads(task_json)
            created_ms = body["c"]
            enqueued_at = enqueued.get(created_ms)
            if enqueued_at is None:
                enqueued_at = enqueued[created_ms] = from_ms(created_ms)
            fields.append({
                "id": raw_id.decode(),
                "queue": queue,
                "tenant": tenant,
                "key": body["k"],
                "priority": body["pr"],
                "payload": body["p"],
                "attempt": attempt,
                "max_attempts": body["m"],
                "lease_token": raw_token.decode(),
                "lease_expires_at": expires,
                "redelivered": attempt > 1,
                "enqueued_at": enqueued_at,
                "parents": body.get("pa"),
            })
        return CLAIMED_TASKS.validate_python(fields)


def claim_once(ctx: Context, queue: str, request: ClaimRequest,
               tenants: Sequence[str] | None = None, *, max_bytes: int = 0,
               answer_by: float | None = None,
               empty: list[str] | None = None) -> list[ClaimedTask]:
    """The tasks of :func:`claim_once_outcome` (``empty`` as there)."""
    return claim_once_outcome(ctx, queue, request, tenants, max_bytes=max_bytes,
                              answer_by=answer_by, empty=empty).tasks


def _rate(limit: RateLimit | None) -> tuple[float, int] | None:
    return None if limit is None else (limit.per_second, limit.burst)


def claim_once_outcome(ctx: Context, queue: str, request: ClaimRequest,
                       tenants: Sequence[str] | None = None, *, max_bytes: int = 0,
                       answer_by: float | None = None,
                       empty: list[str] | None = None) -> ClaimOutcome:
    """One pass of a claim (no waiting); ``answer_by`` (``time.monotonic()``): no pop or
    refill that could end after it starts. Whatever fails after a pop gives the popped
    tasks back (``give_back``) before the error goes up. The queue's limits cut what it
    hands out (per tenant in the claim script, queue-wide by reservations taken before
    the claim's pops: ``_QueueGate``). ``empty``, when given, is extended with the tenants
    whose pair the claim found without ready work (nothing warm, no cold row a refill could
    bring); a queue-wide claim takes those out of the queue's ready-tenant index itself."""
    qs = ctx.queue_settings.get(queue)
    if qs.paused:
        return ClaimOutcome([])
    claimer = _Claimer(ctx, queue, (request.lease_seconds or qs.lease_seconds) * 1000,
                       request.worker or "", max_bytes, answer_by,
                       gate=_gate(ctx, queue, qs.max_leased, _rate(qs.rate)),
                       tenant_max_leased=qs.tenant_max_leased or 0,
                       tenant_rate=_rate(qs.tenant_rate))
    indexed = request.tenant is None and tenants is None
    try:
        got = _claim_pairs(claimer, ctx, queue, request, tenants)
    except BaseException:
        if claimer.gate is not None:
            claimer.gate.flush()
        give_back(ctx, queue, claimer.popped)
        raise
    if claimer.gate is not None:
        claimer.gate.flush()
    if indexed:
        ready_tenants.forget(ctx, queue, claimer.empty)
    if not got and claimer.out_of_memory:
        # cold work waits but Valkey is full: 503 with Retry-After rather than an empty
        # answer (a claim that got tasks returns them: claims free Valkey memory)
        raise WarmTierFull()
    limited = claimer.retry_after_ms if len(got) < request.max else None
    if limited is not None and not got and request.tenant is not None \
            and not _had_ready_work(claimer, request.tenant):
        # one tenant's claim with nothing of its own ready answers as on a queue name
        # nobody used: how much of the queue's limits others hold, or which limits the
        # queue has, is none of its business
        limited = None
    if empty is not None:
        empty.extend(claimer.empty)
    return ClaimOutcome(got, limited)


def _had_ready_work(claimer: _Claimer, tenant: str) -> bool:
    """Whether the claim's one pair held ready tasks in Valkey: as its pop saw it, or, when
    the queue-wide limits left no room for a pop (cluster mode), as it holds them now. (Work
    waiting cold only does not count: that claim answers without ``retry_after_ms``, and the
    next one, once a refill brought the work warm, with it.)"""
    if claimer.ready_left is None:
        return claimer.ctx.warm.stats(claimer.queue, tenant)[0] > 0
    return claimer.ready_left > 0


def _claim_pairs(claimer: _Claimer, ctx: Context, queue: str, request: ClaimRequest,
                 tenants: Sequence[str] | None) -> list[ClaimedTask]:
    if request.tenant is not None:
        candidates = [request.tenant]
    elif tenants is not None:
        candidates = list(tenants)
    else:
        # a window of the tenants with ready work, from one further than the last claim's
        # first: the turn goes round whatever the index gains or loses meanwhile
        candidates = ready_tenants.tenants_after(ctx, queue, ctx.claim_turns.get(queue),
                                                 ready_tenants.CLAIM_WINDOW)
        if candidates:
            ctx.claim_turns[queue] = candidates[0]
    if not candidates:
        return []
    wanted = request.max
    gate = claimer.gate
    if gate is not None:
        # reserve first (the queue-wide limits): every pop stays within the grant
        if ctx.warm.single_server:
            gate.ride(wanted, len(candidates))  # with the first pop, in its script
        else:
            claimer._limited(gate.take(wanted, claimer.lease_ms))
            wanted = gate.granted
            if wanted == 0:
                return []
    if len(candidates) == 1:
        return claimer.pair(candidates[0], wanted)

    # Fair rotation: start one tenant further each call (the index's window starts there
    # already); a first pass gives every tenant an equal share, a second pass fills what is
    # left from tenants that still had work.
    if tenants is not None:
        start = ctx.rotation.get(queue, 0) % len(candidates)
        ctx.rotation[queue] = start + 1
        rotated = candidates[start:] + candidates[:start]
    else:
        rotated = candidates
    # (under a queue-wide limit, shares of what it granted: the first tenant of the
    # rotation does not take it all; a take riding with the first pop cuts that pop to its
    # share of the grant itself)
    share = max(1, math.ceil(wanted / len(rotated)))
    out: list[ClaimedTask] = []
    had_more: list[str] = []
    for tenant in rotated:
        want = min(share, wanted - len(out))
        if want <= 0 or claimer.exhausted:
            break
        riding = gate is not None and gate.riding is not None
        got = claimer.pair(tenant, want)
        out.extend(got)
        if riding and gate is not None and gate.riding is None and gate.granted < wanted:
            wanted = gate.granted  # the grant came with this pop
            share = max(1, math.ceil(wanted / len(rotated)))
            want = min(want, share)
        if len(got) == want:
            had_more.append(tenant)
    for tenant in had_more:
        want = wanted - len(out)
        if want <= 0 or claimer.exhausted:
            break
        out.extend(claimer.pair(tenant, want))
    return out
