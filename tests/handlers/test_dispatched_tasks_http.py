"""What a tenant sees of a task a consumer function is working on, through the functions
with the Lambda API answered by a stand-in for the network: the dispatcher holds the lease
as ``dispatcher``, never under the function's name, which may be its ARN (and so the
account id)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import boto3  # type: ignore[import-untyped]
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.config import Config

from tests.handlers.support import Invoke
from tierq.aws.consumers import LambdaFunctions
from tierq.aws.runtime import use_consumers
from tierq.logic.dispatch import AllowList

ACCOUNT = "111122223333"
PREFIX = f"arn:aws:lambda:eu-west-1:{ACCOUNT}:function:"
ARN = PREFIX + "orders-consumer"
ACME = {"tenant": "acme"}


class _Body(io.BytesIO):
    """An HTTP response's body as botocore reads it (streamed or read)."""

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield self.getvalue()


def test_a_tenants_view_of_a_dispatched_task_names_no_arn(
        call: Invoke, aws_credentials: None) -> None:
    from tierq.aws.runtime import engine
    from tierq.maintenance.dispatcher import dispatcher_of, forget_dispatcher

    client = boto3.client("lambda", region_name="eu-west-1",
                          config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
    seen: dict[str, Any] = {}
    task_id = ""

    def send(request: Any, **kwargs: Any) -> AWSResponse:
        """Stands in for the network. While the function would run, its task is looked at
        as its tenant sees it: the task's view and the running list."""
        if request.url.endswith("/invocations"):
            seen["task"] = call("GET", f"/v1/queues/orders/tasks/{task_id}",
                                claims=ACME).body
            seen["running"] = call("GET", "/v1/metrics/queues/running", claims=ACME).body
            return AWSResponse(request.url, 200, HTTPHeaders(), _Body(b"null"))
        return AWSResponse(request.url, 200, HTTPHeaders(), _Body(b'{"Timeout": 30}'))

    client.meta.events.register("before-send.lambda", send)
    previous = use_consumers(LambdaFunctions(
        AllowList((ARN,), PREFIX), client_factory=lambda read_timeout: client,
        region="eu-west-1", account=ACCOUNT))
    try:
        reply = call("PUT", "/v1/queues/orders", {"consumer": {"function": ARN}})
        assert reply.status == 200, reply.body
        task_id = call("POST", "/v1/queues/orders/tasks", {"payload": 1}, claims=ACME
                       ).body["id"]
        counts = dispatcher_of(engine().ctx).dispatch_once("orders")
    finally:
        forget_dispatcher(engine().ctx)
        use_consumers(previous)
    assert (counts.dispatched, counts.acked) == (1, 1)
    assert seen["task"]["state"] == "leased" and seen["task"]["worker"] == "dispatcher"
    assert [r["worker"] for r in seen["running"]["running"]] == ["dispatcher"]
    assert ACCOUNT not in json.dumps(seen) and "arn:" not in json.dumps(seen)
