"""A function's route modules are imported by the first request for one of their routes, not
at its cold start, and the routes then answer as an eager build's would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.handlers.support import REPO, Context, function_module, reply_of
from tierq.aws.http.resolver import HOT_ROUTERS, TierqResolver, _router, build_resolver
from tierq.aws.http.routes import FUNCTION_ROUTERS, MODULE_ROUTES

ROUTE_MODULES = sorted({module for modules in FUNCTION_ROUTERS.values() for module in modules})
PARAMETER = re.compile(r"<(\w+)>")


def _eager(function: str) -> TierqResolver:
    app = TierqResolver(function)
    for module in FUNCTION_ROUTERS[function]:
        app.include_router(_router(module))
    return app


def _order(app: TierqResolver) -> list[tuple[str, str]]:
    return [(route.method, route.rule.pattern)
            for route in (*app._static_routes, *app._dynamic_routes)]


def _example_path(template: str) -> str:
    return re.sub(r"\{\w+\}", "x", template)


@pytest.mark.parametrize("module", ROUTE_MODULES)
def test_module_routes_lists_exactly_each_modules_routes(module: str) -> None:
    routes = {method + " " + PARAMETER.sub(r"{\1}", rule)
              for rule, methods, *_ in _router(module)._routes for method in methods}
    assert set(MODULE_ROUTES.get(module, ())) == routes, \
        f"list the routes of {module} in MODULE_ROUTES (tierq/aws/http/routes/__init__.py)"


def _route_modules_imported(function: str, **environment: str) -> list[str]:
    """The route modules a fresh interpreter imported with the function's handler."""
    code = ("import sys, json\n"
            f"sys.path[:0] = [{str(REPO / 'functions' / function)!r}]\n"
            "import app\n"
            "print(json.dumps(sorted(m for m in sys.modules\n"
            "                        if m.startswith('tierq.aws.http.routes.'))))\n")
    env = {name: value for name, value in os.environ.items()
           if name != "AWS_LAMBDA_INITIALIZATION_TYPE"}
    env.update(PYTHONPATH=str(REPO / "shared"), POWERTOOLS_TRACE_DISABLED="true", **environment)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True, timeout=120)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("function", sorted(FUNCTION_ROUTERS))
def test_a_cold_import_imports_a_route_module_only_when_every_request_needs_it(
        function: str) -> None:
    routers = FUNCTION_ROUTERS[function]
    # ack: its one router; claim: its claims (HOT_ROUTERS), its payload fetches on first use
    expected = list(routers) if len(routers) == 1 else [m for m in routers if m in HOT_ROUTERS]
    assert _route_modules_imported(function) == sorted(expected)


@pytest.mark.parametrize("initialization", ["snap-start", "provisioned-concurrency"])
def test_initialised_ahead_a_function_imports_every_route_module(initialization: str) -> None:
    imported = _route_modules_imported("admin", AWS_LAMBDA_INITIALIZATION_TYPE=initialization)
    assert imported == sorted(FUNCTION_ROUTERS["admin"])


@pytest.mark.parametrize("function", sorted(f for f, routers in FUNCTION_ROUTERS.items()
                                             if len(routers) > 1))
def test_routes_included_one_request_at_a_time_keep_the_eager_order(function: str) -> None:
    app = build_resolver(function)
    assert app._included == {m for m in FUNCTION_ROUTERS[function] if m in HOT_ROUTERS}
    for module in reversed(FUNCTION_ROUTERS[function]):  # the last router first
        for route in MODULE_ROUTES[module]:
            method, template = route.split(" ", 1)
            app.include_routers(method, _example_path(template))
        assert module in app._included
    assert _order(app) == _order(_eager(function))


def test_a_request_includes_only_the_routers_of_its_route() -> None:
    app = build_resolver("admin")
    app.include_routers("GET", "/v1/schedules/nightly")
    assert app._included == {"tierq.aws.http.routes.schedules"}
    app.include_routers("GET", "/v1/no/such/route")  # no route matches: every router
    assert app._included == set(FUNCTION_ROUTERS["admin"])


def test_the_resolvers_openapi_schema_has_every_route_of_the_function() -> None:
    paths = build_resolver("ack").get_openapi_schema().model_dump(by_alias=True)["paths"]
    assert set(paths) == {route.split(" ", 1)[1]
                          for route in MODULE_ROUTES["tierq.aws.http.routes.leases"]}


def test_a_request_served_after_a_lazy_include(call: object, api_event) -> None:
    """The admin function's first request (the dashboard page) includes the docs router and
    is answered; its other routers wait for their own requests."""
    handler = function_module("admin").lambda_handler
    reply = reply_of(handler(api_event("GET", "/dashboard"), Context()))
    assert reply.status == 200
    assert "tierq.aws.http.routes.docs" in handler.app._included
