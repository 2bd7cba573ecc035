"""One tenant's failing pair never fails a claim that spans several tenants.

A claim naming no tenant (or several) visits a window of the queue's tenants; their pairs
live on different Valkey masters in cluster mode. What one pair's pop or inline refill may
raise, and what the claim does:

| what fails                                | the claim                                    |
| ----------------------------------------- | -------------------------------------------- |
| a pair's master does not answer (cluster) | goes on with the others; the master's other  |
|                                           | pairs are passed over from then on           |
| a script refuses the pair's keys (a key   | goes on with the others                      |
| of the wrong type, an entry it cannot     |                                              |
| read)                                     |                                              |
| a refill's database timeout               | keeps what the pair's pop leased; no more    |
|                                           | inline refills in this claim                 |
| every pair it tried                       | raises the first error (503 or 500), as a    |
|                                           | claim of one tenant does                     |
| the single server does not answer, a      | raises, giving back what it popped: every    |
| reply for the whole server                | pair would fail alike                        |
| (``dal/valkey_replies.server_wide``)      |                                              |
| the pop carrying the queue-wide take      | raises: what the take reserved is not known  |
| (single server, ``rate``/``max_leased``)  |                                              |
| the master of the queue's ready-tenant    | its window comes from the queue's registered |
| index (cluster)                           | tenants (logic/ready_tenants.py)             |

A pair, or a master, that failed is then passed over by this process's claims over several
tenants for ``SET_ASIDE_SECONDS``, so a hung master costs one socket timeout per period,
not one per claim; not after a master out of memory (claims and acks free it) nor a
refill's database timeout. A claim pinned to one tenant raises as before: its caller has no
other work to get. A claim over several tenants all of whose candidates are set aside
answers empty (a long poll waits for other work); each failure is counted in the claim's
outcome (``ClaimOutcome.failed_pairs``, the HTTP route's ``ClaimPairsFailed`` metric), so
an outage that answers empty claims still shows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TypeVar

import redis

from tierq.dal.valkey_replies import server_wide
from tierq.errors import DatabaseTimedOut, WarmTierFull, WarmTierUnavailable
from tierq.logic.context import Context

log = logging.getLogger(__name__)
K = TypeVar("K")

# How long a failed pair (or master) is passed over by this process's claims over several
# tenants: long enough that a master that times out is not waited for by every claim,
# short enough that a pair back in service is visited again soon.
SET_ASIDE_SECONDS = 10.0


def isolable(ctx: Context, exc: Exception) -> bool:
    """Whether ``exc`` is one pair's failure (the module's table), which a claim over
    several tenants goes on past."""
    if isinstance(exc, DatabaseTimedOut | WarmTierFull):
        return True
    if isinstance(exc, WarmTierUnavailable):
        return not ctx.warm.single_server  # (one server down: every pair is)
    if isinstance(exc, redis.ResponseError):
        return not server_wide(exc)
    return False


def set_aside(ctx: Context, queue: str, tenant: str, exc: Exception) -> None:
    """Pass the pair over (and its master, when it did not answer) for SET_ASIDE_SECONDS;
    logged once each time it is set aside. Not for a master out of memory, nor for a
    refill's database timeout."""
    if isinstance(exc, WarmTierFull | DatabaseTimedOut):
        return
    now = time.monotonic()
    pair = (queue, tenant)
    if ctx.claim_set_aside.get(pair, 0.0) <= now:
        log.warning("claim on %r: tenant %r's pair failed; its tasks are passed over for "
                    "%.0f s: %s", queue, tenant, SET_ASIDE_SECONDS, exc,
                    extra={"queue": queue, "tenant": tenant})
    until = now + SET_ASIDE_SECONDS
    ctx.claim_set_aside[pair] = until
    if isinstance(exc, WarmTierUnavailable):
        set_master_aside(ctx, ctx.warm.master_of(queue, tenant))


def passed_over(ctx: Context, queue: str, tenant: str) -> bool:
    """Whether the pair, or its master, is set aside now."""
    now = time.monotonic()
    until = ctx.claim_set_aside.get((queue, tenant))
    if until is not None and until > now:
        return True
    if not ctx.claim_masters_down:
        return False
    return master_passed_over(ctx, ctx.warm.master_of(queue, tenant))


def master_passed_over(ctx: Context, master: str | None) -> bool:
    """Whether ``master`` (``WarmTier.master_of``; None or "": not known) is set aside now."""
    until = ctx.claim_masters_down.get(master) if master else None
    return until is not None and until > time.monotonic()


def set_master_aside(ctx: Context, master: str | None) -> None:
    """Pass ``master`` over for SET_ASIDE_SECONDS (a master not known is not remembered)."""
    if master:
        ctx.claim_masters_down[master] = time.monotonic() + SET_ASIDE_SECONDS


def usable(ctx: Context, queue: str, candidates: Sequence[str]) -> list[str]:
    """``candidates`` without the pairs set aside (their own, or their master's)."""
    if not ctx.claim_set_aside and not ctx.claim_masters_down:
        return list(candidates)
    now = time.monotonic()
    _expire(ctx.claim_set_aside, now)
    _expire(ctx.claim_masters_down, now)
    return [t for t in candidates if not passed_over(ctx, queue, t)]


def _expire(entries: dict[K, float], now: float) -> None:
    """Drop the entries whose time is up. Safe while other threads add or drop entries:
    ``dict.copy()`` runs no Python code while it reads the dict (``list(entries.items())``
    makes a tuple per item, and a tuple's allocation may start the cycle collector, whose
    finalisers can hand the GIL to a thread that changes the dict meanwhile), and ``pop``
    of a key another thread dropped first does nothing."""
    for key, until in entries.copy().items():
        if until <= now:
            entries.pop(key, None)
