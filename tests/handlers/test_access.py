"""Who may call what (tierq.aws.http.access), through the real handlers and stores: tenancy fails
closed on every route, the admin scope is a whole word of the `scope` claim as API Gateway
delivers it, the tenant claim's name is a setting matched in full, the admin route refuses
tenants, and only the local gateway's in-process marker stands in for missing claims."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from tests.handlers.support import (
    ADMIN_CLAIMS,
    REPO,
    ApiEvent,
    Context,
    Invoke,
    function_module,
    reply_of,
    task_count,
)
from tests.support.every_task import EVERY_TASK
from tierq.aws.http import access
from tierq.aws.http.routes import FUNCTION_ROUTERS
from tierq.config import get_settings
from tierq.local.gateway.template import Template

SAMPLE_ID = "0190b8a0-0000-7000-8000-000000000001"


def _sample_path(path: str) -> str:
    return re.sub(r"\{[^}]+\}", lambda m: SAMPLE_ID if m[0] == "{id}" else "jobs", path)


def _routes(template: Template, kinds: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(r.method, _sample_path(r.path)) for r in template.routes
            if access.ROUTE_ACCESS.get(f"{r.method} {r.path}") in kinds]


TEMPLATE = Template.load(REPO / "template.yaml")
PROTECTED = _routes(TEMPLATE, ("tenant", "admin"))
ADMIN_ONLY = _routes(TEMPLATE, ("admin",))


def body_for(method: str) -> dict[str, Any] | None:
    return {"payload": 1} if method in ("POST", "PUT") else None


# ------------------------------------------------------------------- the route table


def test_every_route_of_the_template_is_classified_once() -> None:
    template_routes = {f"{r.method} {r.path}" for r in TEMPLATE.routes}
    assert set(access.ROUTE_ACCESS) == template_routes
    assert {r for r, k in access.ROUTE_ACCESS.items() if k == "public"} == {
        "GET /v1/openapi.json", "GET /dashboard"}
    assert {r for r, k in access.ROUTE_ACCESS.items() if k == "admin"} == {
        "PUT /v1/queues/{queue}", "GET /v1/metrics/consumers"}
    assert FUNCTION_ROUTERS  # every function's routes are template routes (test_routes.py)


def test_an_unlisted_route_counts_as_an_admin_route() -> None:
    assert access.route_kind("POST", "/v1/queues/jobs/unknown") == "admin"
    assert access.route_kind("PATCH", "/v1/queues/jobs") == "admin"
    assert access.route_kind("GET", "/v1/queues/jobs/tasks/x") == "tenant"
    assert access.route_kind("GET", "/v1/openapi.json") == "public"


# ------------------------------------------------------------------- failing closed


@pytest.mark.parametrize(("method", "path"), PROTECTED)
@pytest.mark.parametrize("claims", [
    {"sub": "user-1", "scope": "openid email"},  # neither tenant claim nor admin scope
    {},  # an authoriser context without claims
    {"sub": "user-1", "tenant": ""},
], ids=["no-tenant-claim", "no-claims", "empty-tenant"])
def test_a_caller_without_tenant_or_admin_scope_is_403_on_every_route(
        call: Invoke, pg: psycopg.Connection[Any], method: str, path: str,
        claims: dict[str, str]) -> None:
    reply = call(method, path, body_for(method), claims=claims)
    assert reply.status == 403, reply.body
    assert reply.body["error"]["code"] == "forbidden"
    assert reply.body["error"]["details"][0]["field"] == "authorization"
    assert task_count(pg) == 0


def test_tenantless_claims_are_refused_before_anything_is_written(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    nobody = {"sub": "user-1"}
    assert call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": i} for i in range(3)]},
                claims=nobody).status == 403
    assert call("PUT", "/v1/schedules/nightly", {"queue": "jobs", "payload": 1,
                                                 "every_seconds": 60},
                claims=nobody).status == 403
    assert task_count(pg) == 0
    assert pg.execute("SELECT count(*) FROM tierq_schedules").fetchone()[0] == 0  # type: ignore[index]
    # the admin's view confirms it: nothing is there
    assert call("GET", "/v1/queues/jobs/dlq").status == 200


def test_an_iam_authorised_request_is_403(api_event: ApiEvent, lambda_env: None,
                                         pg: psycopg.Connection[Any]) -> None:
    event = api_event("POST", "/v1/queues/jobs/tasks", {"payload": 1})
    event["requestContext"]["authorizer"] = {"iam": {
        "accessKey": "AKIAEXAMPLE", "accountId": "123456789012",
        "callerId": "AROAEXAMPLE:worker", "principalOrgId": None,
        "userArn": "arn:aws:sts::123456789012:assumed-role/admin/worker",
        "userId": "AROAEXAMPLE:worker"}}
    reply = reply_of(function_module("enqueue").lambda_handler(event, Context()))
    assert reply.status == 403
    assert "IAM" in reply.body["error"]["message"]
    assert task_count(pg) == 0


def test_an_event_without_any_authoriser_is_403(api_event: ApiEvent, lambda_env: None) -> None:
    event = api_event("GET", "/v1/queues")
    del event["requestContext"]["authorizer"]
    reply = reply_of(function_module("admin").lambda_handler(event, Context()))
    assert reply.status == 403


def test_public_routes_need_no_claims(api_event: ApiEvent, lambda_env: None) -> None:
    for path in ("/v1/openapi.json", "/dashboard"):
        event = api_event("GET", path)
        del event["requestContext"]["authorizer"]
        assert reply_of(function_module("admin").lambda_handler(event, Context())).status == 200


# ------------------------------------------------------------------- the admin scope


@pytest.mark.parametrize("scope", [
    "tierq/admin",
    "openid tierq/admin email",
    "[tierq/admin other]",  # an array claim, as the HTTP API renders it
    "[other tierq/admin]",
    ["tierq/admin"],
])
def test_the_admin_scope_is_a_whole_word_of_the_scope_claim(call: Invoke, scope: Any) -> None:
    reply = call("PUT", "/v1/queues/jobs", {"paused": True}, claims={"scope": scope})
    assert reply.status == 200, reply.body
    assert reply.body["settings"]["paused"] is True


@pytest.mark.parametrize("scope", [
    "tierq/administrator", "xtierq/admin", "tierq/admin2", "tierq", "admin",
    "[tierq/admin2 other]", "tierq/admin,other", "https://api/tierq/admin", "",
])
def test_a_scope_that_only_contains_the_admin_scope_as_a_substring_is_not_admin(
        call: Invoke, scope: str) -> None:
    reply = call("PUT", "/v1/queues/jobs", {"paused": True}, claims={"scope": scope})
    assert reply.status == 403, (scope, reply.body)
    assert call("GET", "/v1/queues", claims={"scope": scope}).status == 403


def test_the_admin_scope_is_a_setting(call: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_ADMIN_SCOPE", "https://queues.example.com/admin")
    get_settings.cache_clear()
    try:
        assert call("PUT", "/v1/queues/jobs", {"paused": True},
                    claims={"scope": "tierq/admin"}).status == 403
        assert call("PUT", "/v1/queues/jobs", {"paused": True},
                    claims={"scope": "openid https://queues.example.com/admin"}).status == 200
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


@pytest.mark.parametrize(("method", "path"), ADMIN_ONLY)
def test_admin_routes_refuse_tenant_callers(call: Invoke, method: str, path: str) -> None:
    reply = call(method, path, {"paused": True}, claims={"tenant": "acme"})
    assert reply.status == 403
    assert "admin" in reply.body["error"]["message"]
    assert call(method, path, {"paused": True}, claims=ADMIN_CLAIMS).status == 200


def test_an_admin_with_a_tenant_claim_is_an_admin(call: Invoke) -> None:
    both = {"tenant": "acme", "scope": "tierq/admin"}
    assert call("POST", "/v1/queues/jobs/tasks", {"payload": 1, "tenant": "globex"},
                claims=both).status == 200
    assert call("PUT", "/v1/queues/jobs", {"paused": False}, claims=both).status == 200


# ------------------------------------------------------------------- the tenant claim


def test_the_tenant_claim_must_match_in_full(call: Invoke, pg: psycopg.Connection[Any]) -> None:
    for bad in ("acme\n", "acme ", "ac|me", "x" * 65, "-acme"):
        reply = call("POST", "/v1/queues/jobs/tasks", {"payload": 1}, claims={"tenant": bad})
        assert reply.status == 403, bad
    assert task_count(pg) == 0
    assert call("POST", "/v1/queues/jobs/tasks", {"payload": 1},
                claims={"tenant": "acme"}).status == 200


def test_the_tenant_claim_name_is_a_setting(call: Invoke, monkeypatch: pytest.MonkeyPatch,
                                            pg: psycopg.Connection[Any]) -> None:
    monkeypatch.setenv("TIERQ_TENANT_CLAIM", "custom:tenant")
    get_settings.cache_clear()
    try:
        # Cognito's custom attribute pins the caller...
        cognito = {"sub": "u1", "custom:tenant": "acme", "token_use": "id"}
        assert call("POST", "/v1/queues/jobs/tasks", {"payload": 1}, claims=cognito).status == 200
        assert call("POST", "/v1/queues/jobs/tasks", {"payload": 1, "tenant": "globex"},
                    claims=cognito).status == 403
        # ...and a plain `tenant` claim means nothing any more
        assert call("POST", "/v1/queues/jobs/tasks", {"payload": 1},
                    claims={"tenant": "acme"}).status == 403
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    tenants = [r[0] for r in pg.execute(f"SELECT tenant FROM {EVERY_TASK}")]
    assert tenants == ["acme"]


# ------------------------------------------------------------------- the local gateway


def test_only_the_in_process_marker_stands_in_for_claims(api_event: ApiEvent,
                                                         lambda_env: None) -> None:
    event = api_event("GET", "/v1/queues")
    del event["requestContext"]["authorizer"]
    event[access.LOCAL_GATEWAY_KEY] = access.LOCAL_GATEWAY
    handler = function_module("admin").lambda_handler
    assert reply_of(handler(event, Context())).status == 200
    # the same event as it would arrive from API Gateway (JSON): the marker cannot survive
    spoofed = json.loads(json.dumps(event, default=repr))
    assert spoofed[access.LOCAL_GATEWAY_KEY] == repr(access.LOCAL_GATEWAY)
    assert reply_of(handler(spoofed, Context())).status == 403
    # nor can a header of that name
    forged = api_event("GET", "/v1/queues", headers={access.LOCAL_GATEWAY_KEY: "1",
                                                     "x-tierq-jwt-claims": '{"scope": '
                                                     '"tierq/admin"}'})
    del forged["requestContext"]["authorizer"]
    assert reply_of(handler(forged, Context())).status == 403


def test_claims_beside_the_marker_are_judged_as_claims(api_event: ApiEvent,
                                                       lambda_env: None) -> None:
    event = api_event("GET", "/v1/queues", claims={"sub": "nobody"})
    event[access.LOCAL_GATEWAY_KEY] = access.LOCAL_GATEWAY
    assert reply_of(function_module("admin").lambda_handler(event, Context())).status == 403


def test_claim_words() -> None:
    assert access.claim_words("a b  c") == ["a", "b", "c"]
    assert access.claim_words("[a b]") == ["a", "b"]
    assert access.claim_words(["a b", "c", 3]) == ["a", "b", "c"]
    assert access.claim_words(None) == []
    assert access.claim_words(7) == []


@pytest.mark.parametrize(("claims", "expected"), [
    ({"sub": "user-1", "tenant": "acme"}, access.Caller("tenant", "acme", "sub:user-1")),
    # a Cognito user's access token: the user, not the app client
    ({"sub": "user-1", "client_id": "app", "tenant": "acme"},
     access.Caller("tenant", "acme", "sub:user-1")),
    ({"client_id": "app", "tenant": "acme"}, access.Caller("tenant", "acme", "client_id:app")),
    ({"sub": "", "client_id": "app", "tenant": "acme"},
     access.Caller("tenant", "acme", "client_id:app")),
    ({"tenant": "acme"}, access.Caller("tenant", "acme", None)),
    # a Cognito client-credentials token: the app client's id in both, sub wins
    ({"sub": "m2m", "client_id": "m2m", "scope": "tierq/admin"},
     access.Caller("admin", None, "sub:m2m")),
    ({"scope": "tierq/admin"}, access.Caller("admin", None, None)),
    # the issuer in front, with its length
    ({"iss": "https://idp", "sub": "user-1", "tenant": "acme"},
     access.Caller("tenant", "acme", "iss:11:https://idp|sub:user-1")),
    ({"iss": "https://idp", "client_id": "app", "scope": "tierq/admin"},
     access.Caller("admin", None, "iss:11:https://idp|client_id:app")),
    ({"iss": "", "sub": "user-1", "tenant": "acme"},
     access.Caller("tenant", "acme", "sub:user-1")),
    ({"iss": "https://idp", "tenant": "acme"}, access.Caller("tenant", "acme", None)),
])
def test_a_callers_subject_is_its_sub_else_its_client_id(
        api_event: ApiEvent, lambda_env: None, claims: dict[str, str],
        expected: access.Caller) -> None:
    assert access.identify(api_event("GET", "/v1/queues", claims=claims)) == expected


def test_the_local_gateway_has_no_subject(api_event: ApiEvent, lambda_env: None) -> None:
    event = api_event("GET", "/v1/queues")
    del event["requestContext"]["authorizer"]
    event[access.LOCAL_GATEWAY_KEY] = access.LOCAL_GATEWAY
    assert access.identify(event) == access.Caller("local")


def test_the_openapi_document_says_who_may_call_each_operation() -> None:
    from tierq.aws.http.resolver import openapi_document

    documented = {f"{method.upper()} {path}": operation
                  for path, operations in openapi_document()["paths"].items()
                  for method, operation in operations.items()}
    assert {route: op["x-tierq-access"] for route, op in documented.items()} == \
        access.ROUTE_ACCESS
    for route, operation in documented.items():
        assert ("403" in operation["responses"]) == (access.ROUTE_ACCESS[route] != "public")


def test_a_tenant_claim_of_the_default_tenant_is_refused(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    # an admin's tenant-less task and schedule land in the default tenant '_'
    assert call("POST", "/v1/queues/jobs/tasks", {"payload": "admin's"}).status == 200
    assert call("PUT", "/v1/schedules/nightly", {"queue": "jobs", "payload": 1,
                                                 "every_seconds": 3600}).status == 200
    before = task_count(pg)
    underscore = {"sub": "someone", "tenant": "_"}
    for method, path, body in [
            ("GET", "/v1/queues/jobs", None),
            ("POST", "/v1/queues/jobs/claims", {"max": 10}),
            ("POST", "/v1/queues/jobs/tasks", {"payload": 1}),
            ("GET", "/v1/schedules", None),
            ("GET", "/v1/schedules/nightly", None),
            ("DELETE", "/v1/schedules/nightly", None),
            ("GET", "/v1/queues/jobs/dlq", None)]:
        reply = call(method, path, body, claims=underscore)
        assert reply.status == 403, (method, path, reply.body)
        assert "'tenant' claim is not a valid tenant name" in reply.body["error"]["message"]
        assert reply.body["error"]["details"] == [
            {"field": "authorization", "message": "invalid tenant claim"}]
    assert task_count(pg) == before
    assert call("GET", "/v1/schedules/nightly").status == 200  # still there
    # a tenant whose name merely starts with '_' is an ordinary tenant
    assert call("GET", "/v1/schedules", claims={"tenant": "_acme"}).status == 200
