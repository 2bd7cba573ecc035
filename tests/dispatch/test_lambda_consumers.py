"""Lambda consumers (tierq.aws.consumers) with the Lambda API stubbed (botocore Stubber) and
real PostgreSQL and Valkey: what each answer of Invoke does to the batch, the client's
single attempt and read timeout, and the allow-list."""

from __future__ import annotations

import io
import logging
import socket
from collections.abc import Iterator
from typing import Any

import boto3  # type: ignore[import-untyped]
import orjson
import psycopg
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from tests.dispatch.support import WITH_ATTEMPTS
from tierq.aws.consumers import LambdaFunctions, LambdaWaker, lambda_client
from tierq.engine import Tierq
from tierq.errors import Forbidden
from tierq.logic import dispatch
from tierq.logic.dispatch import AllowList, ConsumerNotAllowed, read_counts
from tierq.maintenance.dispatcher import dispatcher_of, forget_dispatcher

pytestmark = pytest.mark.usefixtures("clean_stores")

PREFIX = "arn:aws:lambda:eu-west-1:111122223333:function:"
FUNCTION = "orders-consumer"


@pytest.fixture
def lam(aws_credentials: None) -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("lambda", region_name="eu-west-1")
    with Stubber(client) as stubber:
        yield client, stubber


@pytest.fixture
def installed(lam: tuple[Any, Stubber], tq: Tierq) -> Iterator[LambdaFunctions]:
    client, stubber = lam
    functions = LambdaFunctions(AllowList((FUNCTION,), PREFIX),
                                client_factory=lambda read_timeout: client,
                                region="eu-west-1", account="111122223333")
    tq.ctx.consumers = functions
    stubber.add_response("get_function_configuration", {"Timeout": 30},
                         {"FunctionName": FUNCTION})
    yield functions
    forget_dispatcher(tq.ctx)


def payload(body: Any) -> StreamingBody:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return StreamingBody(io.BytesIO(raw), len(raw))


def setup_queue(tq: Tierq, n: int = 3) -> list[str]:
    tq.put_queue("orders", {"consumer": {"function": FUNCTION, "batch_size": 10},
                            "backoff": {"kind": "fixed", "base_seconds": 0, "jitter": 0}})
    return [str(o.id) for o in tq.enqueue("orders", [{"payload": {"n": i}} for i in range(n)])]


def states(pg: psycopg.Connection[Any]) -> dict[str, tuple[str, int]]:
    return {str(i): (s, a) for i, s, a in pg.execute(
        f"SELECT id, state, attempts FROM {WITH_ATTEMPTS} WHERE queue = 'orders'").fetchall()}


def test_partial_failures_are_nacked_and_the_rest_acked(
        tq: Tierq, pg: psycopg.Connection[Any], lam: tuple[Any, Stubber],
        installed: LambdaFunctions) -> None:
    ids = setup_queue(tq)
    _, stubber = lam
    stubber.add_response("invoke", {"StatusCode": 200, "Payload": payload(
        {"batchItemFailures": [{"itemIdentifier": ids[1]}]})},
        {"FunctionName": FUNCTION, "InvocationType": "RequestResponse", "Payload": ANY})
    counts = dispatcher_of(tq.ctx).dispatch_once("orders")
    stubber.assert_no_pending_responses()
    assert (counts.dispatched, counts.acked, counts.retried) == (3, 2, 1)
    left = states(pg)
    assert set(left) == {ids[1]} and left[ids[1]][1] == 1  # one attempt counted
    # the failure named that record only, and that record keeps only that it was named
    assert pg.execute("SELECT last_error FROM tierq_tasks").fetchall() == [
        ("batch_item_failure",)]
    [again] = tq.claim("orders", max=5)
    assert str(again.id) == ids[1] and again.attempt == 2


def test_a_response_naming_an_item_not_in_the_batch_fails_it_with_a_code(
        tq: Tierq, pg: psycopg.Connection[Any], lam: tuple[Any, Stubber],
        installed: LambdaFunctions) -> None:
    setup_queue(tq)
    _, stubber = lam
    stubber.add_response("invoke", {"StatusCode": 200, "Payload": payload(
        {"batchItemFailures": [{"itemIdentifier": "card 4111111111111111"}]})})
    counts = dispatcher_of(tq.ctx).dispatch_once("orders")
    assert (counts.dispatched, counts.acked, counts.retried) == (3, 0, 3)
    errors = {e for (e,) in pg.execute("SELECT last_error FROM tierq_tasks").fetchall()}
    assert errors == {"invalid_batch_response"}


def dispatcher_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tierq.logic.dispatch"]


def test_a_function_error_nacks_the_whole_batch(
        tq: Tierq, pg: psycopg.Connection[Any], lam: tuple[Any, Stubber],
        installed: LambdaFunctions, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tierq.logic.dispatch")
    ids = setup_queue(tq)
    _, stubber = lam
    stubber.add_response("invoke", {"StatusCode": 200, "FunctionError": "Unhandled",
                                    "Payload": payload({"errorType": "KeyError",
                                                        "errorMessage": "'sku'"})})
    counts = dispatcher_of(tq.ctx).dispatch_once("orders")
    assert (counts.dispatched, counts.acked, counts.retried, counts.consumer_errors) == \
        (3, 0, 3, 1)
    assert {a for _, a in states(pg).values()} == {1}
    errors = {e for (e,) in pg.execute("SELECT last_error FROM tierq_tasks").fetchall()}
    assert errors == {"function_error: KeyError"}
    assert read_counts(tq.ctx, "orders").consumer_errors == 1
    # the function's errorMessage is the operator's, in the dispatcher's log
    [said] = dispatcher_lines(caplog)
    assert said.getMessage() == ("orders-consumer failed on a batch of queue 'orders', "
                                 "tenant '_' (KeyError): 'sku'")
    assert sorted(str(t.id) for t in tq.claim("orders", max=5)) == sorted(ids)


@pytest.mark.parametrize(("header", "body", "stored"), [
    # a timed-out function: Lambda's error type
    ("Unhandled", {"errorType": "Sandbox.Timedout",
                   "errorMessage": "2026-11-22T10:00:00Z 3f1c Task timed out after 30.00 "
                                   "seconds"}, "function_error: Sandbox.Timedout"),
    # no errorType, or one that is not a plain name (it could be anything): the header's
    ("Unhandled", {"errorMessage": "card 4111111111111111 declined"}, "function_error: Unhandled"),
    ("Unhandled", {"errorType": "Declined: card 4111111111111111", "errorMessage": "x"},
     "function_error: Unhandled"),
    ("Unhandled", {"errorType": "E" * 5000}, "function_error: Unhandled"),
    ("Handled", b"card 4111111111111111 declined", "function_error: Handled"),
    ("arn:aws:lambda:eu-west-1:111122223333:function:x", {"errorType": ["KeyError"]},
     "function_error: Unhandled"),
])
def test_a_function_error_stores_its_error_type_only(
        tq: Tierq, pg: psycopg.Connection[Any], lam: tuple[Any, Stubber],
        installed: LambdaFunctions, header: str, body: Any, stored: str) -> None:
    setup_queue(tq)
    _, stubber = lam
    stubber.add_response("invoke", {"StatusCode": 200, "FunctionError": header,
                                    "Payload": payload(body)})
    counts = dispatcher_of(tq.ctx).dispatch_once("orders")
    assert (counts.retried, counts.consumer_errors) == (3, 1)
    errors = {e for (e,) in pg.execute("SELECT last_error FROM tierq_tasks").fetchall()}
    assert errors == {stored}


ARN = PREFIX + FUNCTION
ENDPOINT = "https://lambda.eu-west-1.amazonaws.com/2015-03-31/functions/"


def test_an_aws_error_is_stored_as_its_name_without_its_message(
        tq: Tierq, pg: psycopg.Connection[Any], lam: tuple[Any, Stubber],
        installed: LambdaFunctions, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tierq.logic.dispatch")
    setup_queue(tq)
    _, stubber = lam
    stubber.add_client_error(
        "invoke", service_error_code="ServiceException", http_status_code=500,
        service_message=f"An internal error invoking {ARN} via {ENDPOINT}{ARN}/invocations "
                        "(account 111122223333)")
    counts = dispatcher_of(tq.ctx).dispatch_once("orders")
    assert (counts.consumer_errors, counts.retried) == (1, 3)
    errors = {e for (e,) in pg.execute("SELECT last_error FROM tierq_tasks").fetchall()}
    assert errors == {"invoke_failed: ServiceException"}
    # botocore's message, ARN and all, is in the dispatcher's log only
    [said] = dispatcher_lines(caplog)
    assert said.levelno == logging.WARNING
    assert said.getMessage().startswith(
        "invoking orders-consumer for a batch of queue 'orders', tenant '_' failed, whether "
        "it ran is unknown (ServiceException): ServiceException: An internal error invoking "
        + ARN)
    assert (said.queue, said.tenant) == ("orders", "_")  # type: ignore[attr-defined]


class _Body:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield self.raw


@pytest.mark.parametrize("error", ["ReadTimeoutError", "ConnectionClosedError"])
def test_a_botocore_error_is_stored_as_its_class_without_the_endpoint(
        tq: Tierq, pg: psycopg.Connection[Any], aws_credentials: None, error: str) -> None:
    """Through botocore's own pipeline: the exception it raises when the answer of an invoke
    never comes, whose message names the endpoint URL (with the function's ARN, and so the
    account id, in its path)."""
    import botocore.exceptions
    from botocore.config import Config

    client = boto3.client("lambda", region_name="eu-west-1",
                          config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
    raised: list[str] = []

    def send(request: Any, **kwargs: Any) -> AWSResponse:
        """Stands in for the network: the configuration answers, the invoke never does."""
        if request.url.endswith("/invocations"):
            exc = getattr(botocore.exceptions, error)(endpoint_url=request.url)
            raised.append(str(exc))
            raise exc
        return AWSResponse(request.url, 200, HTTPHeaders(), _Body(b'{"Timeout": 30}'))

    client.meta.events.register("before-send.lambda", send)
    functions = LambdaFunctions(AllowList((FUNCTION,), PREFIX),
                                client_factory=lambda read_timeout: client,
                                region="eu-west-1", account="111122223333")
    tq.ctx.consumers = functions
    try:
        tq.put_queue("orders", {"consumer": {"function": ARN, "batch_size": 10}})
        tq.enqueue("orders", [{"payload": {"n": i}} for i in range(3)])
        counts = dispatcher_of(tq.ctx).dispatch_once("orders")
    finally:
        forget_dispatcher(tq.ctx)
    assert (counts.consumer_errors, counts.retried) == (1, 3)
    assert "111122223333" in raised[0] and ENDPOINT in raised[0]  # what botocore said
    errors = {e for (e,) in pg.execute("SELECT last_error FROM tierq_tasks").fetchall()}
    assert errors == {f"invoke_failed: {error}"}


def test_throttling_releases_the_batch_without_an_attempt(
        tq: Tierq, pg: psycopg.Connection[Any], lam: tuple[Any, Stubber],
        installed: LambdaFunctions) -> None:
    ids = setup_queue(tq)
    _, stubber = lam
    stubber.add_client_error("invoke", service_error_code="TooManyRequestsException",
                             service_message="Rate Exceeded.", http_status_code=429)
    counts = dispatcher_of(tq.ctx).dispatch_once("orders")
    assert (counts.throttled, counts.released, counts.dispatched, counts.retried) == \
        (1, 3, 0, 0)
    assert {a for _, a in states(pg).values()} == {0}
    again = tq.claim("orders", max=5)
    assert sorted(str(t.id) for t in again) == sorted(ids)
    assert {t.attempt for t in again} == {1}  # as if never handed out
    assert read_counts(tq.ctx, "orders").throttled == 1


def test_an_invoke_refused_before_the_function_ran_releases_the_batch(
        tq: Tierq, pg: psycopg.Connection[Any], lam: tuple[Any, Stubber],
        installed: LambdaFunctions) -> None:
    setup_queue(tq)
    _, stubber = lam
    stubber.add_client_error("invoke", service_error_code="ResourceNotFoundException",
                             http_status_code=404)
    counts = dispatcher_of(tq.ctx).dispatch_once("orders")
    assert (counts.consumer_errors, counts.released, counts.retried) == (1, 3, 0)
    assert {a for _, a in states(pg).values()} == {0}


def test_a_service_error_may_have_run_the_function_so_it_counts_an_attempt(
        tq: Tierq, pg: psycopg.Connection[Any], lam: tuple[Any, Stubber],
        installed: LambdaFunctions) -> None:
    setup_queue(tq)
    _, stubber = lam
    stubber.add_client_error("invoke", service_error_code="ServiceException",
                             http_status_code=500)
    counts = dispatcher_of(tq.ctx).dispatch_once("orders")
    assert (counts.consumer_errors, counts.retried, counts.released) == (1, 3, 0)
    # it may still be running (Lambda answered 500, or the connection was cut): the tasks
    # run again no sooner than their lease would have ended (the function's timeout and
    # margins), even with a backoff of 0, so no batch runs twice at once
    assert tq.claim("orders", max=5) == []
    [(wait,)] = pg.execute("SELECT DISTINCT round(extract(epoch FROM run_at - now())) "
                           "FROM tierq_tasks").fetchall()
    assert wait >= 30


def test_the_invoke_client_makes_one_attempt_and_waits_past_the_timeout(
        aws_credentials: None) -> None:
    client = lambda_client(45.0)
    config = client.meta.config
    assert config.retries == {"total_max_attempts": 1, "mode": "standard"}
    assert config.read_timeout == 45.0
    consumer = dispatch.Consumer("q", "f", 10, None, 500, timeout=30.0)
    assert consumer.read_timeout > 30.0
    assert consumer.lease_seconds() > consumer.read_timeout + 0.5


def test_the_invoke_connection_probes_well_within_the_nat_idle_timeout(
        aws_credentials: None) -> None:
    """A NAT gateway drops a connection idle for 350 s; an invoke waits up to 900 s."""
    client = lambda_client(900.0)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        manager = client._endpoint.http_session._manager
        connection = manager.connection_from_url(f"http://127.0.0.1:{port}/")._new_conn()
        connection.connect()  # a real connection, with the client's socket options
        try:
            sock = connection.sock
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            idle = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
            interval = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL)
            probes = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT)
        finally:
            connection.close()
    assert idle + interval * probes < 350
    assert idle <= 60


def test_the_wake_is_an_asynchronous_invoke_without_a_trace_header(
        aws_credentials: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "tierq-enqueue")
    monkeypatch.setenv("_X_AMZN_TRACE_ID", "Root=1-5759e988-bd862e3fe1be46a994272793")
    waker = LambdaWaker("tierq-dispatcher")
    plain = lambda_client(10.0)
    sent: list[dict[str, Any]] = []

    def answer(request: Any, **kwargs: Any) -> AWSResponse:
        """Stands in for Lambda (an answer here sends nothing): 202 Accepted."""
        sent.append({k: v for k, v in request.headers.items()})
        return AWSResponse(request.url, 202, HTTPHeaders(), _Raw())

    for client in (plain, waker.client):
        client.meta.events.register("before-send.lambda.Invoke", answer)
    plain.invoke(FunctionName="x", InvocationType="Event", Payload=b"{}")
    assert "X-Amzn-Trace-Id" in sent.pop()  # what botocore adds inside a function
    waker()  # sent before the call returns: a frozen environment would hold a thread's
    headers = sent.pop()
    assert "X-Amzn-Trace-Id" not in headers
    assert headers["X-Amz-Invocation-Type"] in (b"Event", "Event")


class _Raw:
    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield b""


def test_the_allow_list_takes_names_and_arns_of_the_stacks_functions() -> None:
    allowed = AllowList(("orders-consumer", "billing:live"), PREFIX)
    allowed.check("orders-consumer")
    allowed.check(PREFIX + "orders-consumer")
    allowed.check("billing:live")
    for refused in ("billing", "orders", "arn:aws:lambda:us-east-1:999999999999:function:"
                    "orders-consumer", PREFIX + "billing"):
        with pytest.raises(ConsumerNotAllowed, match="not in the deployment's allow-list"):
            allowed.check(refused)
    with pytest.raises(ConsumerNotAllowed, match="allows no consumer functions") as info:
        AllowList(()).check("anything")
    assert issubclass(ConsumerNotAllowed, Forbidden)
    assert info.value.status == 403


def test_the_allow_list_as_the_template_gives_it_holds_arns() -> None:
    # template.yaml passes ConsumerFunctionArns (ARNs) as TIERQ_CONSUMER_FUNCTIONS: a
    # listed function is allowed by its ARN and, in the stack's account and region, by name
    elsewhere = "arn:aws:lambda:us-east-1:999999999999:function:partner"
    allowed = AllowList(dispatch.allow_list(
        f"{PREFIX}orders-consumer, {PREFIX}billing:live,{elsewhere}"), PREFIX)
    for function in ("orders-consumer", PREFIX + "orders-consumer", "billing:live",
                     PREFIX + "billing:live", elsewhere):
        allowed.check(function)
    for refused in ("billing", PREFIX + "billing", "partner", PREFIX + "partner",
                    "arn:aws:lambda:us-east-1:999999999999:function:orders-consumer",
                    "orders-consumer-2", "orders"):
        with pytest.raises(ConsumerNotAllowed, match="not in the deployment's allow-list"):
            allowed.check(refused)


def test_setting_a_consumer_outside_the_allow_list_is_refused_and_writes_nothing(
        make_tq: Any, pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(consumer_functions="orders-consumer", consumer_arn_prefix=PREFIX)
    with pytest.raises(ConsumerNotAllowed):
        tq.put_queue("orders", {"consumer": {"function": "payroll"}, "lease_seconds": 9})
    assert pg.execute("SELECT count(*) FROM tierq_queues").fetchone() == (0,)
    tq.put_queue("orders", {"consumer": {"function": PREFIX + "orders-consumer"}})
    consumer = tq.queue_settings("orders").consumer
    assert consumer is not None and consumer.function == PREFIX + "orders-consumer"


def test_the_dispatchers_function_gives_lambda_functions_to_engines_without_their_own(
        make_tq: Any) -> None:
    """The dispatcher's function gives the engines it runs the allow-list's Lambda functions,
    one object for all; an engine given its own (the local stack's) keeps them."""
    from tierq.aws.consumers import provide_functions
    from tierq.local.consumers import LocalFunctions
    from tierq.maintenance.dispatcher import NoConsumerFunctions

    bare, other, local = make_tq(), make_tq(), make_tq()
    with pytest.raises(NoConsumerFunctions):
        dispatcher_of(bare.ctx)
    own = LocalFunctions()
    local.ctx.consumers = own
    settings = bare.settings.replace(consumer_functions=ARN, consumer_arn_prefix=PREFIX)
    provide_functions([bare.ctx, other.ctx, local.ctx], settings)
    assert isinstance(bare.ctx.consumers, LambdaFunctions)
    assert other.ctx.consumers is bare.ctx.consumers
    assert local.ctx.consumers is own
    bare.put_queue("orders", {"consumer": {"function": ARN}})  # in the allow-list
    with pytest.raises(ConsumerNotAllowed):
        bare.put_queue("orders", {"consumer": {"function": PREFIX + "elsewhere"}})
