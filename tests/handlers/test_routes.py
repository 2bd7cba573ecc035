"""Each HTTP function serves exactly the routes template.yaml gives it, and the OpenAPI
document covers them all."""

from __future__ import annotations

import re

import pytest
from openapi_spec_validator import validate

from tests.handlers.support import Context, Invoke, function_module, reply_of
from tierq.aws.http.resolver import build_resolver, openapi_document
from tierq.aws.http.routes import FUNCTION_ROUTERS
from tierq.local.gateway.template import Template

METHODS = ("get", "put", "post", "delete", "patch")


def served(function: str) -> set[tuple[str, str]]:
    paths = build_resolver(function).get_openapi_schema().model_dump(by_alias=True)["paths"]
    return {(method.upper(), path) for path, item in paths.items() for method in METHODS
            if item.get(method)}


def declared(template: Template, function: str) -> set[tuple[str, str]]:
    return {(r.method, r.path) for r in template.routes
            if template.functions[r.function].name == function}


def test_every_http_function_of_the_template_has_routers(template: Template) -> None:
    http_functions = {template.functions[r.function].name for r in template.routes}
    assert http_functions == set(FUNCTION_ROUTERS)


@pytest.mark.parametrize("function", sorted(FUNCTION_ROUTERS))
def test_function_serves_exactly_its_template_routes(template: Template, function: str) -> None:
    assert served(function) == declared(template, function)


def test_openapi_document_covers_every_route_and_is_valid(template: Template) -> None:
    document = openapi_document()
    validate(document)
    routes = {(method.upper(), path) for path, item in document["paths"].items()
              for method in METHODS if method in item}
    assert routes == {(r.method, r.path) for r in template.routes}
    assert document["paths"]["/v1/openapi.json"]["get"]["security"] == []
    assert document["paths"]["/v1/queues"]["get"].get("security") is None  # global jwt
    assert document["security"] == [{"jwt": []}]


def test_every_error_response_is_documented_with_the_error_shape() -> None:
    document = openapi_document()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in METHODS:
                continue
            for status, response in operation["responses"].items():
                if int(status) < 400:
                    continue
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, \
                    (method, path, status)
            assert "422" in operation["responses"] or path == "/dashboard", (method, path)


def test_operation_ids_are_unique_and_named() -> None:
    ids = [op["operationId"] for item in openapi_document()["paths"].values()
           for method, op in item.items() if method in METHODS]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z][A-Za-z]+", i) for i in ids), ids


@pytest.mark.parametrize(("method", "path", "function"), [
    ("GET", "/v1/queues", "enqueue"),
    ("POST", "/v1/queues/q/tasks", "admin"),
    ("POST", "/v1/queues/q/claims", "ack"),
])
def test_a_route_of_another_function_is_404_in_the_error_shape(
        call: Invoke, api_event, method: str, path: str, function: str) -> None:
    event = api_event(method, path, {})
    reply = reply_of(function_module(function).lambda_handler(event, Context()))
    assert reply.status == 404
    assert reply.body["error"]["code"] == "not_found"
    assert path in reply.body["error"]["message"]
