"""Consumers on a developer's machine (tierq.local.consumers): template functions and
importable module:function, each concurrent invocation in an environment of its own, and
Lambda's answers for a function that raises or returns what JSON cannot hold."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tierq.errors import InvalidInput
from tierq.local.consumers import LocalFunctions
from tierq.local.gateway.lambdas import LocalFunction
from tierq.local.gateway.template import FunctionSpec

EVENT = orjson.dumps({"Records": []})


def test_a_function_of_the_template_by_logical_id_or_folder(tmp_path: Path) -> None:
    code = tmp_path / "functions" / "orders"
    code.mkdir(parents=True)
    (code / "app.py").write_text(
        "calls = []\n"
        "def lambda_handler(event, context):\n"
        "    calls.append(context.function_name)\n"
        "    return {'batchItemFailures': [], 'remaining_ms': "
        "context.get_remaining_time_in_millis() > 0}\n")
    spec = FunctionSpec(logical_id="OrdersFunction", code_uri="functions/orders/",
                        handler="app.lambda_handler", timeout=12, memory=256)
    local = LocalFunctions({"OrdersFunction": LocalFunction(spec, tmp_path)})
    for name in ("OrdersFunction", "orders"):
        local.check(name)
        assert local.timeout_seconds(name) == 12.0
        answer = local.invoke(name, EVENT, read_timeout=30)
        assert answer.outcome == "ok"
        assert orjson.loads(answer.payload) == {"batchItemFailures": [], "remaining_ms": True}
    with pytest.raises(InvalidInput, match=r"not a function of template.yaml \(OrdersFunction"
                                           r", orders\) nor an importable module:function"):
        local.check("billing")


def test_module_functions_resolve_or_are_refused_by_name() -> None:
    local = LocalFunctions()
    local.check("tests.dispatch.consumers:keep")
    assert local.timeout_seconds("tests.dispatch.consumers:keep") == 60.0
    for bad, why in (("no_such_module:f", "cannot import no_such_module"),
                     ("tests.dispatch.consumers:missing", "has no function missing"),
                     ("tests.dispatch.consumers:JOURNAL", "has no function JOURNAL"),
                     ("not a function", "nor an importable module:function")):
        with pytest.raises(InvalidInput, match=why) as info:
            local.check(bad)
        assert info.value.status == 422
        assert info.value.details == [{"field": "consumer.function",
                                       "message": info.value.details[0]["message"]}]


def test_concurrent_invocations_get_environments_of_their_own() -> None:
    local = LocalFunctions()
    function = "tierq.local.demo:push_consumer"  # a module with dataclasses in it
    first = local._take_environment(function)
    second = local._take_environment(function)  # the first is still busy: a fresh copy
    assert first is not second and first.__module__ != second.__module__
    local._give_back(function, second)
    assert local._take_environment(function) is second  # a free one is reused


def test_what_a_function_raises_or_returns_is_answered_as_lambda_does() -> None:
    local = LocalFunctions()
    raised = local.invoke("tests.dispatch.consumers:crash",
                          orjson.dumps({"Records": [{"messageId": "m", "attributes": {
                              "ApproximateReceiveCount": "1"}, "messageAttributes": {
                              "queue": {"stringValue": "q"}}}]}), read_timeout=30)
    assert raised.outcome == "function_error"
    assert raised.error == "RuntimeError"  # a name only: what may be stored on the tasks
    assert raised.detail == "the consumer crashed"  # (for the log)
    body = orjson.loads(raised.payload)
    assert body["errorType"] == "RuntimeError" and body["errorMessage"] == "the consumer crashed"
    missing = local.invoke("no_such_module:f", EVENT, read_timeout=30)
    assert missing.outcome == "not_invoked"
