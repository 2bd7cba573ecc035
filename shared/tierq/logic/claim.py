"""Claim: pop ready tasks in order from the warm tier and lease them, with no Postgres round
trip on the warm path. Without a tenant, claims rotate fairly across the queue's tenants.
While cold work waits, a claim that leaves the warm set below its low-water mark refills it
inline (at most every LOW_WATER_EVERY seconds per process), so that the other claimers keep
finding work; one that finds it dry refills at once and takes what it still wants."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import orjson

from tierq.core.ids import new_token_prefix
from tierq.dal.warm_tier import Claimed
from tierq.logic import tiering
from tierq.logic.context import Context, from_ms, to_ms
from tierq.models.leases import CLAIMED_TASKS, ClaimedTask, ClaimRequest

POLL_FIRST_SLEEP = 0.05
POLL_MAX_SLEEP = 0.5
# a claim that finds the warm set dry promotes one batch and returns (the other claimers are
# not held up for long); the scheduled cold_to_warm fills the rest of the room
INLINE_REFILL = 2000
# refill before the warm set runs dry: below a quarter of warm_max (at most 1000 tasks)
LOW_WATER_FRACTION = 4
LOW_WATER_EVERY = 0.05
LOW_WATER_REFILL = 500  # small: the claim that tops up returns soon


def low_water(warm_max: int) -> int:
    return min(INLINE_REFILL // 2, warm_max // LOW_WATER_FRACTION)


def claim(ctx: Context, queue: str, request: ClaimRequest,
          tenants: Sequence[str] | None = None, *, max_bytes: int = 0) -> list[ClaimedTask]:
    """Claim up to ``request.max`` tasks; long-polls up to ``request.wait_seconds``.
    ``tenants`` restricts the rotation (a caller pinned to one tenant passes it).
    ``max_bytes`` caps the task data handed out (a Lambda response must stay under 6 MB):
    tasks beyond it stay in their places; the first task always comes."""
    deadline = time.monotonic() + request.wait_seconds
    sleep = POLL_FIRST_SLEEP
    while True:
        got = claim_once(ctx, queue, request, tenants, max_bytes=max_bytes)
        remaining = deadline - time.monotonic()
        if got or remaining <= 0:
            return got
        time.sleep(min(sleep, remaining))
        sleep = min(sleep * 2, POLL_MAX_SLEEP)


@dataclass
class _Claimer:
    """One claim call: its lease, its worker, and what is left of its byte budget."""

    ctx: Context
    queue: str
    lease_ms: int
    worker: str
    max_bytes: int  # 0: no cap
    used_bytes: int = 0

    @property
    def exhausted(self) -> bool:
        return self.max_bytes > 0 and self.used_bytes >= self.max_bytes

    def _budget(self) -> int:
        return 0 if self.max_bytes == 0 else max(1, self.max_bytes - self.used_bytes)

    def _pop(self, tenant: str, n: int) -> tuple[int, str, list[Claimed], int]:
        now_ms = to_ms(self.ctx.now())
        left, mode, claimed = self.ctx.warm.claim(
            self.queue, tenant, n=n, now_ms=now_ms, lease_ms=self.lease_ms,
            token_prefix=new_token_prefix(tenant), worker=self.worker,
            max_bytes=self._budget(), strict=self.used_bytes > 0)
        self.used_bytes += sum(len(c[3]) for c in claimed)
        return left, mode, claimed, now_ms

    def pair(self, tenant: str, n: int) -> list[ClaimedTask]:
        left, mode, claimed, now_ms = self._pop(tenant, n)
        out = self._tasks(tenant, claimed, now_ms)
        if mode != "cold":
            return out
        if len(claimed) < n and left == 0 and not self.exhausted:
            # the warm set ran dry while cold work may wait: refill now, not at the tick
            if tiering.refill(self.ctx, self.queue, tenant, limit=INLINE_REFILL).promoted:
                _, _, more, now_ms = self._pop(tenant, n - len(claimed))
                out.extend(self._tasks(tenant, more, now_ms))
        elif left < low_water(self.ctx.queue_settings.get(self.queue).warm_max):
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
            })
        return CLAIMED_TASKS.validate_python(fields)


def claim_once(ctx: Context, queue: str, request: ClaimRequest,
               tenants: Sequence[str] | None = None, *,
               max_bytes: int = 0) -> list[ClaimedTask]:
    qs = ctx.queue_settings.get(queue)
    if qs.paused:
        return []
    claimer = _Claimer(ctx, queue, (request.lease_seconds or qs.lease_seconds) * 1000,
                       request.worker or "", max_bytes)
    if request.tenant is not None:
        candidates = [request.tenant]
    else:
        candidates = list(tenants) if tenants is not None else ctx.pairs.tenants(queue)
    if not candidates:
        return []
    if len(candidates) == 1:
        return claimer.pair(candidates[0], request.max)

    # Fair rotation: start one tenant further each call; a first pass gives every tenant an
    # equal share, a second pass fills what is left from tenants that still had work.
    start = ctx.rotation.get(queue, 0) % len(candidates)
    ctx.rotation[queue] = start + 1
    rotated = candidates[start:] + candidates[:start]
    share = max(1, math.ceil(request.max / len(rotated)))
    out: list[ClaimedTask] = []
    had_more: list[str] = []
    for tenant in rotated:
        want = min(share, request.max - len(out))
        if want <= 0 or claimer.exhausted:
            break
        got = claimer.pair(tenant, want)
        out.extend(got)
        if len(got) == want:
            had_more.append(tenant)
    for tenant in had_more:
        want = request.max - len(out)
        if want <= 0 or claimer.exhausted:
            break
        out.extend(claimer.pair(tenant, want))
    return out
