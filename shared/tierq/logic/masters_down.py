"""Valkey masters the cron tick found not answering, remembered for ``WARM_DOWN_SECONDS``
(``Context.warm_down_until``, per process) so that the tick does not ask them again meanwhile.

A hung master costs each call a socket timeout (seconds), and a tick may meet one pair of
it per schedule. A pair whose master is remembered down is registered in PostgreSQL alone
(``prepare_tick``), its mode left for the cold -> warm mover. A master is asked again once
its time is up."""

from __future__ import annotations

import time

from tierq.logic.context import Context

# How long a master that did not answer is not asked again: one that times out (5 s to
# connect, 10 s to answer) would spend a pass's budget (2.5 s by default) on each pair.
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

