"""One tenant's failing pair never fails a claim that spans several tenants.

A claim naming no tenant (or several) visits a window of the queue's tenants; their pairs
live on different Valkey masters in cluster mode. A pair whose master does not answer,
whose keys a script refuses (a key of the wrong type), or whose master is out of memory
fails that pair's pop alone:

| what fails                          | the claim                                      |
| ----------------------------------- | ---------------------------------------------- |
| one pair's pop, the others answered | answers with the others' tasks                 |
| a pair's inline refill              | keeps what that pair's pop leased              |
| every pair it tried                 | raises the first error (503 or 500), as a      |
|                                     | claim of one tenant does                       |
| the pop carrying the queue-wide     | raises: what the take reserved is not known,   |
| take (single server, ``rate`` or    | so the claim gives back all it popped          |
| ``max_leased``)                     |                                                |

This process's later claims over several tenants then pass the pair over for
``SET_ASIDE_SECONDS`` (and, for a master that did not answer, its other pairs too); not
after a master out of memory (claims and acks free it) nor a refill's database timeout.

A claim pinned to one tenant raises as before: its caller has no other work to get. A claim
over several tenants all of whose candidates are set aside answers empty (a long poll
waits for other work): a whole Valkey down still fails it, at the read of the queue's
ready tenants or when no pair it tried answered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TypeVar

import redis

from tierq.errors import DatabaseTimedOut, WarmTierFull, WarmTierUnavailable
from tierq.logic.context import Context

log = logging.getLogger(__name__)
K = TypeVar("K")

# How long a failed pair (or master) is passed over by this process's claims over several
# tenants: long enough that a master that times out is not waited for by every claim,
# short enough that a pair back in service is visited again soon.
SET_ASIDE_SECONDS = 10.0
# What one pair's pop or refill may raise without failing the claim's other pairs
# (WarmTierFull is a WarmTierUnavailable; DatabaseTimedOut: a refill's lock or statement
# timeout, the pair's rows held).
PAIR_ERRORS: tuple[type[Exception], ...] = (WarmTierUnavailable, redis.ResponseError,
                                            DatabaseTimedOut)


def set_aside(ctx: Context, queue: str, tenant: str, exc: Exception) -> None:
    """Pass the pair over (and its master, when it did not answer) for SET_ASIDE_SECONDS;
    logged once each time it is set aside. Not for a master out of memory, nor for a
    refill's database timeout."""
    if isinstance(exc, (WarmTierFull, DatabaseTimedOut)):
        return  # (a full master frees memory as claims and acks go on; a row held a while)
    until = time.monotonic() + SET_ASIDE_SECONDS
    pair = (queue, tenant)
    if ctx.claim_set_aside.get(pair, 0.0) <= time.monotonic():
        log.warning("claim on %r: tenant %r's pair failed; its tasks are passed over for "
                    "%.0f s: %s", queue, tenant, SET_ASIDE_SECONDS, exc,
                    extra={"queue": queue, "tenant": tenant})
    ctx.claim_set_aside[pair] = until
    if isinstance(exc, WarmTierUnavailable):
        master = ctx.warm.master_of(queue, tenant)
        if master:
            ctx.claim_masters_down[master] = until


def usable(ctx: Context, queue: str, candidates: Sequence[str]) -> list[str]:
    """``candidates`` without the pairs set aside (their own, or their master's)."""
    if not ctx.claim_set_aside and not ctx.claim_masters_down:
        return list(candidates)
    now = time.monotonic()
    _expire(ctx.claim_set_aside, now)
    _expire(ctx.claim_masters_down, now)
    masters = ctx.claim_masters_down
    kept = [t for t in candidates
            if (queue, t) not in ctx.claim_set_aside
            and not (masters and ctx.warm.master_of(queue, t) in masters)]
    return kept


def _expire(entries: dict[K, float], now: float) -> None:
    for key in [key for key, until in entries.items() if until <= now]:
        del entries[key]
