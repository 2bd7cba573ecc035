"""Helpers of the handler tests: events, a Lambda context, loading functions by path,
decoding responses."""

from __future__ import annotations

import base64
import copy
import importlib.util
import json
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote, urlencode

import psycopg

from tests.support.every_task import EVERY_TASK
from tierq.local.gateway.template import Template

REPO = Path(__file__).resolve().parents[2]
EVENTS = Path(__file__).parent / "events"
# The claims of an admin's token as API Gateway hands them over (default TIERQ_ADMIN_SCOPE).
ADMIN_CLAIMS = {"sub": "admin-client", "scope": "tierq/admin"}


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


@dataclass
class Context:
    """The parts of Lambda's context object the handlers and Powertools read."""

    function_name: str = "tierq-test"
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_stream_name: str = "2026/11/22/[$LATEST]test"
    timeout_seconds: float = 29.0
    started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.started + self.timeout_seconds - time.monotonic()) * 1000))


_modules: dict[str, ModuleType] = {}


def function_module(name: str) -> ModuleType:
    """``functions/<name>/app.py``, imported by path once per test session (as Lambda
    imports it once per execution environment)."""
    if name not in _modules:
        path = REPO / "functions" / name / "app.py"
        spec = importlib.util.spec_from_file_location(f"tierq_test_fn_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _modules[name] = module
    return _modules[name]


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any
    raw: dict[str, Any]


def reply_of(result: dict[str, Any]) -> Reply:
    text = result.get("body") or ""
    if result.get("isBase64Encoded"):
        text = base64.b64decode(text).decode()
    headers = {k.lower(): v for k, v in (result.get("headers") or {}).items()}
    is_json = headers.get("content-type", "").startswith("application/json")
    return Reply(int(result["statusCode"]), headers, json.loads(text) if is_json and text
                 else text, result)


def task_count(pg: psycopg.Connection[Any], queue: str | None = None, *,
               state: str | None = None) -> int:
    """How many tasks PostgreSQL holds, of ``queue`` and in ``state`` when given.

    It reads ``EVERY_TASK``, so a member still in its batch row counts as a row does and
    an acked task (a deleted row or an ended member) is not counted.
    """
    where = [f"{name} = %s" for name, value in (("queue", queue), ("state", state))
             if value is not None]
    params = [value for value in (queue, state) if value is not None]
    row = pg.execute(f"SELECT count(*) FROM {EVERY_TASK}"
                     + (f" WHERE {' AND '.join(where)}" if where else ""), params).fetchone()
    assert row is not None
    return int(row[0])


# What the fixtures of tests/handlers/conftest.py hand out: ``api_event(method, path, body,
# …)`` -> an HTTP API event; ``call(method, path, body, …)`` -> the function's decoded reply.
ApiEvent = Callable[..., dict[str, Any]]
Invoke = Callable[..., Reply]


# The scheduled functions, invoked as EventBridge Scheduler invokes them; their metrics.
def scheduler_event(job: str, **extra: Any) -> dict[str, Any]:
    """What EventBridge Scheduler sends: the template's Input (see events/)."""
    event = load_event("scheduler_reaper.json")
    event["job"] = job
    return {**event, **extra}


def invoke(name: str, event: dict[str, Any], timeout: float = 70.0) -> dict[str, Any]:
    context = Context(function_name=f"tierq-{name}", timeout_seconds=timeout)
    return function_module(name).lambda_handler(event, context)


def emf_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and '"_aws"' in line:
            out.append(json.loads(line))
    return out


def stand_in_gateway(handler: Callable[[dict[str, Any], Any], dict[str, Any]], *,
                     log: Callable[[str], None] | None = None,
                     open_without_claims: bool | None = None) -> Any:
    """The local gateway (``tierq.local.gateway.http.LocalApi``) over template.yaml's routes, with
    ``handler`` standing in for every function: for tests of the gateway itself."""
    from tierq.local.gateway.http import LocalApi
    from tierq.local.gateway.lambdas import LocalFunction
    from tierq.local.gateway.template import Template

    template = Template.load(REPO / "template.yaml")
    functions = {lid: LocalFunction(spec, REPO, handler=handler)
                 for lid, spec in template.functions.items()}
    api = LocalApi(template.routes, functions, log=log or (lambda line: None))
    if open_without_claims is not None:
        api.open_without_claims = open_without_claims
    return api


def route_key_for(template: Template, method: str, path: str) -> tuple[str, dict[str, str]]:
    for route in template.routes:
        params = route.match(path)
        if params is not None and route.method == method:
            return route.route_key, params
    return "$default", {}


def http_event(template: Template, method: str, path: str, body: Any = None, *,
               query: Mapping[str, str] | None = None,
               claims: Mapping[str, Any] | None = None, raw_body: str | None = None,
               content_type: str | None = "application/json", base64_body: bool = False,
               headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An HTTP API (payload v2) event for a request: the SAM-generated event with what API
    Gateway fills in for this route (an admin's token unless ``claims`` is given)."""
    event = copy.deepcopy(load_event("http_api_proxy.json"))
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
