"""One trace through the queue, on the client's side: an enqueue sends the caller's trace
context, and the Worker and AsyncWorker run each handler in a span that continues the trace
of the task's producer.

Both are optional and add no dependency:

* **Enqueue.** ``Client.enqueue`` (and ``flow``) sends the trace context given as
  ``trace=``, or by default the current one (:func:`current_trace`): OpenTelemetry's
  (``traceparent``, ``tracestate``) when ``opentelemetry-api`` is installed and a span is
  current, and Lambda's X-Ray header (``_X_AMZN_TRACE_ID``) inside a Lambda function. They
  go as the request's headers, kept with each task that gives no ``trace`` of its own;
  ``propagate=False`` sends none.
* **Handlers.** A worker's ``tracer`` (:class:`TaskTracer`: anything with
  ``span(task, name)`` returning a context manager) starts the handler's span. By default
  (``"auto"``) :func:`default_tracer` picks OpenTelemetry when it is installed (the span is a
  child of the task's ``traceparent``, kind CONSUMER), else X-Ray through the
  ``aws-xray-sdk`` that Powertools' Tracer uses when an X-Ray daemon is configured
  (``AWS_XRAY_DAEMON_ADDRESS``) or the worker runs in Lambda; ``None`` starts no span.
  The task's trace context is ``task.trace`` (``traceparent``, ``tracestate``,
  ``aws_trace_header``) either way.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from tierq.models.leases import ClaimedTask
from tierq.models.traces import MAX_AWS_TRACE_HEADER, MAX_TRACESTATE, TraceContext
from tierq.models.traces import traceparent_problem as _traceparent_problem

# the lookups of the optional packages, made once per process: an import that fails is
# searched for again on every call
_MISSING: Any = object()
_modules: dict[str, Any] = {}


def _optional(name: str) -> Any:
    """The module ``name``, or None when it is not installed (looked up once)."""
    module = _modules.get(name, _MISSING)
    if module is _MISSING:
        try:
            module = __import__(name, fromlist=["_"])
        except ImportError:
            module = None
        _modules[name] = module
    return module


def current_trace() -> TraceContext | None:
    """The caller's trace context: OpenTelemetry's current span (when installed; its X-Ray
    header too when an X-Ray propagator is configured) and, in a Lambda function, the
    invocation's X-Ray header; None when there is none. Values that are not a valid
    W3C traceparent (or are too long) are left out."""
    traceparent = tracestate = None
    propagate = _optional("opentelemetry.propagate")
    if propagate is not None:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        traceparent = carrier.get("traceparent")
        if traceparent is not None and _traceparent_problem(traceparent) is not None:
            traceparent = None
        tracestate = carrier.get("tracestate") if traceparent is not None else None
        if tracestate is not None and (not tracestate or len(tracestate) > MAX_TRACESTATE):
            tracestate = None
        # (a propagator for X-Ray, when configured, writes the current span's header)
        header = carrier.get("X-Amzn-Trace-Id") or os.environ.get("_X_AMZN_TRACE_ID") or None
    else:
        header = os.environ.get("_X_AMZN_TRACE_ID") or None
    if header is not None and (len(header) > MAX_AWS_TRACE_HEADER or not header.isascii()):
        header = None
    if traceparent is None and header is None:
        return None
    return TraceContext.model_construct(traceparent=traceparent, tracestate=tracestate,
                                        aws_trace_header=header)


def trace_headers(trace: TraceContext | Mapping[str, Any] | None) -> dict[str, str]:
    """The request headers that carry ``trace`` (none for None)."""
    if trace is None:
        return {}
    if not isinstance(trace, TraceContext):
        trace = TraceContext.model_validate(trace)
    headers: dict[str, str] = {}
    if trace.traceparent is not None:
        headers["traceparent"] = trace.traceparent
        if trace.tracestate is not None:
            headers["tracestate"] = trace.tracestate
    if trace.aws_trace_header is not None:
        headers["X-Amzn-Trace-Id"] = trace.aws_trace_header
    return headers


class TaskTracer(Protocol):
    """What a worker starts each handler's span with (its ``tracer`` option)."""

    def span(self, task: ClaimedTask, name: str) -> AbstractContextManager[Any]:
        """A context manager around one run of the handler for ``task``."""
        ...


class OpenTelemetryTracer:
    """Each handler's span (kind CONSUMER, named ``<queue> process``) as a child of the
    task's ``traceparent`` (a root span when it has none), with the messaging attributes of
    OpenTelemetry's conventions. ``tracer``: an OpenTelemetry tracer (default: the global
    provider's ``tierq.client.worker``)."""

    def __init__(self, tracer: Any = None) -> None:
        from opentelemetry import propagate, trace

        self._propagate = propagate
        self._kind = trace.SpanKind.CONSUMER
        self.tracer = tracer if tracer is not None else trace.get_tracer("tierq.client.worker")

    def span(self, task: ClaimedTask, name: str) -> AbstractContextManager[Any]:
        context = None
        trace = task.trace
        if trace is not None and trace.traceparent is not None:
            carrier = {"traceparent": trace.traceparent}
            if trace.tracestate is not None:
                carrier["tracestate"] = trace.tracestate
            context = self._propagate.extract(carrier)
        return self.tracer.start_as_current_span(
            name, context=context, kind=self._kind, attributes={
                "messaging.system": "tierq",
                "messaging.operation.type": "process",
                "messaging.destination.name": task.queue,
                "messaging.message.id": str(task.id),
                "tierq.tenant": task.tenant,
                "tierq.attempt": task.attempt,
            })


def _xray_parts(header: str) -> dict[str, str]:
    """The ``Root``, ``Parent`` and ``Sampled`` of an X-Ray trace header."""
    parts: dict[str, str] = {}
    for item in header.split(";"):
        name, _, value = item.strip().partition("=")
        parts[name] = value
    return parts


class XRayTracer:
    """Each handler's segment through the X-Ray SDK (what Powertools' Tracer uses; its
    ``xray_recorder`` by default). Outside Lambda the segment continues the task's
    ``aws_trace_header`` (its Root and Parent); in a Lambda function, whose segment Lambda
    owns, a subsegment carries the task's header as the annotation ``tierq_trace_root``.
    The Worker's threads each have their own X-Ray context; an AsyncWorker needs the
    recorder configured with ``AsyncContext``."""

    def __init__(self, recorder: Any = None) -> None:
        if recorder is None:
            core = _optional("aws_xray_sdk.core")
            if core is None:
                raise RuntimeError("XRayTracer needs aws-xray-sdk (Powertools' [tracer])")
            recorder = core.xray_recorder
        self.recorder = recorder

    @contextlib.contextmanager
    def span(self, task: ClaimedTask, name: str) -> Iterator[Any]:
        header = task.trace.aws_trace_header if task.trace is not None else None
        parts = _xray_parts(header) if header is not None else {}
        if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
            with self.recorder.in_subsegment(name) as subsegment:
                if subsegment is not None and parts.get("Root"):
                    subsegment.put_annotation("tierq_trace_root", parts["Root"])
                yield subsegment
            return
        sampled = parts.get("Sampled")
        segment = self.recorder.begin_segment(
            name, traceid=parts.get("Root") or None, parent_id=parts.get("Parent") or None,
            sampling=None if sampled not in ("0", "1") else int(sampled))
        try:
            if segment is not None:
                segment.put_annotation("tierq_queue", task.queue)
            yield segment
        finally:
            self.recorder.end_segment()


def default_tracer() -> TaskTracer | None:
    """OpenTelemetry when ``opentelemetry-api`` is installed; else X-Ray when an X-Ray
    daemon is configured (``AWS_XRAY_DAEMON_ADDRESS``) or in a Lambda function; else None."""
    if _optional("opentelemetry.trace") is not None \
            and _optional("opentelemetry.propagate") is not None:
        return OpenTelemetryTracer()
    if (os.environ.get("AWS_XRAY_DAEMON_ADDRESS") or os.environ.get("AWS_LAMBDA_FUNCTION_NAME")) \
            and _optional("aws_xray_sdk.core") is not None:
        return XRayTracer()
    return None


def resolve(tracer: TaskTracer | str | None) -> TaskTracer | None:
    """A worker's ``tracer`` option as the tracer it uses (``"auto"``: :func:`default_tracer`)."""
    if tracer == "auto":
        return default_tracer()
    if isinstance(tracer, str):
        raise ValueError(f'tracer must be "auto", None or a TaskTracer, not {tracer!r}')
    return tracer


def handler_span_name(task: ClaimedTask) -> str:
    """The name of a handler's span: ``<queue> process`` (OpenTelemetry's messaging rule)."""
    return f"{task.queue} process"
