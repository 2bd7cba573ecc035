"""One trace through the queue, over the functions on the real stores: an enqueue keeps the
caller's trace headers (or a task's own ``trace``), checked, with nothing written when they
are wrong; claims and the task view hand them back, whichever tier the task is claimed
from; a consumer function's records carry them as SQS does, while the dispatcher's invoke
carries no trace header of its own; a task without a trace stores nothing more."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import boto3  # type: ignore[import-untyped]
import orjson
import psycopg
import pytest
import redis
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.config import Config

from tests.handlers.support import Invoke, task_count
from tests.support.every_task import EVERY_TASK
from tierq.aws.consumers import LambdaFunctions
from tierq.aws.runtime import use_consumers
from tierq.logic.dispatch import AllowList

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
TRACESTATE = 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7'
XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
HEADERS = {"traceparent": TRACEPARENT, "tracestate": TRACESTATE, "X-Amzn-Trace-Id": XRAY}
WHOLE = {"traceparent": TRACEPARENT, "tracestate": TRACESTATE, "aws_trace_header": XRAY}

ACCOUNT = "111122223333"
PREFIX = f"arn:aws:lambda:eu-west-1:{ACCOUNT}:function:"
ARN = PREFIX + "traced-consumer"


def stored(pg: psycopg.Connection[Any], queue: str) -> list[Any]:
    """The trace each task of ``queue`` keeps, in their order; a batch member has none (a
    batch row holds only tasks without a trace), so it reads as a row without one."""
    return [row[0] for row in pg.execute(
        f"SELECT t.trace FROM {EVERY_TASK} LEFT JOIN tierq_tasks t USING (id) "
        "WHERE every_task.queue = %s ORDER BY every_task.seq", (queue,)).fetchall()]


def blobs(valkey: redis.Redis) -> list[bytes]:
    """Every warm blob in Valkey (the hashes of task blobs)."""
    out: list[bytes] = []
    for key in valkey.scan_iter(count=1000):
        if valkey.type(key) == b"hash":
            out.extend(v for v in valkey.hvals(key) if b'"p":' in v)
    return out


def test_headers_reach_every_task_of_a_request_and_a_tasks_own_trace_wins(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    own = {"traceparent": f"00-{'1' * 32}-{'2' * 16}-00"}
    reply = call("POST", "/v1/queues/t/tasks", {"tasks": [
        {"payload": 1}, {"payload": 2, "trace": own}]}, headers=HEADERS)
    assert reply.status == 200, reply.body
    first, second = (t["id"] for t in reply.body["tasks"])
    assert [orjson.loads(s) for s in stored(pg, "t")] == [WHOLE, own]
    assert call("GET", f"/v1/queues/t/tasks/{first}").body["trace"] == WHOLE
    assert call("GET", f"/v1/queues/t/tasks/{second}").body["trace"] == own
    claimed = call("POST", "/v1/queues/t/claims", {"max": 2}).body["tasks"]
    assert [t["trace"] for t in claimed] == [WHOLE, own]  # the parts given, as given


def test_a_tracestate_without_its_traceparent_is_dropped(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    """As W3C asks: a tracestate means nothing without the traceparent it goes with."""
    reply = call("POST", "/v1/queues/s/tasks", {"tasks": [
        {"payload": 1, "trace": {"tracestate": "a=b"}},
        {"payload": 2, "trace": {"tracestate": "a=b", "aws_trace_header": "Root=1-5-6"}}]},
        headers={"tracestate": "c=d"})
    assert reply.status == 200, reply.body
    assert stored(pg, "s") == [None, '{"aws_trace_header":"Root=1-5-6"}']


def test_the_gateways_own_xray_header_is_not_kept(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    """API Gateway adds ``X-Amzn-Trace-Id: Root=…`` to a request without one: naming no
    Parent, it continues nothing and is not stored."""
    reply = call("POST", "/v1/queues/g/tasks", {"tasks": [{"payload": 1}]},
                 headers={"X-Amzn-Trace-Id": "Root=1-5759e988-bd862e3fe1be46a994272793"})
    assert reply.status == 200, reply.body
    assert stored(pg, "g") == [None]


def test_a_task_without_a_trace_stores_nothing_more(
        call: Invoke, pg: psycopg.Connection[Any], valkey: redis.Redis) -> None:
    reply = call("POST", "/v1/queues/plain/tasks", {"tasks": [{"payload": {"n": 1}}]})
    assert reply.status == 200, reply.body
    assert stored(pg, "plain") == [None]
    [blob] = blobs(valkey)
    assert b'"tr"' not in blob and b"trace" not in blob
    [task] = call("POST", "/v1/queues/plain/claims", {"max": 1}).body["tasks"]
    assert "trace" not in task  # nothing more in the answer either


def test_a_cold_task_is_claimed_with_its_trace(call: Invoke, pg: psycopg.Connection[Any],
                                                 valkey: redis.Redis) -> None:
    """Promoted from the cold line (its blob built in SQL), a task keeps its trace."""
    assert call("PUT", "/v1/queues/narrow", {"warm_max": 1}).status == 200
    reply = call("POST", "/v1/queues/narrow/tasks",
                 {"tasks": [{"payload": i} for i in range(5)]}, headers=HEADERS)
    assert reply.status == 200, reply.body
    assert task_count(pg, "narrow", state="cold") == 4
    got: list[Any] = []
    while len(got) < 5:
        tasks = call("POST", "/v1/queues/narrow/claims", {"max": 5}).body["tasks"]
        assert tasks, "the cold tasks were not promoted"
        got.extend(tasks)
    assert [t["payload"] for t in got] == list(range(5))
    assert all(t["trace"] == WHOLE for t in got)


@pytest.mark.parametrize(("headers", "body", "field"), [
    ({"traceparent": "00-" + "A" * 32 + "-00f067aa0ba902b7-01"}, None, "traceparent"),
    ({"traceparent": f"01-{TRACE_ID}-00f067aa0ba902b7-01"}, None, "traceparent"),
    ({"traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01"}, None, "traceparent"),
    ({"traceparent": f"00-{TRACE_ID}-{'0' * 16}-01"}, None, "traceparent"),
    ({"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7"}, None, "traceparent"),
    ({"traceparent": TRACEPARENT, "tracestate": "k=" + "v" * 600}, None, "tracestate"),
    ({"X-Amzn-Trace-Id": "Root=" + "1" * 300}, None, "X-Amzn-Trace-Id"),
    ({}, {"traceparent": "00-nothex"}, "tasks[1].trace.traceparent"),
    ({}, {"traceparent": TRACEPARENT, "tracestate": "x" * 513}, "tasks[1].trace.tracestate"),
    ({}, {"traceparent": TRACEPARENT, "extra": 1}, "tasks[1].trace.extra"),
])
def test_a_wrong_trace_is_422_naming_it_and_nothing_is_written(
        call: Invoke, pg: psycopg.Connection[Any], headers: dict[str, str],
        body: dict[str, Any] | None, field: str) -> None:
    tasks: list[dict[str, Any]] = [{"payload": 1}, {"payload": 2}]
    if body is not None:
        tasks[1]["trace"] = body
    reply = call("POST", "/v1/queues/bad/tasks", {"tasks": tasks}, headers=headers)
    assert reply.status == 422, reply.body
    # (a header is named as HTTP APIs pass it on: in lower case)
    assert any(str(d.get("field")).lower() == field.lower()
               for d in reply.body["error"]["details"]), reply.body
    assert task_count(pg) == 0


class _Body(io.BytesIO):
    """An HTTP response's body as botocore reads it."""

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield self.getvalue()


def test_a_consumer_record_carries_the_trace_and_the_invoke_carries_none(
        call: Invoke, aws_credentials: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """As SQS: ``attributes.AWSTraceHeader`` and a ``traceparent`` message attribute. The
    dispatcher's invoke is not made part of a task's trace: its trace header, when botocore
    adds one, is the dispatcher's own (the environment's ``_X_AMZN_TRACE_ID``)."""
    from tierq.aws.runtime import engine
    from tierq.maintenance.dispatcher import dispatcher_of, forget_dispatcher

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "tierq-dispatcher")
    own = "Root=1-00000000-000000000000000000000001;Parent=0000000000000001;Sampled=1"
    monkeypatch.setenv("_X_AMZN_TRACE_ID", own)
    client = boto3.client("lambda", region_name="eu-west-1",
                          config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
    invokes: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def send(request: Any, **kwargs: Any) -> AWSResponse:
        if request.url.endswith("/invocations"):
            invokes.append((dict(request.headers), orjson.loads(request.body)))
            return AWSResponse(request.url, 200, HTTPHeaders(), _Body(b"null"))
        return AWSResponse(request.url, 200, HTTPHeaders(), _Body(b'{"Timeout": 30}'))

    client.meta.events.register("before-send.lambda", send)
    previous = use_consumers(LambdaFunctions(
        AllowList((ARN,), PREFIX), client_factory=lambda read_timeout: client,
        region="eu-west-1", account=ACCOUNT))
    try:
        assert call("PUT", "/v1/queues/orders", {"consumer": {"function": ARN}}).status == 200
        traced = call("POST", "/v1/queues/orders/tasks", {"payload": 1}, headers=HEADERS)
        plain = call("POST", "/v1/queues/orders/tasks", {"payload": 2})
        counts = dispatcher_of(engine().ctx).dispatch_once("orders")
    finally:
        forget_dispatcher(engine().ctx)
        use_consumers(previous)
    assert (counts.dispatched, counts.acked) == (2, 2)
    records = {r["messageId"]: r for _, event in invokes for r in event["Records"]}
    record = records[traced.body["id"]]
    assert record["attributes"]["AWSTraceHeader"] == XRAY
    assert record["messageAttributes"]["traceparent"]["stringValue"] == TRACEPARENT
    assert record["messageAttributes"]["tracestate"]["stringValue"] == TRACESTATE
    untraced = records[plain.body["id"]]
    assert "AWSTraceHeader" not in untraced["attributes"]
    assert not {"traceparent", "tracestate"} & set(untraced["messageAttributes"])
    for headers, _ in invokes:
        named = {name.lower(): value.decode() if isinstance(value, bytes) else value
                 for name, value in headers.items()}
        assert "traceparent" not in named
        assert named.get("x-amzn-trace-id") in (None, own)
