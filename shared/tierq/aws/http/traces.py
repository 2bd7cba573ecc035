"""The trace headers an enqueue keeps (``traceparent``, ``tracestate``, ``X-Amzn-Trace-Id``):
the producer's trace context, stored with each task of the request that gives none of its
own (``trace``), so that the worker's span continues the producer's trace. HTTP APIs do no
X-Ray tracing of their own: an ``X-Amzn-Trace-Id`` is the caller's, passed on as sent."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Protocol

from aws_lambda_powertools.event_handler.openapi.params import Header

from tierq.models.traces import (
    HEADER_TEXT_PATTERN,
    MAX_AWS_TRACE_HEADER,
    MAX_TRACESTATE,
    TRACEPARENT_PATTERN,
    TRACEPARENT_SCHEMA,
    TraceContext,
    from_headers,
)

TraceparentHeader = Annotated[
    str | None,
    Header(alias="traceparent", pattern=TRACEPARENT_PATTERN,
           json_schema_extra={"not": TRACEPARENT_SCHEMA["not"]},
           description="W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not "
                       "all zeros) kept with each task that gives no trace of its own; "
                       "anything else is 422, nothing written.")]
TracestateHeader = Annotated[
    str | None,
    Header(alias="tracestate", max_length=MAX_TRACESTATE, pattern=HEADER_TEXT_PATTERN,
           description=f"W3C tracestate kept with the traceparent (at most {MAX_TRACESTATE} "
                       "printable ASCII characters).")]
AmznTraceIdHeader = Annotated[
    str | None,
    Header(alias="X-Amzn-Trace-Id", max_length=MAX_AWS_TRACE_HEADER,
           pattern=HEADER_TEXT_PATTERN,
           description="An X-Ray trace header kept with each task that gives no trace of its "
                       "own when it names a Parent (API Gateway adds a Root-only one to "
                       "requests without), handed to consumer functions as AWSTraceHeader "
                       f"(at most {MAX_AWS_TRACE_HEADER} printable ASCII characters).")]


class Traced(Protocol):
    trace: TraceContext | None


def apply(tasks: Iterable[Traced], traceparent: str | None, tracestate: str | None,
          aws_trace_header: str | None) -> None:
    """Give the request's trace context (its headers, checked: InvalidInput naming the
    header) to each task without a ``trace`` of its own; a task's own wins whole."""
    trace = from_headers(traceparent, tracestate, aws_trace_header)
    if trace is None:
        return
    for task in tasks:
        if task.trace is None:
            task.trace = trace
