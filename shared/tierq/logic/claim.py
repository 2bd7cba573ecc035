"""Claim: pop ready tasks in order from the warm tier and lease them, with no Postgres round
trip on the warm path. Without a tenant, claims rotate fairly across the queue's tenants.
A claim that finds the warm set empty while cold work waits refills it inline."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from tierq.core.ids import new_token_prefix
from tierq.logic import admission, tiering
from tierq.logic.context import Context, from_ms, to_ms
from tierq.models.leases import ClaimedTask, ClaimRequest

POLL_FIRST_SLEEP = 0.05
POLL_MAX_SLEEP = 0.5
# a claim that finds the warm set dry promotes one batch and returns (the other claimers are
# not held up for long); the scheduled cold_to_warm fills the rest of the room
INLINE_REFILL = 2000


def claim(ctx: Context, queue: str, request: ClaimRequest,
          tenants: Sequence[str] | None = None) -> list[ClaimedTask]:
    """Claim up to ``request.max`` tasks; long-polls up to ``request.wait_seconds``.
    ``tenants`` restricts the rotation (a caller pinned to one tenant passes it)."""
    deadline = time.monotonic() + request.wait_seconds
    sleep = POLL_FIRST_SLEEP
    while True:
        got = claim_once(ctx, queue, request, tenants)
        remaining = deadline - time.monotonic()
        if got or remaining <= 0:
            return got
        time.sleep(min(sleep, remaining))
        sleep = min(sleep * 2, POLL_MAX_SLEEP)


def claim_once(ctx: Context, queue: str, request: ClaimRequest,
               tenants: Sequence[str] | None = None) -> list[ClaimedTask]:
    qs = ctx.queue_settings.get(queue)
    if qs.paused:
        return []
    lease_ms = (request.lease_seconds or qs.lease_seconds) * 1000
    worker = request.worker or ""
    if request.tenant is not None:
        candidates = [request.tenant]
    else:
        candidates = list(tenants) if tenants is not None else ctx.pairs.tenants(queue)
    if not candidates:
        return []
    if len(candidates) == 1:
        return _claim_pair(ctx, queue, candidates[0], request.max, lease_ms, worker)

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
        if want <= 0:
            break
        got = _claim_pair(ctx, queue, tenant, want, lease_ms, worker)
        out.extend(got)
        if len(got) == want:
            had_more.append(tenant)
    for tenant in had_more:
        want = request.max - len(out)
        if want <= 0:
            break
        out.extend(_claim_pair(ctx, queue, tenant, want, lease_ms, worker))
    return out


def _claim_pair(ctx: Context, queue: str, tenant: str, n: int, lease_ms: int,
                worker: str) -> list[ClaimedTask]:
    now_ms = to_ms(ctx.now())
    left, mode, claimed = ctx.warm.claim(queue, tenant, n=n, now_ms=now_ms, lease_ms=lease_ms,
                                         token_prefix=new_token_prefix(tenant), worker=worker)
    # the warm set ran dry while the queue is in cold mode: refill now, not at the next tick
    if (len(claimed) < n and left == 0 and mode == "cold"
            and tiering.refill(ctx, queue, tenant, limit=INLINE_REFILL).promoted):
            now_ms = to_ms(ctx.now())
            _, _, more = ctx.warm.claim(queue, tenant, n=n - len(claimed), now_ms=now_ms,
                                        lease_ms=lease_ms, token_prefix=new_token_prefix(tenant),
                                        worker=worker)
            claimed.extend(more)
    expires = from_ms(now_ms + lease_ms)
    out = []
    for c in claimed:
        body = admission.decode_blob(c.blob)
        out.append(ClaimedTask(
            id=c.id,  # type: ignore[arg-type]
            queue=queue,
            tenant=tenant,
            key=body["k"],
            priority=body["pr"],
            payload=body["p"],
            attempt=c.attempt,
            max_attempts=body["m"],
            lease_token=c.token,
            lease_expires_at=expires,
            redelivered=c.attempt > 1,
            enqueued_at=from_ms(body["c"]),
        ))
    return out
