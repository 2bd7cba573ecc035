"""Queue-wide capacity: the limits that span a queue's tenants, whose pairs live in other
cluster slots (``max_leased`` and ``rate`` of the queue's settings), and any other count a
caller must keep under a bound across processes (the consumer dispatcher's
``max_concurrency`` of invocations).

A *pool* of a queue is a sorted set on the queue's own hash tag (``tq:{queue}:held:<pool>``)
of reservations scored by their deadline, with their counts beside it
(lua/capacity_pool.lua): a take of N units is one entry, and its units ``<holder>1`` ..
``<holder>N`` leave it one by one, each at most once. A caller takes reservations *before*
it starts what they stand for, gives back those it did not use and those whose work is done,
and moves their deadline on while the work goes on. A reservation whose deadline has passed
counts for nothing: a process that dies between the steps keeps nothing past the deadline
it asked for, and nothing relies on key TTLs (a cache at its maximum evicts keys with a TTL
first).

The claims' own pool is ``LEASES_POOL``: a claim reserves before its pops (on a single
server in its first pair's script) and the reservation unit of each lease is named after
its token (``warm_tier.reservation_of``), so an ack, nack, release or heartbeat finds it
without a lookup (logic/leases.py).

Usage (the dispatcher's ``max_concurrency``)::

    held = limits.take(ctx, queue, "invocations", limit=max_concurrency,
                       hold_seconds=function_timeout + margin)
    if not held.count:
        ...  # at the limit: try again in held.retry_after_ms
    try:
        ...  # invoke; a long one may call limits.extend(ctx, held, seconds)
    finally:
        limits.give_back(ctx, held)
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence

from tierq.core.lazy import lazy_dataclass
from tierq.logic.context import Context, to_ms

# The pool of the claims' leases (max_leased).
LEASES_POOL = "leases"
_POOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


@lazy_dataclass(frozen=True)
class Held:
    """Reservations held in one pool of a queue until ``deadline_ms`` (epoch ms, the
    caller's clock as every lease deadline); ``retry_after_ms`` (0 when every unit asked
    for was granted) says when asking again is worth it."""

    queue: str
    pool: str
    members: tuple[str, ...]
    deadline_ms: int
    retry_after_ms: int

    @property
    def count(self) -> int:
        return len(self.members)


def _check_pool(pool: str) -> None:
    if not _POOL_NAME.match(pool):
        raise ValueError(f"pool {pool!r}: lower-case letters, digits and _ (at most 32), "
                         "starting with a letter")


def take(ctx: Context, queue: str, pool: str, *, limit: int, hold_seconds: float,
         want: int = 1, holder: str | None = None) -> Held:
    """Take up to ``want`` reservations of ``pool`` of ``queue``, of which at most ``limit``
    may be held at once (counting those whose deadline is ahead), held for
    ``hold_seconds``. Atomic on the queue's slot: concurrent callers never hold more than
    ``limit`` together. ``holder`` (default: random; it ends with ``~``) names the take's
    entry and prefixes its units' names (a take under a holder still held replaces it)."""
    _check_pool(pool)
    if limit < 1 or want < 0 or hold_seconds <= 0:
        raise ValueError("limit must be >= 1, want >= 0 and hold_seconds > 0")
    holder = holder if holder is not None else f"{secrets.token_hex(12)}~"
    if not holder.endswith("~"):
        raise ValueError(f"holder {holder!r} must end with '~' (its units are <holder><k>)")
    now_ms = to_ms(ctx.now())
    deadline_ms = now_ms + max(1, round(hold_seconds * 1000))
    got = ctx.warm.take_capacity(queue, pool, want=want, now_ms=now_ms,
                                 deadline_ms=deadline_ms, holder=holder, max_held=limit)
    return Held(queue, pool, tuple(got.members(holder)), deadline_ms, got.retry_after_ms)


def extend(ctx: Context, held: Held, hold_seconds: float) -> Held:
    """Hold the reservations ``hold_seconds`` from now (never shorter than before). A
    reservation that expired or was given back meanwhile is not taken again: the result
    names only those still held."""
    now_ms = to_ms(ctx.now())
    deadline_ms = max(now_ms + max(1, round(hold_seconds * 1000)), held.deadline_ms)
    after = ctx.warm.extend_capacity(held.queue, held.pool, now_ms=now_ms, deadlines=[
        (member, deadline_ms) for member in held.members])
    still = [m for m, d in zip(held.members, after, strict=True) if d > now_ms]
    return Held(held.queue, held.pool, tuple(still), deadline_ms, 0)


def give_back(ctx: Context, held: Held, members: Sequence[str] | None = None) -> int:
    """Give back reservations (all of ``held``, or ``members`` of it): finished or unused.
    Returns how many were given back: each is given back at most once (a reservation
    whose deadline has passed counts until a take sweeps it)."""
    return ctx.warm.return_capacity(held.queue, held.pool,
                                    held.members if members is None else members)


def in_use(ctx: Context, queue: str, pool: str) -> int:
    """Reservations of ``pool`` held now (deadline ahead)."""
    _check_pool(pool)
    return ctx.warm.capacity_use(queue, pool, now_ms=to_ms(ctx.now()))[0]
