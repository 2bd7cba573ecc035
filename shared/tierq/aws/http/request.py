"""The request being handled (per thread), its caller and tenant pinning.

Route code reads the event through :func:`current_event` rather than ``router.current_event``:
the local stack serves requests of one function concurrently from several threads, and this
binding is per thread.

The caller is decided once per request by :func:`tierq.aws.http.access.authorize` (the resolver
binds it here before any route runs): an admin, a tenant, or the local gateway of
``tierq dev``. A tenant caller is pinned: naming another tenant (``tenant`` in the body, in
a task or in the query) is 403 ``forbidden``, enqueues without a tenant get the pinned one,
claims without a tenant claim only from it, and another tenant's tasks are reported as not
found. Admin and local callers are not pinned. Asking who the caller is on a thread that
handles no authorised request raises, so nothing defaults to an unpinned caller.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from tierq.aws.http.access import Caller
from tierq.errors import Forbidden

_local = threading.local()


def bind(event: APIGatewayProxyEventV2 | None, caller: Caller | None = None) -> None:
    _local.event = event
    _local.caller = caller


def current_event() -> APIGatewayProxyEventV2:
    event = getattr(_local, "event", None)
    if event is None:
        raise RuntimeError("no request is being handled on this thread")
    return event


def current_caller() -> Caller:
    caller = getattr(_local, "caller", None)
    if caller is None:
        raise RuntimeError("no authorised request is being handled on this thread")
    return caller


def pinned_tenant() -> str | None:
    """The tenant the caller is pinned to, or None for an admin (or local) caller."""
    return current_caller().pinned


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
