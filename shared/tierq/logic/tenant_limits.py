"""A tenant caller's own limits on the HTTP API: requests a second and long polls in flight.

The functions' concurrency is shared by every tenant (and capped by reserved concurrency:
template.yaml's ClaimReservedConcurrency), and a throttled function reaches every caller as
an API Gateway 5xx. These limits make one tenant meet its own bound first, as a 429 with
``Retry-After``, counted in Valkey on keys of the tenant's own hash tag (one slot):

| limit | setting (0: none) | counted in (``tq:{~<tenant>}:…``) |
| --- | --- | --- |
| requests a second | ``TIERQ_TENANT_REQUESTS_PER_SECOND``, ``…_BURST`` | ``requests``: a bucket |
| long polls in flight | ``TIERQ_TENANT_LONG_POLLS`` | ``polls``: reservations by deadline |

A request takes one token (``tenant_requests.lua``); a claim with ``wait_seconds > 0`` holds
a place until it ends, or for :data:`POLL_HOLD_MS` at most (``tenant_polls.lua``). Memory
per tenant: the bucket is a hash of two fields (under 200 bytes), gone once it would be full
again (burst / rate + 1 s); the places are a sorted set of at most the cap's members (~60
bytes each), gone with the last one's deadline. An idle tenant keeps nothing.

Only tenant callers are limited: an admin acts for the operator (API Gateway's stage
throttle and the functions' reserved concurrency bound it), the local gateway's loopback
caller is the developer.

When Valkey cannot answer (down, or the master of the tenant's slot down; a full cache
still answers these scripts, which may write at its maximum), the limits **fail open**:
the request goes on, and a warning is logged. A Valkey outage then leaves every tenant
unlimited by tierq but still bound by the claim function's reserved concurrency,
and a claim needs Valkey itself; failing closed would turn the outage into 429s for every
request, enqueues included, which otherwise go on into PostgreSQL (cold).

The keys carry a time to live, unlike tierq's task keys: evicted under memory pressure, a
bucket comes back full and a tenant's count of long polls restarts from nothing, which
loosens a limit for a moment and loses no task.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from tierq.errors import TooManyRequests, WarmTierUnavailable
from tierq.logic.context import Context

log = logging.getLogger(__name__)

# The longest a long poll's place is held when its claim does not give it back (the
# function died): the HTTP API answers every request within 30 s, plus a margin.
POLL_HOLD_MS = 35_000
# What a tenant over its long polls is told to wait: a poll ends within 20 s, often sooner.
POLL_RETRY_SECONDS = 1


def _warn(what: str, tenant: str, exc: Exception) -> None:
    log.warning("tenant limits: %s of tenant %r not counted, the request goes on (fail "
                "open): %s", what, tenant, type(exc).__name__)


def admit_request(ctx: Context, tenant: str) -> None:
    """Count one request of ``tenant``; ``TooManyRequests`` when it is over its rate."""
    rate = ctx.settings.tenant_requests_per_second
    if rate <= 0:
        return
    burst = ctx.settings.tenant_requests_burst
    try:
        wait_ms = ctx.warm.tenant_request(tenant, rate=rate, burst=burst)
    except WarmTierUnavailable as exc:
        _warn("request", tenant, exc)
        return
    if wait_ms > 0:
        raise TooManyRequests(
            f"tenant {tenant!r} is over its {rate:g} requests a second (burst {burst}); "
            "retry after the Retry-After header",
            retry_after=math.ceil(wait_ms / 1000),
            details=[{"field": "tenant", "message": "requests a second over the limit"}])


@contextmanager
def long_poll(ctx: Context, tenant: str) -> Iterator[None]:
    """Hold one of ``tenant``'s long-poll places while the block runs (``TooManyRequests``,
    nothing run, when all are held); given back when it ends, or at ``POLL_HOLD_MS``."""
    cap = ctx.settings.tenant_long_polls
    if cap <= 0:
        yield
        return
    reservation = secrets.token_hex(8)
    try:
        held = ctx.warm.tenant_poll_begin(tenant, cap=cap, reservation=reservation,
                                          hold_ms=POLL_HOLD_MS)
    except WarmTierUnavailable as exc:
        _warn("long poll", tenant, exc)
        yield
        return
    if not held:
        raise TooManyRequests(
            f"tenant {tenant!r} has {cap} long polls (claims with wait_seconds > 0) in "
            "flight, its most; retry after the Retry-After header, or claim without waiting",
            retry_after=POLL_RETRY_SECONDS,
            details=[{"field": "wait_seconds", "message": "too many long polls in flight"}])
    try:
        yield
    finally:
        try:
            ctx.warm.tenant_poll_end(tenant, reservation)
        except WarmTierUnavailable as exc:  # (it expires by itself)
            _warn("end of a long poll", tenant, exc)
