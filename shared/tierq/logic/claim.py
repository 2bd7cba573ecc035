"""Claim: pop ready tasks in order from the warm tier and lease them, with no Postgres round
trip on the warm path.

Without a tenant, claims rotate fairly across the queue's tenants. While cold work waits, a
claim that leaves the warm set below its low-water mark refills it inline (at most every
LOW_WATER_EVERY seconds per process), so that the other claimers keep finding work. One that
finds it dry refills at once and takes what it still wants.

A claim never holds leases it will not answer with. Its budget (logic/claim_budget.py) caps
the bytes of its answer and the time it may take. Its limits (logic/claim_limits.py) cut
what it pops. A claim that fails after it popped tasks gives them back through the release
path before the error goes up; one tenant's failing pair fails only its own part of a claim
over several tenants (logic/claim_isolation.py). A pop whose reply was lost and which was
sent again answers the leases of its first run (lua/claim.lua): the claim gives them back
the same way and pops once more.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson

from tierq.dal.lua_calls import Claim
from tierq.dal.warm_tier import Claimed, ClaimRepeated, PairKeys
from tierq.errors import DatabaseTimedOut, WarmTierFull
from tierq.logic import claim_isolation, leases, ready_tenants, tiering, time_limits
from tierq.logic.claim_budget import ClaimBudget
from tierq.logic.claim_limits import ClaimLimits, PopLimits
from tierq.logic.context import Context, from_ms
from tierq.models.base import UUIDS, made
from tierq.models.leases import CLAIMED_TASKS, ClaimedTask, ClaimRequest

log = logging.getLogger(__name__)

# A claimed task's fields, as its model takes them: a claim's pops make these, and the claim
# makes its models from all of them at once (``Claimer.models``).
TaskFields = dict[str, Any]

POLL_FIRST_SLEEP = 0.05
POLL_MAX_SLEEP = 0.5
# a claim that finds the warm set dry promotes one batch and returns (the other claimers are
# not held up for long); the scheduled cold_to_warm fills the rest of the room
INLINE_REFILL = 2000
# refill before the warm set runs dry: below a quarter of warm_max (at most 1000 tasks)
LOW_WATER_FRACTION = 4
LOW_WATER_EVERY = 0.05
LOW_WATER_REFILL = 500  # small: the claim that tops up returns soon
# the fields of a task's blob without parents, group, time limit or trace: e, p, k, pr, m, c
# (logic/admission.py task_blob)
PLAIN_BLOB_FIELDS = 6


def low_water(warm_max: int) -> int:
    """The ready tasks below which a claim tops a cold pair's warm set up."""
    return min(INLINE_REFILL // 2, warm_max // LOW_WATER_FRACTION)


@dataclass(frozen=True)
class ClaimOutcome:
    """What a claim handed out, and when more may be had if the queue's limits (max_leased,
    rate, tenant_max_leased, tenant_rate) cut it: ``retry_after_ms`` is None when they did
    not (the claim got all it asked for, or all that was ready). ``idempotent_replay``: the
    tasks are a keyed claim's first answer rebuilt (tierq.logic.claim_replay). ``failed_pairs``:
    how many tenants' pairs failed alone in a claim over several tenants."""

    tasks: list[ClaimedTask]
    retry_after_ms: int | None = None
    idempotent_replay: bool = False
    # the pairs whose failure the claim went on past (logic/claim_isolation.py)
    failed_pairs: int = 0


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
    after it (ClaimBudget.may_refill, logic/claim_budget.py)."""
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
    from tierq.models.lease_outcomes import ReleaseItem  # (a give-back's only: rare)

    try:
        leases.release(ctx, queue, [ReleaseItem(id=UUID(task_id), lease_token=token)
                                    for task_id, token in popped])
    except Exception:
        log.exception("giving back %d tasks of a failed claim on %r failed; the reconciler "
                      "returns what left Valkey", len(popped), queue)


@dataclass
class Claimer:
    """One claim call: its lease, its worker, its budget and limits, and every lease it
    popped (to give them back should the claim fail)."""

    ctx: Context
    queue: str
    lease_ms: int
    worker: str
    budget: ClaimBudget
    limits: ClaimLimits
    # the queue's time limit of an attempt (None: none), read once: the claim script records
    # it with each lease whose task has no limit of its own, and the answer reports the same
    timeout_seconds: int | None = None
    # each pop's tasks as the script answered them (``popped_leases``: (id, lease token))
    popped: list[list[Claimed]] = field(default_factory=list)
    # an inline refill found Valkey out of memory (the cold work could not be moved warm)
    out_of_memory: bool = False
    # the ready tasks the last pop left in its pair's warm set (None: no pop was made)
    ready_left: int | None = None
    # tenants whose pair this claim found empty: nothing ready warm, no cold row a refill
    # could bring (logic/ready_tenants.py takes them out of the queue's index)
    empty: list[str] = field(default_factory=list)
    # a claim over several tenants: a pair's failure fails that pair alone
    # (logic/claim_isolation.py); the failures, and how many pops answered
    isolate: bool = False
    failures: list[Exception] = field(default_factory=list)
    answered: int = 0
    refills_off: bool = False  # a refill's database timeout: no more inline refills
    # a popped task's blob had more than the six plain fields (parents, a group, a time
    # limit of its own or a trace): the claim's models are validated (``models``)
    unplain: bool = False

    def popped_leases(self) -> list[tuple[str, str]]:
        """(id, lease token) of every task the claim popped."""
        return [(c[0].decode(), c[2].decode()) for claimed in self.popped for c in claimed]

    def _may_refill(self) -> bool:
        return not self.refills_off and \
            self.budget.may_refill(self.ctx.settings, holding=bool(self.popped))

    def _isolated(self, tenant: str, exc: Exception) -> bool:
        """Whether the claim goes on past ``tenant``'s failure ``exc``, which then sets the
        pair aside (logic/claim_isolation.py's table): only a claim over several tenants,
        only one pair's failure, and not when the failed pop carried the queue-wide take
        (what it reserved is not known)."""
        if not self.isolate or not claim_isolation.isolable(self.ctx, exc):
            return False
        gate = self.limits.gate
        if gate is not None and gate.riding is not None:
            return False
        claim_isolation.set_aside(self.ctx, self.queue, tenant, exc)
        self.failures.append(exc)
        if isinstance(exc, DatabaseTimedOut):
            self.refills_off = True  # (PostgreSQL slow: no refill more waits its timeout)
        return True

    def _pop(self, tenant: str, n: int, part: int = 0, again: bool = False
             ) -> tuple[int, str, list[Claimed], int] | None:
        """Pop up to ``n`` of the pair's tasks under the limits; None when the queue-wide
        limits left no room for any. ``part``: at most these bytes of what is left of the
        byte cap (0: all of it). A pop answered as a repeat (``ClaimRepeated``) has its
        first run's leases given back and is made once more (``again``), unless the
        claim's time ran out meanwhile; a second repeat in a row answers nothing."""
        wanted = n
        allowed = self.limits.for_pop(tenant, n)
        if allowed is None:
            return None
        n, pop = allowed
        budget = self.budget
        try:
            left, mode, claimed, retry_ms, granted = self._claim_limited(tenant, n, pop, part)
        except ClaimRepeated as repeat:
            self._repeated(pop, repeat)
            if again or budget.expired():
                # (lost twice in a row, or no time left: its tasks are back in line)
                self.answered += 1
                return None
            if pop.take is not None and repeat.granted >= 0:
                # (at most the pair's share of the grant, as the script cut the first run)
                wanted = min(wanted, math.ceil(repeat.granted / pop.take.shares))
            return self._pop(tenant, wanted, part, again=True)
        except Exception:
            self.limits.lost(pop, n)
            raise
        self.answered += 1
        self.ready_left = left
        self.limits.popped(pop, granted, len(claimed), retry_ms)
        if claimed:
            self.popped.append(claimed)
            if budget.max_bytes:
                budget.charge(c[3] for c in claimed)
        return left, mode, claimed, pop.now_ms

    def _repeated(self, pop: PopLimits, repeat: ClaimRepeated) -> None:
        """A pop made with ``pop`` ran twice (its first reply was lost): the first run's
        leases go back through the release path, no attempt counted, the tasks back in
        their places. Under the queue-wide limits the claim's later pops number their
        leases past the first run's and stay within the grant, which a take riding with
        the pop reported with the repeat (:meth:`ClaimLimits.repeated`)."""
        self.limits.repeated(pop, repeat.granted, repeat.last_unit)
        log.warning("a claim's reply on %r was lost after it leased %d tasks; giving them "
                    "back", self.queue, len(repeat.leases))
        give_back(self.ctx, self.queue, repeat.leases)

    def _claim_limited(self, tenant: str, n: int, pop: PopLimits, part: int
                       ) -> tuple[int, str, list[Claimed], int, int]:
        """The pop's script call (``WarmTier.claim_limited``)."""
        budget = self.budget
        return self.ctx.warm.claim_limited(
            self.queue, tenant, n=n, now_ms=pop.now_ms, lease_ms=self.lease_ms,
            token_prefix=pop.token_prefix, worker=self.worker,
            max_bytes=min(part or budget.remaining_bytes(), budget.remaining_bytes()),
            strict=budget.used_bytes > 0,
            per_task_bytes=budget.per_task_bytes,
            tenant_max_leased=self.limits.tenant_max_leased,
            tenant_rate=self.limits.tenant_rate, first_k=pop.first_k, take=pop.take,
            timeout_seconds=self.timeout_seconds)

    def pair(self, tenant: str, n: int, part: int = 0, again: bool = False
             ) -> list[TaskFields]:
        """Up to ``n`` of one pair's tasks, refilling the pair inline when its warm set ran
        dry or runs low while cold work waits; ``part`` and ``again`` as :meth:`_pop`'s."""
        if self.budget.expired() or not self.limits.room:
            return []
        if self.isolate and claim_isolation.passed_over(self.ctx, self.queue, tenant):
            return []  # (it, or its master, failed earlier in this claim or lately)
        part_end = self.budget.used_bytes + part if part else 0
        try:
            popped = self._pop(tenant, n, part, again)
        except Exception as exc:
            if not self._isolated(tenant, exc):
                raise
            return []
        if popped is None:
            return []
        return self._answer(tenant, n, *popped, part_end=part_end)

    def may_pipeline(self) -> bool:
        """Whether a pass may pop its pairs in one pipeline (:meth:`pairs`): the queue has
        no queue-wide limit (its take rides with, or must come before, the first pop and
        each pop stays within what the pops before it left), and the claim may still pop."""
        return self.limits.gate is None and not self.budget.expired()

    def pairs(self, tenants: Sequence[str], n: int) -> list[tuple[list[TaskFields], bool]]:
        """Up to ``n`` tasks of each tenant's pair, every pop sent in one pipeline (one round
        trip on a single server, one per master in cluster mode), each reply then handled
        as :meth:`pair` handles its pop's, in order (refills included). Per tenant: its
        tasks, and whether a byte cap cut its pop (it may get more from what is left).
        Under a byte cap each pop may cost its part of what is left, strictly (no pop's
        first task passes its part), so that the pops together stay within it. Only when
        :meth:`may_pipeline`."""
        budget = self.budget
        capped = budget.max_bytes > 0
        part = max(1, budget.remaining_bytes() // len(tenants)) if capped else 0
        limits = self.limits
        pops: list[tuple[str, Claim]] = []
        for tenant in tenants:
            if claim_isolation.passed_over(self.ctx, self.queue, tenant):
                continue  # (set aside: answered as a pop that got nothing)
            allowed = limits.for_pop(tenant, n)
            assert allowed is not None and allowed[1].take is None  # (no queue-wide gate)
            pop = allowed[1]
            pops.append((tenant, Claim(
                PairKeys.of(self.queue, tenant), n, pop.now_ms, self.lease_ms,
                pop.token_prefix, self.worker, max_bytes=part, strict=capped,
                per_task_bytes=budget.per_task_bytes,
                tenant_max_leased=limits.tenant_max_leased, tenant_rate=limits.tenant_rate,
                timeout_seconds=self.timeout_seconds or 0)))
        replies = self.ctx.warm.claim_pairs([call for _, call in pops])
        # a pop sent again after its reply was lost answered its first run's leases: given
        # back before anything else, its pair is popped once more below
        again = {tenant for (tenant, _), reply in zip(pops, replies, strict=True)
                 if isinstance(reply, ClaimRepeated)}
        lost = [lease for reply in replies if isinstance(reply, ClaimRepeated)
                for lease in reply.leases]
        if lost:
            log.warning("a claim's replies on %r were lost after they leased %d tasks; "
                        "giving them back", self.queue, len(lost))
            give_back(self.ctx, self.queue, lost)
        # every pop that leased tasks is recorded (to be given back should the claim fail)
        # before an error goes up; a pair's own failure fails it alone
        for reply in replies:
            if isinstance(reply, Exception):
                continue
            self.answered += 1
            limits.note(reply.retry_after_ms)
            if reply.claimed:
                self.popped.append(reply.claimed)
                budget.charge(c[3] for c in reply.claimed)
        for (tenant, _), reply in zip(pops, replies, strict=True):
            if isinstance(reply, Exception) and tenant not in again \
                    and not self._isolated(tenant, reply):
                raise reply
        answered = {tenant: (sent, reply) for (tenant, sent), reply
                    in zip(pops, replies, strict=True) if not isinstance(reply, Exception)}
        out: list[tuple[list[TaskFields], bool]] = []
        for tenant in tenants:
            if tenant in again:  # (a second repeat in a row, or no time left: nothing)
                if budget.expired():
                    self.answered += 1
                    out.append(([], False))
                else:
                    out.append((self.pair(tenant, n, part, again=True), False))
                continue
            if tenant not in answered:  # (set aside, or failed alone)
                out.append(([], False))
                continue
            sent, reply = answered[tenant]
            self.ready_left = reply.left
            cut = capped and len(reply.claimed) < n and reply.left > 0 \
                and reply.retry_after_ms == 0
            out.append((self._answer(tenant, n, reply.left, reply.mode, reply.claimed,
                                     sent.now_ms), cut))
        return out

    def _answer(self, tenant: str, n: int, left: int, mode: str, claimed: list[Claimed],
                now_ms: int, part_end: int = 0) -> list[TaskFields]:
        """A pop's tasks (``claimed``, of ``n`` asked, ``left`` ready after it, the pair in
        ``mode``) as their fields, refilling the pair inline when its warm set ran dry or runs
        low while cold work waits (and, when it ran dry, popping what is still wanted).
        ``part_end``: the byte budget's use the pair's pops may reach (0: what is left of
        the cap), so a refill's pop stays within the part its first pop was given."""
        out = self._fields(tenant, claimed, now_ms)
        if mode != "cold":
            if not claimed and left == 0:
                self.empty.append(tenant)
            return out
        if len(claimed) < n and left == 0 and not self.budget.exhausted:
            # the warm set ran dry while cold work may wait: refill now, not at the tick
            if self._may_refill():
                try:
                    refilled = tiering.refill(self.ctx, self.queue, tenant,
                                              limit=INLINE_REFILL)
                except Exception as exc:
                    if not self._isolated(tenant, exc):
                        raise
                    return out  # (what its pop leased stays the claim's)
                self.out_of_memory |= refilled.out_of_memory
                if not claimed and not refilled.promoted and not refilled.skipped_busy \
                        and not refilled.out_of_memory:
                    self.empty.append(tenant)
                part = part_end - self.budget.used_bytes if part_end else 0
                if refilled.promoted and not self.budget.expired() \
                        and (not part_end or part > 0):
                    try:
                        again = self._pop(tenant, n - len(claimed), part)
                    except Exception as exc:
                        if not self._isolated(tenant, exc):
                            raise
                        again = None
                    if again is not None:
                        _, _, more, now_ms = again
                        out.extend(self._fields(tenant, more, now_ms))
        elif (left < low_water(self.ctx.queue_settings.get(self.queue).warm_max)
              and self._may_refill()):
            try:
                self._refill_before_dry(tenant)
            except Exception as exc:
                if not self._isolated(tenant, exc):
                    raise
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

    def _fields(self, tenant: str, claimed: list[Claimed], now_ms: int) -> list[TaskFields]:
        """The claimed tasks' fields (their models are made once for the whole claim:
        ``models``). A lease whose task has a time limit ends at it when it comes before
        the lease's own end, as the claim script recorded it (logic/time_limits.py). A blob
        of the six fields every task has (no parents, group, time limit of its own or
        trace) is read without looking for the others."""
        if not claimed:
            return []
        expires = from_ms(now_ms + self.lease_ms)
        queue = self.queue
        enqueued: dict[int, datetime] = {}  # tasks enqueued together share one instant
        fields: list[TaskFields] = []
        append = fields.append
        loads = orjson.loads
        default_limit = self.timeout_seconds
        limited: list[tuple[str, int]] = []
        for raw_id, attempt, raw_token, task_json in claimed:
            body = loads(task_json)
            created_ms = body["c"]
            enqueued_at = enqueued.get(created_ms)
            if enqueued_at is None:
                enqueued_at = enqueued[created_ms] = from_ms(created_ms)
            task_id = raw_id.decode()
            if len(body) == PLAIN_BLOB_FIELDS:
                limit = default_limit
                append({
                    "id": task_id, "queue": queue, "tenant": tenant, "key": body["k"],
                    "priority": body["pr"], "payload": body["p"], "attempt": attempt,
                    "max_attempts": body["m"], "lease_token": raw_token.decode(),
                    "lease_expires_at": expires, "redelivered": attempt > 1,
                    "enqueued_at": enqueued_at, "parents": None, "group": None,
                    "timeout_seconds": limit, "seq": None, "trace": None,
                })
            else:
                self.unplain = True
                limit = body.get("to", default_limit)
                append({
                    "id": task_id, "queue": queue, "tenant": tenant, "key": body["k"],
                    "priority": body["pr"], "payload": body["p"], "attempt": attempt,
                    "max_attempts": body["m"], "lease_token": raw_token.decode(),
                    "lease_expires_at": expires, "redelivered": attempt > 1,
                    "enqueued_at": enqueued_at, "parents": body.get("pa"),
                    "group": body.get("g"), "timeout_seconds": limit, "seq": body.get("gs"),
                    "trace": body.get("tr"),
                })
            if limit is not None:
                limited.append((task_id, limit))
        if limited:
            cut = time_limits.cut_deadlines(now_ms, self.lease_ms, limited)
            if cut:
                for item in fields:
                    deadline = cut.get(item["id"])
                    if deadline is not None:
                        item["lease_expires_at"] = deadline
        return fields

    def models(self, fields: list[TaskFields]) -> list[ClaimedTask]:
        """The claim's tasks as models, made in one call for all its pops. When every
        blob was of the six plain fields, from their values (``models.base.made``: each
        is of its field's type, written by an enqueue from validated input; the ids
        parsed as one list); else validated as one list (see models.CLAIMED_TASKS)."""
        if not fields:
            return []
        if self.unplain:
            return CLAIMED_TASKS.validate_python(fields)
        ids = UUIDS.validate_python([item["id"] for item in fields])
        for item, task_id in zip(fields, ids, strict=True):
            item["id"] = task_id
        return made(ClaimedTask, fields)


def claim_once(ctx: Context, queue: str, request: ClaimRequest,
               tenants: Sequence[str] | None = None, *, max_bytes: int = 0,
               answer_by: float | None = None,
               empty: list[str] | None = None) -> list[ClaimedTask]:
    """The tasks of :func:`claim_once_outcome` (``empty`` as there)."""
    return claim_once_outcome(ctx, queue, request, tenants, max_bytes=max_bytes,
                              answer_by=answer_by, empty=empty).tasks


def claim_once_outcome(ctx: Context, queue: str, request: ClaimRequest,
                       tenants: Sequence[str] | None = None, *, max_bytes: int = 0,
                       answer_by: float | None = None,
                       empty: list[str] | None = None) -> ClaimOutcome:
    """One pass of a claim (no waiting); ``answer_by`` (``time.monotonic()``): no pop or
    refill that could end after it starts. Whatever fails after a pop gives the popped
    tasks back (``give_back``) before the error goes up. The queue's limits cut what it
    hands out (per tenant in the claim script, queue-wide by reservations taken before
    the claim's pops: logic/claim_limits.py). ``empty``, when given, is extended with the tenants
    whose pair the claim found without ready work (nothing warm, no cold row a refill could
    bring); a queue-wide claim takes those out of the queue's ready-tenant index itself."""
    qs = ctx.queue_settings.get(queue)
    if qs.paused:
        return ClaimOutcome([])
    claimer = Claimer(ctx, queue, (request.lease_seconds or qs.lease_seconds) * 1000,
                      request.worker or "", ClaimBudget(max_bytes, answer_by),
                      ClaimLimits.of(ctx, queue, qs), qs.timeout_seconds)
    indexed = request.tenant is None and tenants is None
    try:
        got = claimer.models(_claim_pairs(claimer, ctx, queue, request, tenants))
    except BaseException:
        if indexed:
            ready_tenants.window_changed(ctx, queue)
        claimer.limits.flush()
        give_back(ctx, queue, claimer.popped_leases())
        raise
    claimer.limits.flush()
    if indexed and claimer.empty:
        ready_tenants.window_changed(ctx, queue)
        ready_tenants.forget(ctx, queue, claimer.empty)
    if not got and claimer.out_of_memory:
        # cold work waits but Valkey is full: 503 with Retry-After rather than an empty
        # answer (a claim that got tasks returns them: claims free Valkey memory)
        raise WarmTierFull()
    limited = claimer.limits.retry_after_ms if len(got) < request.max else None
    if limited is not None and not got and request.tenant is not None \
            and not _had_ready_work(claimer, request.tenant):
        # one tenant's claim with nothing of its own ready answers as on a queue name
        # nobody used: how much of the queue's limits others hold, or which limits the
        # queue has, is none of its business
        limited = None
    if empty is not None:
        empty.extend(claimer.empty)
    return ClaimOutcome(got, limited, failed_pairs=len(claimer.failures))


def _had_ready_work(claimer: Claimer, tenant: str) -> bool:
    """Whether the claim's one pair held ready tasks in Valkey: as its pop saw it, or, when
    the queue-wide limits left no room for a pop (cluster mode), as it holds them now. (Work
    waiting cold only does not count: that claim answers without ``retry_after_ms``, and the
    next one, once a refill brought the work warm, with it.)"""
    if claimer.ready_left is None:
        return claimer.ctx.warm.stats(claimer.queue, tenant)[0] > 0
    return claimer.ready_left > 0


def _claim_pairs(claimer: Claimer, ctx: Context, queue: str, request: ClaimRequest,
                 tenants: Sequence[str] | None) -> list[TaskFields]:
    """The claim's tasks from its pairs: one pair, or a fair rotation of several (a first
    pass of equal shares, then the rest from the tenants that still had work).

    The first pass sends the pops of the tenants whose full share it asks for whatever the
    others answer (the first ``wanted // share``) in one pipeline (``Claimer.pairs``), then
    handles each reply as a pop of its own, in rotation order; the rest of it, and the
    second pass, pop one pair at a time:

    =====================================  ===============================================
    case                                   the first pass
    =====================================  ===============================================
    one candidate, or fewer than two full  one pair at a time
    shares (``wanted // share < 2``)
    a queue-wide limit (``max_leased``,    one pair at a time: on a single server the take
    ``rate``)                              rides with the first pop, whose grant sets the
                                           later shares; each pop is cut to what the pops
                                           before it left of the grant and numbers its
                                           leases on from theirs (lease k holds unit k,
                                           logic/claim_limits.py)
    the time budget is up                  no pop
    a byte cap (``max_bytes``)             the rotation's first tenant alone (its part,
                                           its first task whatever it costs), then as
                                           below for the others: one round trip more
    otherwise                              one pipeline of full shares, then one pair at a
                                           time, each wanting what is still missing
    =====================================  ===============================================

    In the pipeline, the per-tenant limits are the claim script's, pair by pair. Under
    a byte cap the rotation's first tenant pops alone first, within its part of the cap
    but for its first task, which comes whatever it costs, as in a pop at a time: else a
    tenant whose tasks each pass a pipelined pop's part would get none at any claim while
    the others' smaller tasks fill the cap. Each pipelined pop may then cost its part of
    what is left (strictly: no pop's first task passes its part), so the pops stay within
    the cap together; a pop its part cut goes on to the second pass, whose first pop, while
    nothing is handed out yet, brings its first task whatever it costs. The inline refills
    follow the pipeline, in rotation order (the first tenant's, popped alone under a byte
    cap, comes before it, its pop after the refill within the same part); under
    ``answer_by`` a refill counts as holding popped tasks once any pop of the pipeline
    leased some (``ClaimBudget.may_refill``: the safe side).
    """
    if request.tenant is not None:
        candidates = [request.tenant]
    elif tenants is not None:
        candidates = list(tenants)
    else:
        # a window of the tenants with ready work, from one further than the last claim's
        # first: the turn goes round whatever the index gains or loses meanwhile
        candidates, registered = ready_tenants.claim_window(ctx, queue)
        if candidates:
            # (the registered tenants, mostly idle, stand in for the index: the next
            # window starts after this one, so a turn round them takes few claims)
            ctx.claim_turns[queue] = candidates[-1 if registered else 0]
    if request.tenant is None and (tenants is None or len(tenants) > 1):
        # a claim over the queue's tenants (logic/claim_isolation.py)
        claimer.isolate = True
        candidates = claim_isolation.usable(ctx, queue, candidates)
    if not candidates:
        return []
    out = _rotate(claimer, ctx, queue, request, tenants, candidates)
    if claimer.failures and not claimer.answered:
        raise claimer.failures[0]  # (every pair it tried failed: the claim's error)
    return out


def _rotate(claimer: Claimer, ctx: Context, queue: str, request: ClaimRequest,
            tenants: Sequence[str] | None, candidates: list[str]) -> list[TaskFields]:
    """The claim's tasks from ``candidates`` (the rest of :func:`_claim_pairs`)."""
    # reserve first (the queue-wide limits): every pop stays within the grant
    wanted = claimer.limits.reserve(request.max, len(candidates), claimer.lease_ms)
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
    out: list[TaskFields] = []
    had_more: list[str] = []
    # the tenants whose full share the first pass asks for whatever the others answer: their
    # pops go in one pipeline (see _claim_pairs' table)
    ahead = min(len(rotated), wanted // share)
    done = 0  # the tenants of the rotation the first pass popped already
    if ahead >= 2 and claimer.may_pipeline():
        budget = claimer.budget
        if budget.max_bytes:
            # under a byte cap the rotation's first tenant pops alone, its part of the cap
            # not strict: its first task comes whatever it costs, as in a pop at a time (a
            # strict part in the pipeline cannot promise it: a tenant whose tasks each pass
            # their part would wait behind the others' smaller ones at every claim)
            got = claimer.pair(rotated[0], share,
                               max(1, budget.remaining_bytes() // ahead))
            out.extend(got)
            if len(got) == share or (claimer.ready_left or 0) > 0:  # (or its part cut it)
                had_more.append(rotated[0])
            done = 1
        if ahead - done >= 2 and not budget.exhausted and claimer.may_pipeline():
            for tenant, (got, cut) in zip(rotated[done:],
                                          claimer.pairs(rotated[done:ahead], share),
                                          strict=False):
                out.extend(got)
                if len(got) == share or cut:
                    had_more.append(tenant)
            done = ahead
    for tenant in rotated[done:]:
        want = min(share, wanted - len(out))
        if want <= 0 or claimer.budget.exhausted:
            break
        before = claimer.limits.grant
        got = claimer.pair(tenant, want)
        out.extend(got)
        grant = claimer.limits.grant
        if before is None and grant is not None and grant < wanted:
            wanted = grant  # the grant came with this pop
            share = max(1, math.ceil(wanted / len(rotated)))
            want = min(want, share)
        if len(got) == want:
            had_more.append(tenant)
    for tenant in had_more:
        want = wanted - len(out)
        if want <= 0 or claimer.budget.exhausted:
            break
        out.extend(claimer.pair(tenant, want))
    return out
