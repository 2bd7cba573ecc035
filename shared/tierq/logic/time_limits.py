"""Time limits: the longest one attempt of a task may run (``timeout_seconds``).

A task's own limit (enqueued with it, kept in its row and its warm blob as ``"to"``) or else
its queue's (``QueueSettings.timeout_seconds``, passed to the claim script) is read by the
claim script that leases it (lua/claim.lua), which gives each such lease its limit in the
same call: the attempt's start (the claim's ``now_ms``) plus the limit, kept in the pair's
``limits`` set beside the lease. The lease's deadline is the sooner of its own and the limit
(:func:`cut_deadlines` reports the same in the claim's answer), and no heartbeat extends a
lease past it (lua/lease_extend.lua), so at the limit the lease runs out whatever its worker
does: an ack, a nack or a heartbeat after it is refused (``not_owner``).

The reaper then tells such a lease from one that merely expired (:func:`split`): a lease
that ran out at its limit (its deadline was the limit) timed out, and its attempt fails
through the nack's path (:func:`record`: ``timeout`` as its error, the attempt counted, a
retry after the queue's backoff, a dead letter past ``max_attempts``), where an expired
lease is put back in line at once, even when the reaper lists it after its limit. The script
that lists expired leases (lua/lease_expired.lua) knows each deadline: it removes the limit
of a lease whose deadline came first, so a listed lease keeps its limit only when the limit
ended it. The limit leaves with the lease (lua/lease_keys.lua).

Why the reaper and not the worker: the worker may be hung or gone; the limit holds whatever
it does. The worker is told the limit in the claimed task (``timeout_seconds``) and stops
its handler itself (tierq.client.worker)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tierq.dal.warm_tier import lease_member
from tierq.logic.context import Context, from_ms

# The error a timed-out attempt records (its prefix: the reason, as clients match it).
TIMEOUT_REASON = "timeout"


def error_text(attempt: int, seconds: int | None) -> str:
    """The ``last_error`` of an attempt that reached its time limit."""
    limit = "its time limit" if seconds is None else f"its time limit of {seconds}s"
    return f"{TIMEOUT_REASON}: attempt {attempt} ran past {limit}"


def effective(own: int | None, queue_default: int | None) -> int | None:
    """The limit of an attempt: the task's own, else its queue's; None for none."""
    return own if own is not None else queue_default


def cut_deadlines(now_ms: int, lease_ms: int, leases: Sequence[tuple[str, int]]
                  ) -> dict[str, datetime]:
    """The deadlines of new leases (task id, limit in seconds) of a claim made at ``now_ms``
    with leases of ``lease_ms``, by id, for those whose limit comes first: as lua/claim.lua
    scores them, ``now_ms`` plus the limit (the others keep ``now_ms`` plus ``lease_ms``)."""
    out: dict[str, datetime] = {}
    instants: dict[int, datetime] = {}  # (a claim's limits are mostly its queue's one)
    for task_id, seconds in leases:
        limit_ms = seconds * 1000
        if limit_ms < lease_ms:
            at = instants.get(limit_ms)
            if at is None:
                at = instants[limit_ms] = from_ms(now_ms + limit_ms)
            out[task_id] = at
    return out


def split(ctx: Context, queue: str, tenant: str, now_ms: int,
          listed: Sequence[tuple[str, str, int]]
          ) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """The leases the reaper listed as past their deadline, (id, token, attempt) each, split
    into (timed out: their limit ended them, expired). A listed lease keeps its limit only
    when its deadline was that limit (lua/lease_expired.lua removes the others'), so one
    that expired earlier and was reaped after its limit is still an expiry. One ZMSCORE of
    the pair's ``limits``."""
    if not listed:
        return [], []
    limits = ctx.warm.lease_limits(queue, tenant, [lease_member(task_id, token)
                                                   for task_id, token, _ in listed])
    timed_out: list[tuple[str, str, int]] = []
    expired: list[tuple[str, str, int]] = []
    for lease, limit in zip(listed, limits, strict=True):
        (timed_out if limit is not None and limit <= now_ms else expired).append(lease)
    return timed_out, expired
