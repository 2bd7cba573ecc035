"""Fair shares of push delivery's concurrency: each queue's share of the dispatcher's threads
(:func:`queue_shares`) and each tenant's share of its queue's running invocations
(:func:`tenant_share`), so that slow invocations of one queue or tenant hold only their
share while others have work (the rules are in :mod:`tierq.logic.dispatch`)."""

from __future__ import annotations

import math
from collections.abc import Mapping


def queue_shares(total: int, demands: Mapping[str, int]) -> dict[str, int]:
    """How many of ``total`` threads each queue may hold now, given how many it would use
    (``demands``: its running batches, or the batches it would run if due): a max-min fair
    split. The queues are taken from the smallest demand up, each allowed an equal part of
    what is left (rounded up, at least 1); one that needs less than its part leaves the
    rest to the others, and from the first that needs as much every queue gets that part.
    A queue alone may use all. (Rounded up, the shares may add up to a little more than
    ``total``: the threads free bound them together.)"""
    shares: dict[str, int] = {}
    left = total
    ordered = sorted(demands.items(), key=lambda item: (item[1], item[0]))
    for i, (queue, demand) in enumerate(ordered):
        level = max(1, math.ceil(left / (len(ordered) - i)))
        if demand >= level:
            shares.update((later, level) for later, _ in ordered[i:])
            break
        shares[queue] = level
        left -= demand
    return shares


def tenant_share(limit: int, tenants: int) -> int:
    """How many of a queue's ``limit`` running invocations one tenant may hold while
    ``tenants`` tenants (those with ready work or running batches) share it: an equal
    part, rounded up, at least 1; all of it for a tenant alone."""
    return max(1, math.ceil(limit / max(1, tenants)))
