"""Which tenants of a queue may have ready work: the ones a queue-wide claim and the
consumer dispatcher visit.

Today this is every tenant registered on the queue (``ctx.pairs.tenants``): a claim
without a tenant, or a dispatcher pass, calls Valkey once per registered tenant, however
many are idle.
"""

from __future__ import annotations

from tierq.logic.context import Context


def tenants_with_ready_work(ctx: Context, queue: str) -> list[str]:
    """The tenants of ``queue`` to visit for ready work, in a stable order."""
    return list(ctx.pairs.tenants(queue))
