"""A tenant caller's own limits on the HTTP API (requests a second, long polls in flight),
and every caller's long polls together.

The functions' concurrency is shared by every tenant (and capped by reserved concurrency:
template.yaml's ClaimReservedConcurrency), and a throttled function reaches every caller as
an API Gateway 5xx. These limits are met first, as a 429 with ``Retry-After``, counted in
Valkey:

| limit | setting (0: none) | key (a bucket, or reservations) |
| --- | --- | --- |
| a tenant's requests a second | ``TIERQ_TENANT_REQUESTS_PER_SECOND`` | ``tq:{~<t>}:requests`` |
| a tenant's long polls in flight | ``TIERQ_TENANT_LONG_POLLS`` | ``tq:{~<t>}:polls`` |
| all callers' long polls in flight | ``TIERQ_CLAIM_RESERVED_CONCURRENCY`` | ``tq:{~}:polls`` |

(the bucket holds ``TIERQ_TENANT_REQUESTS_BURST``; the cap over all callers is
``TIERQ_LONG_POLLS_PERCENT``, 80, of the claim function's reserved concurrency).

A request takes one token (``tenant_requests.lua``); a claim with ``wait_seconds > 0`` holds
a place until it ends, or for :data:`POLL_HOLD_MS` at most (``long_polls.lua``): first one
of its tenant's places, then one of all callers'. A task's read with ``wait_seconds`` (a
wait for its end, logic/waits.py) holds one of its tenant's places alone: it runs in the
admin function, not the claim function the cap over all callers protects. The per-tenant
cap alone does not keep the claim function from throttling (with the defaults, 20 tenants at
10 polls fill its 200): the cap over all callers keeps long polls at 80 % of it, the rest
for claims that do not wait.

Memory per tenant: the bucket is a hash of two fields (under 200 bytes), gone once it would
be full again (burst / rate + 1 s); the places are a sorted set of at most the cap's members
(~60 bytes each), gone with the last one's deadline. An idle tenant keeps nothing.

Only tenant callers are limited per tenant: an admin acts for the operator (API Gateway's
stage throttle and the functions' reserved concurrency bound it), the local gateway's
loopback caller is the developer. The cap over all callers counts every long poll, an
admin's too (it holds the same function).

When a limit cannot be counted — Valkey down or the master of the key's slot down, Valkey
answering an error (``BUSY`` with a long script, ``NOPERM``, a script error), no AWS
credentials to sign the cache's IAM token with, anything else — the limits **fail open**:
the request goes on, and a warning is logged. A Valkey outage then leaves every caller
unlimited by tierq but still bound by the claim function's reserved concurrency, and a
claim needs Valkey itself; failing closed would turn the outage into 429s for every
request, enqueues included, which otherwise go on into PostgreSQL (cold). A full cache still
answers these scripts (``allow-oom``).

The keys carry a time to live, unlike tierq's task keys: evicted under memory pressure, a
bucket comes back full and a count of long polls restarts from nothing, which loosens a
limit for a moment and loses no task.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from tierq.dal.warm_tier import ALL_POLLS_KEY, TenantKeys
from tierq.errors import TooManyRequests
from tierq.logic.context import Context

log = logging.getLogger(__name__)

# The longest a long poll's place is held when its claim does not give it back (the
# function died): the HTTP API answers every request within 30 s, plus a margin.
POLL_HOLD_MS = 35_000
# What a caller over a long-poll cap is told to wait: a poll ends within 20 s, often sooner.
POLL_RETRY_SECONDS = 1


def _warn(what: str, who: str, exc: Exception) -> None:
    log.warning("tenant limits: %s of %s not counted, the request goes on (fail open): "
                "%s: %s", what, who, type(exc).__name__, str(exc)[:200])


def admit_request(ctx: Context, tenant: str) -> None:
    """Count one request of ``tenant``; ``TooManyRequests`` when it is over its rate."""
    rate = ctx.settings.tenant_requests_per_second
    if rate <= 0:
        return
    burst = ctx.settings.tenant_requests_burst
    try:
        wait_ms = ctx.warm.tenant_request(tenant, rate=rate, burst=burst)
    except Exception as exc:  # (any failure to count: fail open, see the module's doc)
        _warn("request", f"tenant {tenant!r}", exc)
        return
    if wait_ms > 0:
        raise TooManyRequests(
            f"tenant {tenant!r} is over its {rate:g} requests a second (burst {burst}); "
            "retry after the Retry-After header",
            retry_after=math.ceil(wait_ms / 1000),
            details=[{"field": "tenant", "message": "requests a second over the limit"}])


@contextmanager
def long_poll(ctx: Context, tenant: str | None, *, claim: bool = True) -> Iterator[None]:
    """Hold a long poll's places while the block runs: one of ``tenant``'s (None: an admin,
    no tenant's), then (``claim``: a claim's, which holds the claim function) one of all
    callers'. ``TooManyRequests``, nothing run and nothing held, when either cap is
    reached; each place is given back when the block ends, or at ``POLL_HOLD_MS``."""
    with ExitStack() as places:
        tenant_cap = ctx.settings.tenant_long_polls
        if tenant is not None and tenant_cap > 0:
            places.enter_context(_place(
                ctx, TenantKeys.of(tenant).polls, tenant_cap, f"tenant {tenant!r}",
                TooManyRequests(
                    f"tenant {tenant!r} has {tenant_cap} long polls (claims and task "
                    "reads with wait_seconds > 0) in flight, its most; retry after the "
                    "Retry-After header, or claim without waiting",
                    retry_after=POLL_RETRY_SECONDS,
                    details=[{"field": "wait_seconds",
                              "message": "too many long polls in flight"}])))
        all_cap = ctx.settings.long_polls_cap
        if claim and all_cap > 0:
            places.enter_context(_place(
                ctx, ALL_POLLS_KEY, all_cap, "all callers",
                TooManyRequests(
                    f"{all_cap} long polls (claims with wait_seconds > 0) are in flight, "
                    "the most the service takes at once; retry after the Retry-After "
                    "header, or claim without waiting",
                    retry_after=POLL_RETRY_SECONDS,
                    details=[{"field": "wait_seconds",
                              "message": "too many long polls in flight in all"}])))
        yield


@contextmanager
def _place(ctx: Context, key: str, cap: int, who: str,
           refusal: TooManyRequests) -> Iterator[None]:
    """One place of ``key`` (at most ``cap`` held) while the block runs; ``refusal`` raised
    when none is left; not counted (fail open) when Valkey cannot count it."""
    reservation = secrets.token_hex(8)
    try:
        held = ctx.warm.poll_begin(key, cap=cap, reservation=reservation,
                                   hold_ms=POLL_HOLD_MS)
    except Exception as exc:  # (any failure to count: fail open, see the module's doc)
        _warn("long poll", who, exc)
        yield
        return
    if not held:
        raise refusal
    try:
        yield
    finally:
        try:
            ctx.warm.poll_end(key, reservation)
        except Exception as exc:  # (it expires by itself)
            _warn("end of a long poll", who, exc)
