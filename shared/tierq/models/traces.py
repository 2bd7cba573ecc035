"""A task's trace context: the producer's W3C ``traceparent`` and ``tracestate`` and its
X-Ray trace header, kept with the task so that a worker's span continues the producer's
trace (docs/architecture.md, traces through the queue).

Stored as compact JSON text with the names of :class:`TraceContext` (the column
``tierq_tasks.trace`` and the warm blob's ``"tr"``), written once at enqueue and copied
verbatim after: a claim answers it as it was given."""


import re

import orjson
from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.config import JsonDict

from tierq.errors import InvalidInput
from tierq.models.base import Model
from tierq.models.strict import RequestModel

# version 00 only (the one the W3C recommendation defines): trace id, parent id, flags
TRACEPARENT_PATTERN = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
_TRACEPARENT = re.compile(TRACEPARENT_PATTERN)
# what the pattern cannot say (JSON Schema has no lookahead): neither id all zeros
TRACEPARENT_SCHEMA: JsonDict = {"pattern": TRACEPARENT_PATTERN, "not": {"anyOf": [
    {"pattern": "^00-0{32}-"}, {"pattern": "^00-[0-9a-f]{32}-0{16}-"}]}}
ZERO_TRACE_ID = "0" * 32
ZERO_PARENT_ID = "0" * 16
# W3C asks propagators to pass on at least 512 characters of tracestate; tierq keeps that
MAX_TRACESTATE = 512
# printable ASCII without NUL or line breaks (a header's value)
HEADER_TEXT_PATTERN = r"^[\x20-\x7e]*$"
_HEADER_TEXT = re.compile(HEADER_TEXT_PATTERN)
# X-Ray's header is about 100 characters (Root, Parent, Sampled, Lineage)
MAX_AWS_TRACE_HEADER = 256


def traceparent_problem(value: str) -> str | None:
    """Why ``value`` is no W3C traceparent tierq keeps, or None when it is one."""
    if not _TRACEPARENT.match(value):
        return ("must be 00-<32 lowercase hex>-<16 lowercase hex>-<2 lowercase hex> "
                "(a W3C traceparent of version 00)")
    if value[3:35] == ZERO_TRACE_ID:
        return "its trace id must not be all zeros"
    if value[36:52] == ZERO_PARENT_ID:
        return "its parent id must not be all zeros"
    return None


def _check_traceparent(value: str | None) -> str | None:
    if value is not None:
        problem = traceparent_problem(value)
        if problem is not None:
            raise ValueError(problem)
    return value


class TraceContext(RequestModel):
    """A task's trace context (each part optional; a ``tracestate`` without a
    ``traceparent`` is dropped, as W3C asks of a tracestate whose traceparent is missing)."""

    model_config = ConfigDict(extra="forbid")

    traceparent: str | None = Field(
        default=None, json_schema_extra=TRACEPARENT_SCHEMA,
        description="W3C traceparent: 00-<trace id: 32 hex>-<parent span id: 16 hex>-"
                    "<flags: 2 hex>, lowercase, ids not all zeros.")
    tracestate: str | None = Field(
        default=None, max_length=MAX_TRACESTATE, pattern=HEADER_TEXT_PATTERN,
        description="W3C tracestate that goes with the traceparent (printable ASCII); "
                    "dropped without one.")
    aws_trace_header: str | None = Field(
        default=None, min_length=1, max_length=MAX_AWS_TRACE_HEADER,
        pattern=HEADER_TEXT_PATTERN,
        description="An X-Ray trace header (Root=1-…;Parent=…;Sampled=…), handed to "
                    "consumer functions as their records' AWSTraceHeader.")

    @field_validator("traceparent")
    @classmethod
    def _traceparent(cls, value: str | None) -> str | None:
        return _check_traceparent(value)

    @model_validator(mode="after")
    def _state_with_parent(self) -> "TraceContext":
        if self.tracestate is not None and self.traceparent is None:
            self.tracestate = None
        return self

    def stored(self) -> bytes | None:
        """The compact JSON text kept with the task, or None when nothing was given."""
        fields = {name: value for name, value in (
            ("traceparent", self.traceparent), ("tracestate", self.tracestate),
            ("aws_trace_header", self.aws_trace_header)) if value is not None}
        return orjson.dumps(fields) if fields else None


def absent(value: object) -> bool:
    """Whether a field is left out of an answer: it holds None."""
    return value is None


class TraceView(Model):
    """A task's trace context as claims and the task view hand it back: the parts given, as
    stored (a part not given is left out, so a claim answers the blob's text as it is)."""

    traceparent: str | None = Field(default=None, exclude_if=absent)
    tracestate: str | None = Field(default=None, exclude_if=absent)
    aws_trace_header: str | None = Field(default=None, exclude_if=absent)


def _names_parent(header: str) -> bool:
    """Whether an X-Ray trace header names a ``Parent`` (a span to continue)."""
    return any(part.strip().startswith("Parent=") and len(part.strip()) > len("Parent=")
               for part in header.split(";"))


def from_headers(traceparent: str | None, tracestate: str | None,
                 aws_trace_header: str | None) -> TraceContext | None:
    """The trace context of an HTTP request's headers (``traceparent``, ``tracestate``,
    ``X-Amzn-Trace-Id``), or None when it sends none; raises InvalidInput naming the header
    that is wrong (nothing is written).

    API Gateway adds ``X-Amzn-Trace-Id: Root=…`` to every request that comes without one
    (the time it arrived, no span): an X-Ray header is kept only when it names a ``Parent``,
    the caller's span, so that a request without a trace stores none."""
    if traceparent is None and tracestate is None and aws_trace_header is None:
        return None
    if traceparent is not None:
        traceparent = traceparent.strip()
        problem = traceparent_problem(traceparent)
        if problem is not None:
            raise InvalidInput.field("traceparent", f"header {problem}")
    if tracestate is not None:
        tracestate = tracestate.strip()
        if traceparent is None:
            tracestate = None  # (W3C: a tracestate without a traceparent is ignored)
        elif len(tracestate) > MAX_TRACESTATE or not _HEADER_TEXT.match(tracestate):
            raise InvalidInput.field(
                "tracestate", f"header must be at most {MAX_TRACESTATE} printable ASCII "
                              "characters")
        elif not tracestate:
            tracestate = None
    if aws_trace_header is not None:
        aws_trace_header = aws_trace_header.strip()
        if len(aws_trace_header) > MAX_AWS_TRACE_HEADER \
                or not _HEADER_TEXT.match(aws_trace_header):
            raise InvalidInput.field(
                "X-Amzn-Trace-Id", f"header must be at most {MAX_AWS_TRACE_HEADER} printable "
                                   "ASCII characters")
        if not _names_parent(aws_trace_header):
            aws_trace_header = None
    if traceparent is None and aws_trace_header is None:
        return None
    return TraceContext.model_construct(traceparent=traceparent, tracestate=tracestate,
                                        aws_trace_header=aws_trace_header)
