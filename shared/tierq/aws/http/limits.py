"""The tenant limits the HTTP layer applies to every request of a tenant caller, before its
route runs: requests a second (tierq.logic.tenant_limits; the claim route holds a long poll's
place itself). Admins and the local gateway's loopback caller are not limited."""

from __future__ import annotations

from tierq.aws.http.access import Caller
from tierq.aws.runtime import default_engine, logger
from tierq.errors import TooManyRequests
from tierq.logic import tenant_limits


def over_rate(caller: Caller | None, route: str) -> TooManyRequests | None:
    """The refusal (429) when ``caller`` is a tenant over its requests a second, else None
    (counted, or not countable: the request goes on)."""
    if caller is None or caller.kind != "tenant" or caller.tenant is None:
        return None
    try:
        ctx = default_engine().ctx
    except Exception:  # the route meets the same problem and answers it (fail open here)
        logger.exception("tenant limits: no engine; the request goes on")
        return None
    try:
        tenant_limits.admit_request(ctx, caller.tenant)
    except TooManyRequests as exc:
        logger.info("request limited", extra={"route": route, "tenant": caller.tenant,
                                              "retry_after": exc.retry_after})
        return exc
    return None
