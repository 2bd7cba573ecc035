"""The HTTP layer: one Powertools ``APIGatewayHttpResolver`` per function, built from the
routers that function serves (:mod:`tierq.aws.http.routes`), with request validation, the error
mapping of :mod:`tierq.aws.http.errors` and strict JSON parsing.

Bodies are parsed strictly before any route sees them: not JSON, NaN/Infinity, lone UTF-16
surrogates, nesting deeper than 1024 → 400; not an object, a NUL character anywhere or an
integer beyond 64 bits → 422 naming the field. A body with another content type than JSON
→ 400.

``TierqResolver`` keeps the request state Powertools stores on the resolver (the event, the
Lambda context, the route context) per thread: on AWS an execution environment handles one
request at a time, but the local stack serves a function's requests from several threads.

A function with several route modules imports each when a request for one of its routes
arrives (``MODULE_ROUTES`` of :mod:`tierq.aws.http.routes`), not at its cold start: the
admin function's request for a queue imports neither the schedules' routes nor their
models. Their routes keep the order an eager build gives them (the function's routers in
``FUNCTION_ROUTERS`` order), so the same route answers a request either way. They are all
imported at initialisation when every request needs the one (a function with one router;
the claim function's claims and the enqueue function's enqueues, ``HOT_ROUTERS``) or when
initialisation runs ahead of the requests (SnapStart snapshots it, provisioned concurrency
runs it before any request arrives: :func:`initialised_ahead`).
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

import tierq
from tierq.aws.http import access, errors, limits, request
from tierq.aws.http.routes import FUNCTION_ROUTERS, MODULE_ROUTES
from tierq.aws.runtime import logger
from tierq.config import Settings, get_settings
from tierq.core import sizing
from tierq.errors import Forbidden, MalformedRequest, PayloadTooLarge

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.openapi.models import OpenAPI

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
INT_MIN, INT_MAX = -(2**63), 2**64 - 1
_LONG_DIGITS = re.compile(rb"\d{19,}")
_TEMPLATE_PARAMETER = re.compile(r"\{(\w+)\}")

OPENAPI_TITLE = "tierq"
OPENAPI_DESCRIPTION = (
    "A durable, serverless task queue: a bounded warm tier in Valkey over a cold tier in "
    "PostgreSQL. Producers enqueue tasks; workers claim them with a lease, then ack or nack "
    "them. Errors always have the shape "
    '{"error": {"code": "...", "message": "...", "details": [...]}}. On AWS every route '
    "but this document and /dashboard needs a JWT (Authorization: Bearer …) whose claims "
    "carry either the tenant claim (`tenant` by default, e.g. `custom:tenant` with Cognito), "
    "which pins the one tenant the caller may touch, or the admin scope (`tierq/admin` by "
    "default) as a word of its `scope` claim; any other caller, IAM-signed requests "
    "included, is 403. Admin routes (the admin scope only): "
    + ", ".join(route for route, kind in access.ROUTE_ACCESS.items() if kind == "admin")
    + "; every other route is open to tenant callers, scoped to their tenant."
)
PUBLIC_PATHS = ("/v1/openapi.json", "/dashboard")
_NO_NUL = r"^[^\u0000]*$"
_SELF = {"$ref": "#/components/schemas/JsonValue"}
JSON_VALUE: dict[str, Any] = {
    "description": "Any JSON value: no NUL character in a string or key, integers within "
                   "64 bits (-2^63 to 2^64-1), nested at most 1024 deep.",
    "anyOf": [
        {"type": "null"}, {"type": "boolean"},
        {"type": "integer", "minimum": INT_MIN, "maximum": INT_MAX},
        {"type": "number", "not": {"type": "integer"}},
        {"type": "string", "pattern": _NO_NUL},
        {"type": "array", "items": _SELF},
        {"type": "object", "propertyNames": {"pattern": _NO_NUL}, "additionalProperties": _SELF},
    ],
}
ANY_JSON_FIELDS = (("TaskIn", "payload"), ("ScheduleIn", "payload"), ("AckItem", "result"))


# --------------------------------------------------------------------------- JSON bodies


def _nul_path(value: Any) -> tuple[Any, ...] | None:
    """Where the first NUL character is (in a string or an object key), iteratively."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return path
        elif isinstance(item, dict):
            for key, child in item.items():
                if "\x00" in key:
                    return path
                stack.append(((*path, key), child))
        elif isinstance(item, list):
            stack.extend(((*path, i), child) for i, child in enumerate(item))
    return None


def _huge_number_path(value: Any) -> tuple[Any, ...]:
    """Where the first number beyond 64-bit integers is (orjson read it as a float)."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not INT_MIN <= item <= INT_MAX:
            return path
        if isinstance(item, dict):
            stack.extend(((*path, k), v) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(item))))
    return ()


def _check_int(text: str) -> int:
    number = int(text)
    if not INT_MIN <= number <= INT_MAX:
        raise OverflowError(text)
    return number


def _reject(kind: str, loc: tuple[Any, ...], message: str) -> RequestValidationError:
    return RequestValidationError([{"type": kind, "loc": ("body", *loc), "msg": message,
                                    "input": None}])


def parse_json_body(text: str) -> Any:
    """The request body's JSON, strictly (see the module docstring)."""
    value = orjson.loads(text)  # orjson.JSONDecodeError is a json.JSONDecodeError → 400
    raw = text.encode()
    if _LONG_DIGITS.search(raw):
        # orjson reads integers beyond 64 bits as floats; find them with exact parsing
        try:
            json.loads(text, parse_int=_check_int)
        except OverflowError as exc:
            raise _reject("int_out_of_range", _huge_number_path(value),
                          f"integer {str(exc)[:40]} is out of range (64 bits at most)") from exc
        except RecursionError as exc:
            raise _reject("too_deep", (), "nested too deeply") from exc
    if not isinstance(value, dict):
        # Powertools would read the first element of an array as the body: refuse arrays
        raise _reject("object_expected", (), "the body must be a JSON object")
    where = _nul_path(value)
    if where is not None:
        raise _reject("nul_character", where,
                      "contains a NUL character (\\u0000), which cannot be stored")
    return value


def _raw_response(status: int, body: Mapping[str, Any],
                  headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": orjson.dumps(body).decode(),
        "isBase64Encoded": False,
        "cookies": [],
    }


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (set, frozenset)):
        return list(value)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def serialize_body(value: Any) -> str:
    """Response bodies as UTF-8 JSON (orjson): a non-ASCII character costs its UTF-8 bytes
    on the wire, not a ``\\uXXXX`` escape per UTF-16 unit (see :mod:`tierq.core.sizing`)."""
    return orjson.dumps(value, default=_json_default, option=orjson.OPT_NON_STR_KEYS).decode()


def request_body_cost(event: APIGatewayProxyEventV2) -> int:
    """What the request's body weighs in the event Lambda receives: as a JSON string, each
    quote and backslash escaped (base64 text has none)."""
    body = event.body or ""
    if event.is_base64_encoded:
        return len(body)
    return sizing.body_cost(body.encode("utf-8", "surrogatepass"))


def precheck_body(event: APIGatewayProxyEventV2) -> dict[str, Any] | None:
    """A ready response rejecting the request's body (400, or 413 over Lambda's request
    limit), or None when it may go on."""
    if not event.body:
        return None
    cost = request_body_cost(event)
    if cost > sizing.REQUEST_BODY_LIMIT:
        too_large = PayloadTooLarge(
            f"the request body weighs {cost:,} bytes as a Lambda request; at most "
            f"{sizing.REQUEST_BODY_LIMIT:,} fit (send fewer or smaller tasks per request)",
            details=[{"field": "body", "message": "larger than a Lambda request may be"}],
        )
        return _raw_response(too_large.status, too_large.to_body())
    if event.http_method.upper() not in BODY_METHODS:
        return None
    content_type = (event.headers.get("content-type") or "").split(";")[0].strip().lower()
    if content_type and content_type != "application/json" and not content_type.endswith("+json"):
        not_json = MalformedRequest(
            f"the request body must be JSON (Content-Type: application/json), got {content_type!r}",
            details=[{"field": "body", "message": "unsupported content type"}],
        )
        return _raw_response(not_json.status, not_json.to_body())
    if event.is_base64_encoded:
        try:
            base64.b64decode(event.body.encode(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            not_utf8 = MalformedRequest(
                "the request body is not UTF-8 text",
                details=[{"field": "body", "message": "not UTF-8"}],
            )
            return _raw_response(not_utf8.status, not_utf8.to_body())
    return None


# --------------------------------------------------------------------------- the resolver


class _RequestState(threading.local):
    """What Powertools keeps on the resolver (and on BaseRouter), per thread here: the local
    gateway serves requests on several threads with one resolver."""

    event: APIGatewayProxyEventV2
    # None before this thread's first request to this resolver: a route module's router
    # asks the resolver that included it last, which may not have served this thread
    lambda_context: LambdaContext | None = None
    context: dict[str, Any]

    def __init__(self) -> None:  # runs once in each thread that touches the state
        self.context = {}


class TierqResolver(APIGatewayHttpResolver):
    """An HTTP API (payload v2) resolver with validation on, strict JSON and per-thread
    request state."""

    def __init__(self, function: str, routers: Sequence[str] = ()) -> None:
        """``routers``: the route modules included on demand (:meth:`include_routers`)."""
        self._tierq_local = _RequestState()
        super().__init__(enable_validation=True, json_body_deserializer=parse_json_body,
                         serializer=serialize_body)
        self.function = function
        self._router_modules = tuple(routers)
        self._included: set[str] = set()
        self._including = threading.Lock()
        self._route_patterns: list[tuple[str, str, re.Pattern[str]]] | None = None
        self._route_rank: dict[int, int] = {}  # id(route) → its module's place in routers

    def include_routers(self, method: str | None = None, path: str | None = None) -> None:
        """Include the routers a request of ``method`` and ``path`` may be served by; every
        router when no request is given or none of ``MODULE_ROUTES`` matches it."""
        wanted = self._routers_for(method, path) if method and path is not None else ()
        self.include_modules(wanted or self._router_modules)

    def include_modules(self, wanted: Sequence[str]) -> None:
        """Include the routers of these route modules (of this function's) not yet included,
        keeping the order of an eager build."""
        if self._included.issuperset(wanted):
            return
        with self._including:
            for module in wanted:
                if module in self._included:
                    continue
                self.include_router(_router(module))
                rank = self._router_modules.index(module)
                for route in (*self._static_routes, *self._dynamic_routes):
                    self._route_rank.setdefault(id(route), rank)
                self._included.add(module)
            # static routes are tried before dynamic ones, each list in the order it was built
            self._static_routes = sorted(self._static_routes, key=self._rank_of)
            self._dynamic_routes = sorted(self._dynamic_routes, key=self._rank_of)

    def _rank_of(self, route: object) -> int:
        return self._route_rank.get(id(route), -1)

    def _routers_for(self, method: str, path: str) -> tuple[str, ...]:
        """The route modules with a route of ``method`` whose path matches ``path`` (by
        Powertools' own pattern), and those ``MODULE_ROUTES`` does not list."""
        if self._route_patterns is None:
            self._route_patterns = [
                (module, verb, self._compile_regex(_TEMPLATE_PARAMETER.sub(r"<\1>", template)))
                for module in self._router_modules
                for verb, template in (route.split(" ", 1)
                                       for route in MODULE_ROUTES.get(module, ()))
            ]
        method = method.upper()
        matched = {module for module, verb, rule in self._route_patterns
                   if verb == method and rule.match(path)}
        if not matched:
            return ()
        return tuple(module for module in self._router_modules
                     if module in matched or module not in MODULE_ROUTES)

    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> OpenAPI:
        """The OpenAPI schema of every route of the function (all its routers included)."""
        self.include_routers()
        return super().get_openapi_schema(*args, **kwargs)

    @property
    def current_event(self) -> APIGatewayProxyEventV2:
        return self._tierq_local.event

    @current_event.setter
    def current_event(self, value: BaseProxyEvent) -> None:
        # BaseRouter lets any proxy event be set; this resolver serves HTTP API (v2) events only
        if not isinstance(value, APIGatewayProxyEventV2):
            raise TypeError(f"an HTTP API (payload v2) event, not {type(value).__name__}")
        self._tierq_local.event = value

    # Powertools declares it LambdaContext, though its Router may read it from a resolver
    # that never set it; the claim route reads it as optional
    @property  # type: ignore[override]
    def lambda_context(self) -> LambdaContext | None:
        return self._tierq_local.lambda_context

    @lambda_context.setter
    def lambda_context(self, value: LambdaContext) -> None:
        self._tierq_local.lambda_context = value

    @property
    def context(self) -> dict[str, Any]:
        return self._tierq_local.context

    @context.setter
    def context(self, value: dict[str, Any]) -> None:
        self._tierq_local.context = value

    def resolve(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        data = event if isinstance(event, dict) else dict(event)
        proxy = APIGatewayProxyEventV2(data, self._json_body_deserializer)
        self.current_event = proxy
        self.lambda_context = context
        try:
            # who may call what is decided here, once, before any route runs
            caller = access.authorize(data, proxy.http_method, proxy.path)
        except Forbidden as exc:
            # the reason, never the claims' values (they may identify a person)
            logger.info("request refused", extra={
                "route": f"{proxy.http_method} {proxy.path}",
                "reason": exc.details[0]["message"] if exc.details else exc.message})
            return _raw_response(exc.status, exc.to_body())
        request.bind(proxy, caller)
        try:
            # a tenant over its own rate is answered 429 before anything else is done
            limited = limits.over_rate(caller, f"{proxy.http_method} {proxy.path}")
            if limited is not None:
                return _raw_response(limited.status, limited.to_body(),
                                     {"Retry-After": str(limited.retry_after)})
            rejected = precheck_body(proxy)
            if rejected is not None:
                return rejected
            self.include_routers(proxy.http_method, self._remove_prefix(proxy.path))
            return super().resolve(data, context)
        finally:
            request.bind(None)

    def _to_proxy_event(self, event: dict[str, Any]) -> APIGatewayProxyEventV2:
        # resolve() builds the proxy event once; Powertools' own call must reuse it so the
        # parsed body is cached once and the per-thread event stays the same object.
        current = getattr(self._tierq_local, "event", None)
        if current is not None and current.raw_event is event:
            return current
        return APIGatewayProxyEventV2(event, self._json_body_deserializer)


def _router(module: str) -> Router:
    router = getattr(importlib.import_module(module), "router", None)
    if not isinstance(router, Router):
        raise TypeError(f"{module} has no Powertools Router named `router`")
    return router


def initialised_ahead(settings: Settings) -> bool:
    """Whether Lambda initialises this execution environment ahead of its requests (a
    SnapStart snapshot, provisioned concurrency): what its requests import costs none of
    them when imported at initialisation."""
    return settings.aws_lambda_initialization_type in ("snap-start", "provisioned-concurrency")


# Route modules a function includes at initialisation even beside others: the path nearly
# every request of their function takes (the claim function's claims, its payload fetches
# being rare; the enqueue function's enqueues, its flows and uploads being rare), so its
# first request does not pay for the import.
HOT_ROUTERS = frozenset({"tierq.aws.http.routes.claims", "tierq.aws.http.routes.leases",
                         "tierq.aws.http.routes.enqueue"})


def build_resolver(function: str) -> TierqResolver:
    """The resolver of one function (``enqueue``, ``claim``, ``ack``, ``admin``): exactly the
    routes template.yaml gives that function. A function with several routers includes
    each by the first request for one of its routes, unless it is initialised ahead."""
    if function not in FUNCTION_ROUTERS:
        raise KeyError(f"unknown HTTP function {function!r}; known: {sorted(FUNCTION_ROUTERS)}")
    app = TierqResolver(function, FUNCTION_ROUTERS[function])
    if len(FUNCTION_ROUTERS[function]) == 1 or initialised_ahead(get_settings()):
        app.include_routers()
    else:
        app.include_modules([m for m in FUNCTION_ROUTERS[function] if m in HOT_ROUTERS])
    errors.register(app)
    return app


# --------------------------------------------------------------------------- OpenAPI

_document: dict[str, Any] | None = None
_document_lock = threading.Lock()


def _generate_document() -> dict[str, Any]:
    spec = TierqResolver("openapi")
    seen: set[str] = set()
    for modules in FUNCTION_ROUTERS.values():
        for module in modules:
            if module in seen:
                continue
            seen.add(module)
            router = _router(module)
            serving = router.api_resolver
            spec.include_router(router)
            router.api_resolver = serving  # the router keeps serving its own function
    text = spec.get_openapi_json_schema(
        title=OPENAPI_TITLE, version=tierq.__version__, description=OPENAPI_DESCRIPTION,
    )
    document: dict[str, Any] = orjson.loads(text)
    components = document.setdefault("components", {})
    components.setdefault("securitySchemes", {})["jwt"] = {
        "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
        "description": "API Gateway's JWT authoriser. The tenant claim (TIERQ_TENANT_CLAIM, "
                       "default `tenant`) pins the caller to its tenant; the admin scope "
                       "(TIERQ_ADMIN_SCOPE, default `tierq/admin`) in the `scope` claim "
                       "makes it an admin; a token with neither is refused (403).",
    }
    document["security"] = [{"jwt": []}]
    for path in PUBLIC_PATHS:
        for operation in document.get("paths", {}).get(path, {}).values():
            operation["security"] = []
    # who may call each operation (tierq.aws.http.access), and the 403 a caller without the tenant
    # claim or the admin scope gets from every operation but the public ones
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            kind = access.ROUTE_ACCESS.get(f"{method.upper()} {path}", "admin")
            operation["x-tierq-access"] = kind
            answers = operation.get("responses", {})
            if kind != "public" and "403" not in answers and "422" in answers:
                answers["403"] = {**answers["422"], "description": (
                    "The token has neither the tenant claim nor the admin scope"
                    + (", or the caller is not an admin" if kind == "admin" else "")
                    + ", or names another tenant than the caller's")}
    # A body a route may go without is left out, not sent as JSON null: every body must be
    # an object (parse_json_body), so the null Powertools adds for an optional body goes.
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                _drop_null_branch(media.get("schema", {}))
            # likewise a header is sent or left out: its value is never JSON null
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "header":
                    _drop_null_branch(parameter.get("schema", {}))
    # "Any JSON value" (payloads, results) as the strict body parser takes it: no NUL in a
    # string or key, integers within 64 bits (parse_json_body)
    schemas = components.setdefault("schemas", {})
    schemas["JsonValue"] = JSON_VALUE
    for model, field in ANY_JSON_FIELDS:
        prop = schemas.get(model, {}).get("properties", {}).get(field)
        if prop is not None:
            prop["$ref"] = "#/components/schemas/JsonValue"
    # Powertools adds its own 422 schemas; every error here has tierq's shape instead. Drop
    # them when nothing refers to them any more.
    schemas = components.get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        rest = {k: v for k, v in schemas.items() if k != name}
        text = orjson.dumps([document["paths"], rest]).decode()
        if f"#/components/schemas/{name}\"" not in text:
            schemas.pop(name, None)
    return document


def _drop_null_branch(schema: dict[str, Any]) -> None:
    branches = schema.get("anyOf")
    if not isinstance(branches, list) or {"type": "null"} not in branches:
        return
    rest = [b for b in branches if b != {"type": "null"}]
    del schema["anyOf"]
    if len(rest) == 1:
        schema.update(rest[0])
    else:
        schema["anyOf"] = rest


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of every route of every function (generated once)."""
    global _document
    with _document_lock:
        if _document is None:
            _document = _generate_document()
        return _document


def http_handler(function: str) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The Lambda handler of an HTTP function (``functions/<function>/app.py``): its resolver
    is built once per execution environment and handed each API Gateway (payload v2) event."""
    from aws_lambda_powertools.logging import correlation_paths

    from tierq.aws.runtime import tracer

    app = build_resolver(function)

    @logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
    @tracer.capture_lambda_handler(capture_response=False)  # task payloads stay out of traces
    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        return app.resolve(event, context)

    lambda_handler.app = app
    return lambda_handler
