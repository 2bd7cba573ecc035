"""One trace from the producer through the queue into the worker, on the local stack over
HTTP: ``Client.enqueue`` sends the current OpenTelemetry context (or ``trace=``, or
nothing with ``propagate=False``), and the Worker and AsyncWorker run each handler in a
span that is a child of the producer's, the task's trace context on ``task.trace``; a
``tracer`` of one's own (the hook) or none; X-Ray through the SDK Powertools' Tracer uses."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace as otel
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.local_api import QueueNames
from tierq.client import AsyncClient, Client, tracing
from tierq.client.tracing import OpenTelemetryTracer, XRayTracer
from tierq.client.worker import AsyncWorker, Worker
from tierq.models import ClaimedTask

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


@pytest.fixture
def spans() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    """A tracer of its own provider (not the global one), and what it exported."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("tests"), exporter
    provider.shutdown()


def _hex(number: int, width: int) -> str:
    return format(number, f"0{width}x")


def test_a_trace_runs_from_the_producer_into_the_workers_handler(
        api: Client, names: QueueNames, spans: tuple[Any, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    queue = names["traced"]
    seen: list[tuple[Any, Any]] = []

    def handler(task: ClaimedTask) -> None:
        seen.append((task.trace, otel.get_current_span().get_span_context()))

    with tracer.start_as_current_span("produce") as producing:
        [outcome] = api.enqueue(queue, [{"payload": {"n": 1}}])
    produced = producing.get_span_context()
    Worker(api, queue, handler, wait_seconds=0.5, burst=True, install_signal_handlers=False,
           tracer=OpenTelemetryTracer(tracer)).run()

    [(trace, context)] = seen
    assert trace is not None and trace.traceparent is not None
    assert trace.traceparent.startswith(
        f"00-{_hex(produced.trace_id, 32)}-{_hex(produced.span_id, 16)}-")
    assert context.trace_id == produced.trace_id  # the handler runs in the producer's trace
    [span] = [s for s in exporter.get_finished_spans() if s.name == f"{queue} process"]
    assert isinstance(span, ReadableSpan) and span.parent is not None
    assert (span.parent.trace_id, span.parent.span_id) == (produced.trace_id, produced.span_id)
    assert span.kind == otel.SpanKind.CONSUMER
    assert span.attributes is not None
    assert span.attributes["messaging.message.id"] == str(outcome.id)


def test_the_async_worker_continues_the_trace_too(
        api_url: str, api: Client, names: QueueNames,
        spans: tuple[Any, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    queue = names["traced_async"]
    api.enqueue(queue, [{"payload": i} for i in range(3)], trace={"traceparent": TRACEPARENT})
    seen: list[int] = []

    async def handler(task: ClaimedTask) -> None:
        await asyncio.sleep(0.01)
        seen.append(otel.get_current_span().get_span_context().trace_id)

    async def main() -> None:
        async with AsyncClient(api_url) as client:
            await AsyncWorker(client, queue, handler, install_signal_handlers=False,
                              wait_seconds=0.5, burst=True,
                              tracer=OpenTelemetryTracer(tracer)).run()

    asyncio.run(main())
    assert seen == [int(TRACEPARENT[3:35], 16)] * 3
    parents = {s.parent.span_id for s in exporter.get_finished_spans()
               if s.name == f"{queue} process" and s.parent is not None}
    assert parents == {int(TRACEPARENT[36:52], 16)}


def test_explicit_traces_win_and_propagation_can_be_off(
        api: Client, names: QueueNames, spans: tuple[Any, InMemorySpanExporter],
        monkeypatch: pytest.MonkeyPatch) -> None:
    tracer, _ = spans
    queue = names["explicit"]
    own = {"traceparent": f"00-{'1' * 32}-{'2' * 16}-00"}
    monkeypatch.setenv("_X_AMZN_TRACE_ID", XRAY)  # as in a Lambda function
    with tracer.start_as_current_span("produce"):
        given = api.enqueue(queue, [{"payload": 1}], trace={"traceparent": TRACEPARENT})
        mixed = api.enqueue(queue, [{"payload": 2, "trace": own}, {"payload": 3}])
        off = api.enqueue(queue, [{"payload": 4}], propagate=False)
    given_view = api.get_task(queue, given[0].id).trace
    assert given_view is not None and given_view.traceparent == TRACEPARENT
    own_view = api.get_task(queue, mixed[0].id).trace
    assert own_view is not None and own_view.traceparent == own["traceparent"]
    assert own_view.aws_trace_header is None  # a task's own trace wins whole
    current = api.get_task(queue, mixed[1].id).trace
    assert current is not None and current.aws_trace_header == XRAY
    assert current.traceparent is not None and current.traceparent != TRACEPARENT
    assert api.get_task(queue, off[0].id).trace is None


def test_a_tracer_of_ones_own_or_none(api: Client, names: QueueNames) -> None:
    """The hook: any object with ``span(task, name)``; ``None`` starts no span."""
    queue = names["hooked"]
    api.enqueue(queue, [{"payload": 1}], trace={"traceparent": TRACEPARENT})
    api.enqueue(queue, [{"payload": 2}], propagate=False)
    spans: list[tuple[str, Any, str]] = []
    inside: list[bool] = []

    class Recording:
        open = False

        @contextlib.contextmanager
        def span(self, task: ClaimedTask, name: str) -> Iterator[None]:
            spans.append((name, task.trace and task.trace.traceparent, str(task.payload)))
            self.open = True
            try:
                yield
            finally:
                self.open = False

    recording = Recording()
    Worker(api, queue, lambda task: inside.append(recording.open), burst=True,
           wait_seconds=0.5, install_signal_handlers=False, concurrency=1,
           tracer=recording).run()
    assert sorted(spans, key=lambda s: s[2]) == [
        (f"{queue} process", TRACEPARENT, "1"), (f"{queue} process", None, "2")]
    assert inside == [True, True]
    worker = Worker(api, queue, lambda task: None, tracer=None)
    assert worker.tracer is None
    with pytest.raises(ValueError, match="tracer must be"):
        Worker(api, queue, lambda task: None, tracer="otel")


def test_auto_picks_opentelemetry_when_installed() -> None:
    assert isinstance(tracing.default_tracer(), OpenTelemetryTracer)


def test_xray_segments_continue_the_tasks_trace_header(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside Lambda, the handler's segment takes the task's Root and Parent."""
    from aws_xray_sdk.core import AWSXRayRecorder

    sent: list[Any] = []

    class Emitter:
        def send_entity(self, entity: Any) -> None:
            sent.append(entity)

        def set_daemon_address(self, address: Any) -> None:
            pass

    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    recorder = AWSXRayRecorder()
    recorder.configure(emitter=Emitter(), sampling=False, context_missing="IGNORE_ERROR")
    task = ClaimedTask.model_validate({
        "id": "01a22222-2bb3-73ac-ad20-0f44c2f37de4", "queue": "q", "tenant": "_",
        "key": None, "priority": 0, "payload": 1, "attempt": 1, "max_attempts": 3,
        "lease_token": "t", "lease_expires_at": "2030-01-01T00:00:00Z", "redelivered": False,
        "enqueued_at": "2030-01-01T00:00:00Z", "trace": {"aws_trace_header": XRAY}})
    with XRayTracer(recorder).span(task, "q process"):
        pass
    [segment] = sent
    assert segment.trace_id == "1-5759e988-bd862e3fe1be46a994272793"
    assert segment.parent_id == "53995c3f42cd8ad8"
    assert segment.name == "q process"
