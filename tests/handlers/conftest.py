"""Handler tests: each function's ``lambda_handler`` called with realistic events (saved from
``sam local generate-event``, see events/README.md) against the session's real PostgreSQL
and Valkey. Only AWS service APIs are mocked (moto), never the stores."""

from __future__ import annotations

import base64
import copy
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import pytest

from tests.handlers.support import (
    ADMIN_CLAIMS,
    REPO,
    ApiEvent,
    Context,
    Invoke,
    Reply,
    function_module,
    load_event,
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


def route_key_for(template: Template, method: str, path: str) -> tuple[str, dict[str, str]]:
    for route in template.routes:
        params = route.match(path)
        if params is not None and route.method == method:
            return route.route_key, params
    return "$default", {}


@pytest.fixture
def api_event(template: Template) -> ApiEvent:
    """An HTTP API (payload v2) event for a request: the SAM-generated event with what API
    Gateway fills in for this route."""
    base = load_event("http_api_proxy.json")

    def make(method: str, path: str, body: Any = None, *, query: Mapping[str, str] | None = None,
             claims: Mapping[str, Any] | None = None, raw_body: str | None = None,
             content_type: str | None = "application/json", base64_body: bool = False,
             headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        event = copy.deepcopy(base)
        route_key, params = route_key_for(template, method, path)
        event["routeKey"] = route_key
        event["rawPath"] = path
        event["requestContext"]["routeKey"] = route_key
        event["requestContext"]["http"]["method"] = method
        event["requestContext"]["http"]["path"] = path
        event["requestContext"]["requestId"] = uuid.uuid4().hex
        event["requestContext"]["timeEpoch"] = int(time.time() * 1000)
        if params:
            event["pathParameters"] = params
        else:
            event.pop("pathParameters", None)
        event["rawQueryString"] = urlencode(query or {}, quote_via=quote)
        if query:
            event["queryStringParameters"] = dict(query)
        else:
            event.pop("queryStringParameters", None)
        event["headers"] = {"content-type": content_type} if content_type else {}
        event["headers"].update({k.lower(): v for k, v in (headers or {}).items()})
        event.pop("cookies", None)
        # no claims given: an admin's token (a caller without claims is refused; pass
        # claims={} for that)
        event["requestContext"]["authorizer"] = {
            "jwt": {"claims": dict(ADMIN_CLAIMS if claims is None else claims),
                    "scopes": None}}
        text = raw_body if raw_body is not None else None if body is None else json.dumps(body)
        if text is None:
            event.pop("body", None)
            event["isBase64Encoded"] = False
        elif base64_body:
            event["body"] = base64.b64encode(text.encode()).decode()
            event["isBase64Encoded"] = True
        else:
            event["body"] = text
            event["isBase64Encoded"] = False
        return event

    return make


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
