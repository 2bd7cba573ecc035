"""Who the caller is, and which routes it may use: the one place tierq decides access.

Every request of the HTTP API passes :func:`authorize` (called by the resolver's
``resolve()`` before any route runs). A route is one of three kinds (``ROUTE_ACCESS``):

- ``public``: the OpenAPI document and the dashboard page (static content; no token);
- ``tenant``: a tenant caller may use it, scoped to its tenant; an admin too, for any tenant;
- ``admin``: only an admin caller.

The caller, from the claims API Gateway's JWT authoriser puts in
``requestContext.authorizer.jwt.claims``:

- **admin**: the ``scope`` claim holds the admin scope (``TIERQ_ADMIN_SCOPE``, default
  ``tierq/admin``) as one whole word. The HTTP API hands claims over as strings: a scope
  string is space-separated, an array claim arrives as ``"[a b]"``; both are split into
  words and compared whole, never by substring. An admin acts for any tenant (a tenant
  claim beside the scope is ignored).
- **tenant**: otherwise, the tenant claim (``TIERQ_TENANT_CLAIM``, default ``tenant``;
  Cognito: ``custom:tenant``) names the one tenant the caller may touch. It must be a valid
  tenant name in full.
- anything else — no claims at all (an IAM/SigV4-authorised request carries none), claims
  with neither the tenant claim nor the admin scope, an invalid tenant claim — is **403 on
  every route** but the public ones.

An admin or tenant caller also has a **subject**: the token's ``sub`` claim, or its
``client_id`` when it has no ``sub``, tagged with the claim it came from (``sub:<value>``,
``client_id:<value>``), behind the token's issuer when it names one (``iss``:
:func:`subject_of`); None when the token has neither ``sub`` nor ``client_id``. It says whose
``Idempotency-Key`` a request carries (:func:`tierq.aws.http.idempotency.caller_scope`),
never what the caller may do.

The one exception is the local gateway of ``tierq dev``: a request it received without the
``x-tierq-jwt-claims`` header while listening on a loopback address is a ``local`` caller
with an admin's reach. The gateway says so by putting :data:`LOCAL_GATEWAY` — an object
that exists only inside this process — into the event it builds; an event that reached a
function from API Gateway is decoded JSON and can never hold it, so no request can claim it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from tierq.config import get_settings
from tierq.errors import Forbidden
from tierq.models.names import DEFAULT_TENANT, NAME_PATTERN

RouteKind = Literal["public", "tenant", "admin"]
CallerKind = Literal["admin", "tenant", "local"]

# Every route of template.yaml (method and path as API Gateway writes its route keys).
# tests/handlers/test_access.py checks that this covers exactly the template's routes; a
# route missing here is treated as an admin route.
ROUTE_ACCESS: dict[str, RouteKind] = {
    "POST /v1/queues/{queue}/tasks": "tenant",
    "POST /v1/flows": "tenant",
    "POST /v1/queues/{queue}/claims": "tenant",
    "POST /v1/queues/{queue}/payloads": "tenant",
    "POST /v1/queues/{queue}/payloads/fetch": "tenant",
    "POST /v1/queues/{queue}/acks": "tenant",
    "POST /v1/queues/{queue}/nacks": "tenant",
    "POST /v1/queues/{queue}/releases": "tenant",
    "POST /v1/queues/{queue}/heartbeats": "tenant",
    "GET /v1/queues": "tenant",
    "GET /v1/queues/{queue}": "tenant",
    "PUT /v1/queues/{queue}": "admin",
    "GET /v1/queues/{queue}/tasks/{id}": "tenant",
    "DELETE /v1/queues/{queue}/tasks/{id}": "tenant",
    "POST /v1/queues/{queue}/tasks/{id}/cancel": "tenant",
    "GET /v1/queues/{queue}/dlq": "tenant",
    "POST /v1/queues/{queue}/dlq/replay": "tenant",
    "POST /v1/queues/{queue}/dlq/purge": "tenant",
    "GET /v1/metrics/queues/detailed": "tenant",
    "GET /v1/metrics/queues/running": "tenant",
    "GET /v1/metrics/consumers": "admin",
    "GET /v1/queues/{queue}/throughput": "tenant",
    "GET /v1/schedules": "tenant",
    "PUT /v1/schedules/{name}": "tenant",
    "GET /v1/schedules/{name}": "tenant",
    "DELETE /v1/schedules/{name}": "tenant",
    "GET /v1/openapi.json": "public",
    "GET /dashboard": "public",
}

# Where the local gateway puts LOCAL_GATEWAY in the events it builds.
LOCAL_GATEWAY_KEY = "tierq.local_gateway"


class _LocalGateway:
    """The type of LOCAL_GATEWAY (one instance per process)."""

    def __repr__(self) -> str:
        return "<tierq local gateway, loopback, no claims header>"


LOCAL_GATEWAY = _LocalGateway()

_TENANT_NAME = re.compile(NAME_PATTERN)


def _path_segments(path: str) -> tuple[str | None, ...]:
    """A route's path as its segments, None for a parameter (``{queue}``: one whole
    segment, as every route of ROUTE_ACCESS has them); compared segment by segment, not as
    a regular expression, which would cost each function's cold start ~30 compilations."""
    segments = tuple(None if part.startswith("{") and part.endswith("}") else part
                     for part in path.split("/"))
    if any(part is not None and ("{" in part or "}" in part) for part in segments):
        raise ValueError(f"{path}: a parameter must be a whole segment")
    return segments


_ROUTES: list[tuple[str, tuple[str | None, ...], RouteKind]] = [
    (key.split(" ", 1)[0], _path_segments(key.split(" ", 1)[1]), kind)
    for key, kind in ROUTE_ACCESS.items()
]
_STRICTNESS: dict[RouteKind, int] = {"public": 0, "tenant": 1, "admin": 2}


def _matches(route: tuple[str | None, ...], parts: list[str]) -> bool:
    """Whether a path's segments ``parts`` match ``route``'s: each literal segment equal,
    each parameter a non-empty segment."""
    return len(route) == len(parts) and all(
        part if segment is None else part == segment
        for segment, part in zip(route, parts, strict=True))


def route_kind(method: str, path: str) -> RouteKind:
    """The kind of the route a request goes to; the strictest when several patterns match,
    ``admin`` when none does (an unlisted route is closed to tenants)."""
    method, parts = method.upper(), path.split("/")
    kinds = [kind for m, route, kind in _ROUTES if m == method and _matches(route, parts)]
    return max(kinds, key=_STRICTNESS.__getitem__) if kinds else "admin"


@dataclass(frozen=True)
class Caller:
    """Who is calling: an admin, a tenant (``tenant`` names it) or the local gateway; and the
    subject of its token (:func:`subject_of`), None for the local gateway."""

    kind: CallerKind
    tenant: str | None = None
    subject: str | None = None

    @property
    def pinned(self) -> str | None:
        """The tenant the caller is limited to; None for admin and local callers."""
        return self.tenant if self.kind == "tenant" else None


def claim_words(value: Any) -> list[str]:
    """The words of a claim as the HTTP API delivers it: a space-separated string, or an
    array rendered as ``"[a b]"`` (a real list, as some test events carry, is taken too)."""
    if isinstance(value, list):
        return [word for item in value if isinstance(item, str) for word in item.split()]
    if not isinstance(value, str):
        return []
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return text.split()


def _member(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else None


def authorizer_of(event: dict[str, Any]) -> dict[str, Any]:
    """``requestContext.authorizer`` of an event ({} when absent)."""
    authorizer = _member(_member(event, "requestContext"), "authorizer")
    return authorizer if isinstance(authorizer, dict) else {}


def jwt_claims(event: dict[str, Any]) -> dict[str, Any]:
    """The JWT claims API Gateway's authoriser put in the event ({} when none)."""
    claims = _member(_member(authorizer_of(event), "jwt"), "claims")
    return claims if isinstance(claims, dict) else {}


SUBJECT_CLAIMS = ("sub", "client_id")


def subject_of(claims: dict[str, Any]) -> str | None:
    """Whom the token was issued to, tagged with the claim that says so: ``sub:<sub>``, else
    ``client_id:<client_id>`` (an OAuth client-credentials token may carry only that), else
    None; the first non-empty string of the two wins. A token naming its issuer (``iss``, a
    non-empty string) has it in front, with its length: ``iss:<n>:<iss>|sub:<sub>``, so two
    identity providers' tokens with an equal ``sub`` are two subjects (the length keeps an
    issuer and a value that holds ``|`` from reading as another pair).

    ``sub`` wins because it names the principal: in a Cognito user's access token ``sub`` is
    the user and ``client_id`` the app client every user of the app shares. A Cognito
    client-credentials token carries the app client's id in both, and is always
    ``sub:<id>``. The tag keeps apart a ``sub`` of one identity provider and an equal
    ``client_id`` of another: they never share idempotency keys. The value is kept as given
    (even a lone surrogate, which JSON can carry: the scope encodes it safely,
    :func:`tierq.logic.idempotency.scope_key`)."""
    for name in SUBJECT_CLAIMS:
        value = claims.get(name)
        if isinstance(value, str) and value:
            issuer = claims.get("iss")
            if isinstance(issuer, str) and issuer:
                return f"iss:{len(issuer)}:{issuer}|{name}:{value}"
            return f"{name}:{value}"
    return None


def _refuse(message: str, reason: str) -> Forbidden:
    return Forbidden(message, details=[{"field": "authorization", "message": reason}])


def identify(event: dict[str, Any]) -> Caller:
    """The caller of a request; Forbidden when it is neither a tenant nor an admin."""
    claims = jwt_claims(event)
    if not claims and event.get(LOCAL_GATEWAY_KEY) is LOCAL_GATEWAY:
        return Caller("local")
    settings = get_settings()
    if not claims:
        if "iam" in authorizer_of(event):
            raise _refuse(
                "IAM (SigV4) requests carry no tenant claim and no admin scope; call with a "
                "JWT (Authorization: Bearer …)", "IAM callers are refused")
        raise _refuse("the request carries no JWT claims; call with a JWT "
                      "(Authorization: Bearer …)", "no claims")
    if settings.admin_scope in claim_words(claims.get("scope")):
        return Caller("admin", subject=subject_of(claims))
    tenant = claims.get(settings.tenant_claim)
    if tenant is None or tenant == "":
        raise _refuse(
            f"the token has neither a {settings.tenant_claim!r} claim nor the "
            f"{settings.admin_scope!r} scope",
            f"needs the {settings.tenant_claim!r} claim or the {settings.admin_scope!r} scope")
    if not isinstance(tenant, str) or _TENANT_NAME.fullmatch(tenant) is None:
        raise _refuse(f"the token's {settings.tenant_claim!r} claim is not a valid tenant name",
                      "invalid tenant claim")
    if tenant == DEFAULT_TENANT:
        # where an admin's tenant-less tasks and schedules land: nobody's tenant to pin to
        raise _refuse(f"the token's {settings.tenant_claim!r} claim is not a valid tenant name: "
                      f"{DEFAULT_TENANT!r} is the default tenant, which only an admin reaches",
                      "invalid tenant claim")
    return Caller("tenant", tenant, subject_of(claims))


def authorize(event: dict[str, Any], method: str, path: str) -> Caller | None:
    """The caller allowed to make this request (None for a public route); Forbidden when it
    may not."""
    kind = route_kind(method, path)
    if kind == "public":
        return None
    caller = identify(event)
    if kind == "admin" and caller.kind == "tenant":
        raise _refuse(f"{method.upper()} {path} is an admin route: it needs the "
                      f"{get_settings().admin_scope!r} scope", "admin route")
    return caller
