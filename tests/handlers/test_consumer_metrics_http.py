"""GET /v1/metrics/consumers: per queue with a consumer, what the dispatcher did (the REST
side of Dispatched, Throttled and ConsumerErrors); an admin route."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.handlers.support import Invoke
from tierq.aws.runtime import use_consumers
from tierq.local.consumers import LocalFunctions


@pytest.fixture
def local_consumers() -> Iterator[None]:
    previous = use_consumers(LocalFunctions())
    yield
    use_consumers(previous)


@pytest.mark.usefixtures("local_consumers")
def test_the_counters_of_each_queue_with_a_consumer(call: Invoke) -> None:
    from tierq.aws.runtime import engine
    from tierq.maintenance.dispatcher import dispatcher_of, forget_dispatcher

    for queue in ("b-orders", "a-mail"):
        reply = call("PUT", f"/v1/queues/{queue}", {"consumer": {
            "function": "tests.dispatch.consumers:crash" if queue == "a-mail" else
            "tests.dispatch.consumers:keep", "batch_size": 5, "max_concurrency": 2}})
        assert reply.status == 200, reply.body
        assert call("POST", f"/v1/queues/{queue}/tasks",
                    {"tasks": [{"payload": i} for i in range(3)]}).status == 200
    assert call("PUT", "/v1/queues/plain", {"lease_seconds": 10}).status == 200
    dispatcher = dispatcher_of(engine().ctx)
    try:
        dispatcher.dispatch_once("b-orders")
        dispatcher.dispatch_once("a-mail")
    finally:
        forget_dispatcher(engine().ctx)
    reply = call("GET", "/v1/metrics/consumers")
    assert reply.status == 200, reply.body
    rows = {row["queue"]: row for row in reply.body["consumers"]}
    assert list(rows) == ["a-mail", "b-orders"] and reply.body["next"] is None
    assert rows["b-orders"] | {} == {
        "queue": "b-orders", "function": "tests.dispatch.consumers:keep", "batch_size": 5,
        "max_concurrency": 2, "running": 0, "batches": 1, "dispatched": 3, "acked": 3,
        "retried": 0, "dead": 0, "released": 0, "throttled": 0, "consumer_errors": 0}
    assert (rows["a-mail"]["dispatched"], rows["a-mail"]["retried"],
            rows["a-mail"]["consumer_errors"]) == (3, 3, 1)
    page = call("GET", "/v1/metrics/consumers", query={"limit": "1"})
    assert [r["queue"] for r in page.body["consumers"]] == ["a-mail"]
    rest = call("GET", "/v1/metrics/consumers", query={"after": page.body["next"]})
    assert [r["queue"] for r in rest.body["consumers"]] == ["b-orders"]


def test_only_an_admin_sees_them(call: Invoke) -> None:
    reply = call("GET", "/v1/metrics/consumers", claims={"tenant": "acme"})
    assert reply.status == 403, reply.body


def test_a_consumer_outside_the_stacks_allow_list_is_refused_with_403(
        call: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_CONSUMER_FUNCTIONS", "orders-consumer")
    monkeypatch.setenv("TIERQ_CONSUMER_ARN_PREFIX",
                       "arn:aws:lambda:eu-west-1:111122223333:function:")
    reply = call("PUT", "/v1/queues/orders", {"consumer": {"function": "payroll"},
                                              "lease_seconds": 9})
    assert reply.status == 403, reply.body
    error = reply.body["error"]
    assert error["code"] == "consumer_not_allowed"
    assert "'payroll' is not in the deployment's allow-list" in error["message"]
    assert error["details"] == [{"field": "consumer.function",
                                 "message": "not in the allow-list"}]
    assert call("GET", "/v1/queues/orders").status == 404  # nothing was written
    for allowed in ("orders-consumer",
                    "arn:aws:lambda:eu-west-1:111122223333:function:orders-consumer"):
        reply = call("PUT", "/v1/queues/orders", {"consumer": {"function": allowed}})
        assert reply.status == 200, reply.body
    tenant = call("PUT", "/v1/queues/orders", {"consumer": {"function": "orders-consumer"}},
                  claims={"tenant": "acme"})
    assert tenant.status == 403  # setting a consumer is an admin action
