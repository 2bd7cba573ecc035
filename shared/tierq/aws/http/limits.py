"""The tenant limits the HTTP layer applies to every request of a tenant caller, before its
route runs: requests a second (tierq.logic.tenant_limits; the claim route holds a long poll's
place itself). Admins and the local gateway's loopback caller are not limited."""

from __future__ import annotations

from typing import Any

import orjson

from tierq.aws.http.access import Caller
from tierq.aws.runtime import default_engine, logger
from tierq.errors import TooManyRequests
from tierq.logic import tenant_limits


def too_many(exc: TooManyRequests) -> dict[str, Any]:
    """The 429 answer, with ``Retry-After``."""
    return {
        "statusCode": exc.status,
        "headers": {"Content-Type": "application/json", "Retry-After": str(exc.retry_after)},
        "body": orjson.dumps(exc.to_body()).decode(),
        "isBase64Encoded": False,
        "cookies": [],
    }


def over_rate(caller: Caller | None, route: str) -> dict[str, Any] | None:
    """The 429 answer when ``caller`` is a tenant over its requests a second, else None
    (counted: the request goes on)."""
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
        return too_many(exc)
    return None
