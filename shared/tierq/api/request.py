"""The request being handled (per thread) and tenant pinning.

Route code reads the event through :func:`current_event` rather than ``router.current_event``:
the local stack serves requests of one function concurrently from several threads, and this
binding is per thread.

Tenant pinning: API Gateway's JWT authoriser puts the token's claims in
``requestContext.authorizer.jwt.claims``. When a ``tenant`` claim is present, the caller may
only touch that tenant: naming another (``tenant`` in the body, in a task or in the query)
is 403 ``forbidden``, enqueues without a tenant get the pinned one, claims without a tenant
claim only from it, and another tenant's tasks are reported as not found. Without the claim
(IAM authorisation, the local stack) nothing is pinned.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any

from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from tierq.errors import Forbidden
from tierq.models.names import NAME_PATTERN

TENANT_CLAIM = "tenant"
_NAME = re.compile(NAME_PATTERN)
_local = threading.local()


def bind(event: APIGatewayProxyEventV2 | None) -> None:
    _local.event = event


def current_event() -> APIGatewayProxyEventV2:
    event = getattr(_local, "event", None)
    if event is None:
        raise RuntimeError("no request is being handled on this thread")
    return event


def jwt_claims() -> dict[str, Any]:
    context = current_event().raw_event.get("requestContext") or {}
    authorizer = context.get("authorizer") or {}
    jwt = authorizer.get("jwt") or {}
    claims = jwt.get("claims") or {}
    return claims if isinstance(claims, dict) else {}


def pinned_tenant() -> str | None:
    """The tenant the caller's token pins, or None when the request is not pinned."""
    value = jwt_claims().get(TENANT_CLAIM)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _NAME.match(value):
        raise Forbidden(
            "the token's tenant claim is not a valid tenant name",
            details=[{"field": "tenant", "message": "invalid tenant claim in the token"}],
        )
    return value


def check_tenant(named: str | None, field: str = "tenant") -> str | None:
    """The tenant a request may act for: the one it names, checked against the pinned one,
    or the pinned one when it names none."""
    pinned = pinned_tenant()
    if pinned is None or named is None:
        return named if named is not None else pinned
    if named != pinned:
        raise Forbidden(
            f"{field}: the caller is pinned to tenant {pinned!r} and may not name {named!r}",
            details=[{"field": field, "message": f"must be {pinned!r} (or omitted)"}],
        )
    return named


def check_tenants(named: Iterable[tuple[str, str | None]]) -> None:
    """Check every (field, tenant) pair a request names against the pinned tenant."""
    if pinned_tenant() is None:
        return
    for field, tenant in named:
        check_tenant(tenant, field)


def visible(tenant: str) -> bool:
    """Whether the caller may see data of ``tenant``."""
    pinned = pinned_tenant()
    return pinned is None or tenant == pinned
