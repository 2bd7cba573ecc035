"""Handler tests: each function's ``lambda_handler`` called with realistic events (saved from
``sam local generate-event``, see events/README.md) against the session's real PostgreSQL
and Valkey. Only AWS service APIs are mocked (moto), never the stores."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from tests.handlers.support import (
    REPO,
    ApiEvent,
    Context,
    Invoke,
    Reply,
    function_module,
    http_event,
    reply_of,
)
from tierq.aws.runtime import reset_engine
from tierq.local.gateway.template import Template


@pytest.fixture(scope="session")
def template() -> Template:
    return Template.load(REPO / "template.yaml")


@pytest.fixture
def lambda_env(monkeypatch: pytest.MonkeyPatch, app_database_url: str, valkey_url: str,
               clean_stores: None) -> Iterator[None]:
    """The environment a function sees (stores of this test session, the database as the
    application role, as every function but migrate on AWS), a fresh engine per test,
    empty stores."""
    monkeypatch.setenv("DATABASE_URL", app_database_url)
    monkeypatch.setenv("VALKEY_URL", valkey_url)
    monkeypatch.delenv("DB_SECRET_ARN", raising=False)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "tierq")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Tierq")
    monkeypatch.setenv("TIERQ_SETTINGS_CACHE_SECONDS", "0")
    reset_engine()
    yield
    reset_engine()


@pytest.fixture
def api_event(template: Template) -> ApiEvent:
    """An HTTP API (payload v2) event for a request (``support.http_event``)."""
    return functools.partial(http_event, template)


@pytest.fixture
def call(lambda_env: None, api_event: ApiEvent, template: Template) -> Invoke:
    """``call("POST", "/v1/queues/q/tasks", body)``: invoke the function template.yaml routes
    the request to, the way API Gateway would, and decode its response."""

    def invoke(method: str, path: str, body: Any = None, **kwargs: Any) -> Reply:
        event = api_event(method, path, body, **kwargs)
        function = None
        for route in template.routes:
            if route.match(path) is not None and route.method == method:
                function = template.functions[route.function].name
        assert function is not None, f"no route for {method} {path} in template.yaml"
        result = function_module(function).lambda_handler(event, Context(function_name=function))
        return reply_of(result)

    return invoke
