"""The local stack's pieces that mimic AWS: reading template.yaml, building payload v2 events
like API Gateway, reading results like API Gateway, routing like API Gateway."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.handlers.support import load_event
from tierq.local.gateway.events import build_event, to_http_response
from tierq.local.gateway.http import Router
from tierq.local.gateway.template import HttpRoute, Template, load_yaml, period_of


def test_template_routes_functions_and_schedules(template: Template) -> None:
    names = {spec.name for spec in template.functions.values()}
    assert {"enqueue", "claim", "ack", "admin", "cold_to_warm", "delayed_mover", "reaper",
            "migrate"} <= names
    keys = {r.route_key for r in template.routes}
    assert "POST /v1/queues/{queue}/tasks" in keys
    assert "GET /v1/queues/{queue}/tasks/{id}" in keys
    public = {r.path for r in template.routes if r.public}
    assert public == {"/v1/openapi.json", "/dashboard"}
    schedules = {template.functions[s.function].name: s for s in template.schedules}
    for job in ("cold_to_warm", "delayed_mover", "reaper"):
        assert schedules[job].payload == {"source": "tierq.scheduler", "job": job}
        assert schedules[job].period_seconds == 60 and schedules[job].exact
    reaper = next(f for f in template.functions.values() if f.name == "reaper")
    assert reaper.timeout == 70  # !Ref ScheduledTimeoutSeconds -> its default
    assert reaper.environment["TIERQ_REAPER_EVERY"] == "5"
    assert "DB_SECRET_ARN" not in reaper.environment  # needs AWS to resolve
    enqueue = next(f for f in template.functions.values() if f.name == "enqueue")
    assert enqueue.timeout == 29 and enqueue.handler == "app.lambda_handler"


def test_cloudformation_tags_are_read(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "A: !Ref Param\nB: !Sub '${X}-y'\nC: !GetAtt Fn.Arn\nD: !If [Cond, 1, 2]\n"
        "E: !Select [0, !GetAZs '']\nF: !Join [',', [a, b]]\n"
    )
    data = load_yaml(path)
    assert data["A"] == {"Ref": "Param"}
    assert data["B"] == {"Fn::Sub": "${X}-y"}
    assert data["C"] == {"Fn::GetAtt": ["Fn", "Arn"]}
    assert data["D"] == {"Fn::If": ["Cond", 1, 2]}
    assert data["E"] == {"Fn::Select": [0, {"Fn::GetAZs": ""}]}
    assert data["F"] == {"Fn::Join": [",", ["a", "b"]]}


@pytest.mark.parametrize(("expression", "seconds", "exact"), [
    ("rate(1 minute)", 60, True), ("rate(5 minutes)", 300, True), ("rate(2 hours)", 7200, True),
    ("cron(0/5 * * * ? *)", 60, False),
])
def test_schedule_periods(expression: str, seconds: float, exact: bool) -> None:
    assert period_of(expression) == (seconds, exact)


def test_events_have_the_shape_sam_generates() -> None:
    sam = load_event("http_api_proxy.json")
    event = build_event(
        method="POST", raw_path="/v1/queues/a%2Eb/tasks", raw_query="x=1&x=2&y=h%C3%A9",
        headers=[("Content-Type", "application/json"), ("X-Multi", "1"), ("x-multi", "2"),
                 ("Cookie", "a=1; b=2"), ("User-Agent", "tests")],
        body=b'{"payload": 1}', route_key="POST /v1/queues/{queue}/tasks",
        path_parameters={"queue": "a%2Eb"}, claims={"tenant": "acme", "groups": ["x", "y"]},
    )
    assert set(event) == set(sam) - {"stageVariables"}
    assert set(event["requestContext"]) == set(sam["requestContext"]) - {"authentication"}
    assert set(event["requestContext"]["http"]) == set(sam["requestContext"]["http"])
    assert event["version"] == "2.0"
    assert event["routeKey"] == event["requestContext"]["routeKey"] == \
        "POST /v1/queues/{queue}/tasks"
    assert event["rawPath"] == "/v1/queues/a%2Eb/tasks"
    assert event["requestContext"]["http"]["path"] == "/v1/queues/a.b/tasks"
    assert event["pathParameters"] == {"queue": "a.b"}
    assert event["queryStringParameters"] == {"x": "1,2", "y": "hé"}
    assert event["headers"]["x-multi"] == "1,2"
    assert "cookie" not in event["headers"] and event["cookies"] == ["a=1", "b=2"]
    assert event["requestContext"]["stage"] == "$default"
    assert event["requestContext"]["http"]["userAgent"] == "tests"
    assert event["requestContext"]["authorizer"]["jwt"]["claims"] == {"tenant": "acme",
                                                                      "groups": "[x y]"}
    assert event["body"] == '{"payload": 1}' and event["isBase64Encoded"] is False


def test_binary_bodies_are_base64_and_absent_parts_are_left_out() -> None:
    event = build_event(method="POST", raw_path="/x", raw_query="", headers=[
        ("content-type", "application/octet-stream")], body=b"\xff\x00",
        route_key="POST /x", path_parameters={})
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == b"\xff\x00"
    for absent in ("queryStringParameters", "pathParameters", "cookies"):
        assert absent not in event
    assert "authorizer" not in event["requestContext"]
    invalid_utf8 = build_event(method="POST", raw_path="/x", raw_query="", headers=[
        ("content-type", "application/json")], body=b"\xff", route_key="POST /x",
        path_parameters={})
    assert invalid_utf8["isBase64Encoded"] is True


def test_results_are_read_like_api_gateway() -> None:
    full = to_http_response({"statusCode": 201, "headers": {"X-A": "1"}, "cookies": ["c=1"],
                             "body": base64.b64encode(b"\x01\x02").decode(),
                             "isBase64Encoded": True})
    assert full.status == 201 and full.body == b"\x01\x02"
    assert ("X-A", "1") in full.headers and ("Set-Cookie", "c=1") in full.headers
    bare = to_http_response({"hello": "world"})
    assert bare.status == 200 and json.loads(bare.body) == {"hello": "world"}
    assert ("Content-Type", "application/json") in bare.headers


def test_router_prefers_the_most_specific_route_and_says_405() -> None:
    router = Router([
        HttpRoute("GET", "/v1/queues/{queue}", "Admin", False),
        HttpRoute("GET", "/v1/queues", "Admin", False),
        HttpRoute("POST", "/v1/queues/{queue}/tasks", "Enqueue", False),
        HttpRoute("GET", "/v1/queues/{queue}/tasks/{id}", "Admin", False),
    ])
    found = router.match("POST", "/v1/queues/q/tasks")
    assert not isinstance(found, list) and found.route.function == "Enqueue"
    assert found.path_parameters == {"queue": "q"}
    listed = router.match("GET", "/v1/queues")
    assert not isinstance(listed, list) and listed.route.path == "/v1/queues"
    assert router.match("DELETE", "/v1/queues/q/tasks") == ["POST"]
    assert router.match("GET", "/v1/nothing") == []
    assert router.match("GET", "/v1/queues/q/tasks/1/extra") == []
