"""Valkey masters the cron tick found not answering, remembered for ``WARM_DOWN_SECONDS``
(``Context.warm_down_until``, per process) so that the tick does not ask them again meanwhile.

A hung master costs each call a socket timeout (seconds), and a tick may meet one pair of
it per schedule: asked once per schedule, it would spend the pass's budget on the first
schedules and leave the others for later passes. What the tick does with a pair's master:

| the tick's call            | the master remembered down             | otherwise                |
| -------------------------- | -------------------------------------- | ------------------------ |
| registering the pair       | registered in PostgreSQL alone, its    | asked; a master that     |
| (``prepare_tick``)         | mode left for the cold -> warm mover   | fails is remembered      |
| withdrawing an occurrence  | refused without a call: the schedule   | asked; a master that     |
| (``schedules.withdraw``)   | is rolled back and listed failed, as   | fails is remembered      |
|                            | when the call fails                    |                          |

A master is asked again once its time is up. ``WarmTierFull`` (out of memory) answers, so
it marks no master down."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from tierq.errors import WarmTierFull, WarmTierUnavailable
from tierq.logic.context import Context

# How long a master that did not answer is not asked again: a call to one that hangs waits
# the socket timeout (10 s) on each of the cluster client's attempts, far past a pass's
# budget (2.5 s by default).
WARM_DOWN_SECONDS = 60.0


def known_down(ctx: Context, master: str | None) -> bool:
    """Whether ``master`` (``WarmTier.master_of``; None: unknown) failed within the last
    ``WARM_DOWN_SECONDS``; an entry whose time is up is forgotten."""
    if master is None:
        return False
    until = ctx.warm_down_until.get(master)
    if until is None:
        return False
    if until > time.monotonic():
        return True
    ctx.warm_down_until.pop(master, None)
    return False


def note_down(ctx: Context, master: str | None) -> None:
    """Remember that ``master`` did not answer (an unknown one, None, is not remembered)."""
    if master is not None:
        ctx.warm_down_until[master] = time.monotonic() + WARM_DOWN_SECONDS


@contextmanager
def asking(ctx: Context, queue: str, tenant: str) -> Iterator[None]:
    """Calls to the master of (queue, tenant) in the block: ``WarmTierUnavailable`` at once,
    without a call, while that master is remembered down; a block that raises
    ``WarmTierUnavailable`` (not ``WarmTierFull``) marks the master down."""
    master = ctx.warm.master_of(queue, tenant)
    if known_down(ctx, master):
        raise WarmTierUnavailable(
            "Valkey is not answering",
            detail=f"master {master or 'of the server'} did not answer within the last "
                   f"{WARM_DOWN_SECONDS:g} s; not asked again yet")
    try:
        yield
    except WarmTierFull:
        raise
    except WarmTierUnavailable:
        note_down(ctx, master)
        raise
