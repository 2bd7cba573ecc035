"""What :class:`~tierq.client.Client` and :class:`~tierq.client.AsyncClient` share, written
once and without I/O: every route's request and answer, the retries, the idempotency keys and
the errors.

Each method of the API is a generator of *steps*: it yields :class:`Send` (one HTTP attempt)
or :class:`Sleep` (a pause before a retry) and is sent back what the step gave (an
``httpx.Response``, or the ``httpx.TransportError`` it raised); its return value is the
method's. A transport performs these steps with its own I/O (:meth:`Transport._perform`):
the blocking ``Client`` with ``httpx.Client`` and ``time.sleep``, the ``AsyncClient`` with
``httpx.AsyncClient`` and ``asyncio.sleep``; the walk through them is written once.
:func:`operation` binds each generator as a method of both, so a route, its validation and
its retry rules exist in one place. A method that yields results as they come (the dead
letters page by page) yields :class:`Emit` steps too (:func:`stream`).
"""

from __future__ import annotations

import functools
import os
import re
import time
import uuid
import warnings
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload
from urllib.parse import quote
from uuid import UUID

import httpx
import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from tierq import __version__
from tierq.client.auth import BearerAuth, SigV4Auth, region_from_url
from tierq.client.errors import (
    ApiError,
    ConnectionFailed,
    InvalidInputError,
    PayloadTransferError,
    error_from_response,
    invalid_input,
)
from tierq.client.retry import RetryPolicy
from tierq.core.pointers import INLINE_LIMIT, looks_like_pointer
from tierq.core.sizing import REQUEST_BODY_LIMIT, body_cost
from tierq.models import (
    AckItem,
    AckResult,
    ClaimedTask,
    ClaimRequest,
    EnqueueOutcome,
    HeartbeatItem,
    HeartbeatResult,
    NackItem,
    NackResult,
    QueueSettingsUpdate,
    QueueView,
    ReleaseItem,
    ReleaseResult,
    RunningLease,
    TaskIn,
    TaskView,
    TenantCounts,
    TenantQueueView,
)
from tierq.models.ack_claims import AckClaimResult
from tierq.models.base import DEFERRED
from tierq.models.envelopes import (
    ClaimResults,
    DeadLetterPage,
    DetailedMetrics,
    EnqueueResults,
    PurgeResult,
    QueueList,
    ReplayResult,
    RunningMetrics,
)
from tierq.models.flows import FlowResult, FlowTaskIn
from tierq.models.leases import ClaimOptions
from tierq.models.payloads import PayloadTransfer, PayloadUpload
from tierq.models.queues import AnyQueueView
from tierq.models.schedules import ScheduleIn, ScheduleList, ScheduleRemoved, ScheduleView
from tierq.models.throughput import QueueThroughput
from tierq.models.traces import TraceContext

DEFAULT_URL = "http://127.0.0.1:3000"  # `tierq dev`
MAX_BATCH = 500  # tasks per enqueue request, acks/nacks/heartbeats per request
MAX_IDS = 1000  # dead-letter ids per replay or purge request (the API's limit)
IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_WAIT_SECONDS = 20.0  # the longest one read of a task waits for its end (the API's)
WAIT_AT_LEAST = 0.05  # a wait left shorter than this is a read that does not wait
# The JSON around an enqueue batch's tasks: {"tasks":[ ... ]}
_BATCH_ENVELOPE = body_cost(b'{"tasks":[]}')
# a task's field in the client's own refusal of one no request can carry (enqueue_batches)
_TASK_FIELD = re.compile(r"tasks\[\d+\]")
Model = TypeVar("Model", bound=BaseModel)
ResultT = TypeVar("ResultT", AckResult, NackResult, ReleaseResult, HeartbeatResult)
PageT = TypeVar("PageT", QueueList, DetailedMetrics, RunningMetrics, ScheduleList)
SliceT = TypeVar("SliceT", ReplayResult, PurgeResult)
P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
G = TypeVar("G")
B = TypeVar("B")
A = TypeVar("A")
# a queue's view: an admin's, or a pinned caller's (told apart by its "view")
_QUEUE_VIEW: TypeAdapter[QueueView | TenantQueueView] = TypeAdapter(AnyQueueView,
                                                                     config=DEFERRED)


# -- steps ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Send:
    """One HTTP attempt: the transport sends it and hands back the response (or the
    ``httpx.TransportError`` it raised)."""

    method: str
    path: str
    content: bytes | None
    headers: dict[str, str] | None
    params: dict[str, Any] | None
    timeout: float

    # a presigned URL of the payload store (an absolute URL): sent without the client's
    # credentials, which the store would refuse beside the URL's own
    external: bool = False

    def options(self) -> dict[str, Any]:
        """The arguments of ``httpx.Client.request`` and ``httpx.AsyncClient.request``."""
        options = {"method": self.method, "url": self.path, "content": self.content,
                   "headers": self.headers, "params": self.params, "timeout": self.timeout}
        if self.external:
            options["auth"] = None
        return options


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` before the next attempt (the transport's sleep; answered None)."""

    seconds: float


@dataclass(frozen=True)
class Emit(Generic[T]):
    """One result of a :func:`stream`, handed to its caller as it comes."""

    item: T


Answer = httpx.Response | httpx.TransportError | None
Steps = Generator[Send | Sleep, Answer, R]
Stream = Generator[Send | Sleep | Emit[T], Answer, None]


class Walk(Generic[R]):
    """One method's steps as a transport walks them: iterating gives each step; the
    transport puts what it gave in :attr:`answer`; :attr:`result` holds the method's value
    at the end."""

    def __init__(self, steps: Generator[Any, Answer, R]) -> None:
        self._steps = steps
        self.answer: Answer = None
        self.result: R

    def __iter__(self) -> Iterator[Send | Sleep | Emit[Any]]:
        try:
            while True:
                answer, self.answer = self.answer, None
                yield self._steps.send(answer)
        except StopIteration as done:
            self.result = done.value


class Transport:
    """Walks steps with :meth:`_perform`, the transport's I/O. Written once, as a coroutine:
    a :class:`Blocking` transport's ``_perform`` blocks and never suspends, so its walk runs
    to its end without an event loop (:func:`_without_loop`)."""

    async def _perform(self, step: Send | Sleep) -> httpx.Response | None:
        raise NotImplementedError

    async def _walk(self, walk: Walk[Any]) -> AsyncIterator[Any]:
        """Perform each step, handing back what it gave; yield what the steps emit."""
        for step in walk:
            if isinstance(step, Emit):
                yield step.item
                continue
            try:
                walk.answer = await self._perform(step)
            except httpx.TransportError as exc:
                walk.answer = exc  # the method decides: retry, or raise ConnectionFailed


def _without_loop(items: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async iterator that never suspends (a :class:`Blocking` transport's walk),
    with no event loop: each ``__anext__`` runs to its end at its first ``send``."""
    while True:
        step: Any = items.__anext__()
        try:
            step.send(None)
        except StopIteration as done:
            yield done.value
            continue
        except StopAsyncIteration:
            return
        step.close()
        raise RuntimeError("a blocking transport's step awaited something")


_NO_EMITS = "a method's steps emit nothing (a stream's are walked by _stream)"


class Blocking(Transport):
    """A transport whose methods block (:class:`tierq.client.Client`)."""

    def _run(self, steps: Steps[R]) -> R:
        walk = Walk(steps)
        for _ in _without_loop(self._walk(walk)):
            raise AssertionError(_NO_EMITS)
        return walk.result

    def _stream(self, steps: Stream[T]) -> Iterator[T]:
        return _without_loop(self._walk(Walk(steps)))


class Awaiting(Transport):
    """A transport whose methods are coroutines (:class:`tierq.client.AsyncClient`)."""

    async def _run(self, steps: Steps[R]) -> R:
        walk = Walk(steps)
        async for _ in self._walk(walk):
            raise AssertionError(_NO_EMITS)
        return walk.result

    def _stream(self, steps: Stream[T]) -> AsyncIterator[T]:
        return self._walk(Walk(steps))


class Bound(Generic[P, G, B, A]):
    """A method written once as steps (``G``): bound to a :class:`Blocking` transport it
    returns ``B``, to an :class:`Awaiting` one ``A``, each through the transport's
    ``driver`` (``_run`` or ``_stream``). ``Class.method.steps`` is the generator itself, for
    a method made of others. Made by :func:`operation` and :func:`stream`."""

    def __init__(self, steps: Callable[Concatenate[Any, P], G], driver: str) -> None:
        self.steps = steps
        self.driver = driver
        self.__doc__ = steps.__doc__

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Bound[P, G, B, A]: ...

    @overload
    def __get__(self, obj: Blocking, owner: type | None = None) -> Callable[P, B]: ...

    @overload
    def __get__(self, obj: Awaiting, owner: type | None = None) -> Callable[P, A]: ...

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        steps, drive = self.steps, getattr(obj, self.driver)

        @functools.wraps(steps)
        def bound(*args: Any, **kwargs: Any) -> Any:
            return drive(steps(obj, *args, **kwargs))

        return bound


def operation(steps: Callable[Concatenate[Any, P], Steps[R]]
              ) -> Bound[P, Steps[R], R, Coroutine[Any, Any, R]]:
    """A method returning a value: on a :class:`Blocking` transport the value, on an
    :class:`Awaiting` one a coroutine of it."""
    return Bound(steps, "_run")


def stream(steps: Callable[Concatenate[Any, P], Stream[T]]
           ) -> Bound[P, Stream[T], Iterator[T], AsyncIterator[T]]:
    """A method whose steps emit results: an iterator of them on a :class:`Blocking`
    transport, an async iterator on an :class:`Awaiting` one."""
    return Bound(steps, "_stream")


def collect(steps: Stream[T]) -> Steps[list[T]]:
    """The steps of a stream, its results gathered into a list (for a method that answers
    them all at once)."""
    out: list[T] = []
    answer: Answer = None
    while True:
        try:
            step = steps.send(answer)
        except StopIteration:
            return out
        if isinstance(step, Emit):
            out.append(step.item)
            answer = None
        else:
            answer = yield step


# -- input ----------------------------------------------------------------------------------


def _segment(value: str | UUID) -> str:
    return quote(str(value), safe="")


def _validated(cls: type[Model], item: Model | Mapping[str, Any], field: str) -> Model:
    if isinstance(item, cls):
        return item
    try:
        return cls.model_validate(item)
    except ValidationError as exc:
        raise invalid_input(exc, field) from None


def _dump(model: BaseModel) -> dict[str, Any]:
    """The JSON body of a model: the fields that were set, payloads as given."""
    return model.model_dump(mode="json", exclude_unset=True)


def _refused(field: str, message: str) -> InvalidInputError:
    """The 422 for an argument the client refuses before sending (nothing is sent)."""
    return InvalidInputError(f"{field}: {message}", status=422, code="invalid_input",
                             details=[{"field": field, "message": message}])


def _items(cls: type[Model], items: Iterable[Model | Mapping[str, Any]],
           field: str) -> list[Model]:
    out = [_validated(cls, item, f"{field}[{i}]") for i, item in enumerate(items)]
    if not out:
        raise InvalidInputError(f"{field}: give at least one item", status=422,
                                code="invalid_input",
                                details=[{"field": field, "message": "give at least one item"}])
    return out


def _chunks(items: Sequence[Model], size: int = MAX_BATCH) -> Iterator[Sequence[Model]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


def _trace_headers(trace: TraceContext | Mapping[str, Any] | None,
                   propagate: bool) -> dict[str, str]:
    """The trace headers of an enqueue: ``trace``'s, else the current context's when
    ``propagate`` (tierq.client.tracing)."""
    from tierq.client import tracing

    if trace is None and propagate:
        trace = tracing.current_trace()
    try:
        return tracing.trace_headers(trace)
    except ValidationError as exc:
        raise invalid_input(exc, "trace") from None


def enqueue_batches(bodies: Sequence[bytes], *, max_count: int = MAX_BATCH,
                    max_bytes: int = REQUEST_BODY_LIMIT) -> Iterator[tuple[int, int]]:
    """Split serialised tasks into request bodies ``{"tasks": [...]}`` of at most
    ``max_count`` tasks whose weight inside the Lambda event (each quote and backslash
    escaped once more) stays within ``max_bytes``: (start, stop) index ranges. A task too
    large for any request raises :class:`InvalidInputError` naming it."""
    start, weight = 0, _BATCH_ENVELOPE
    for i, body in enumerate(bodies):
        cost = body_cost(body) + 1  # and its comma
        if _BATCH_ENVELOPE + cost > max_bytes:
            message = (f"{cost} bytes once serialised and escaped, more than one request may "
                       f"carry ({max_bytes})")
            raise InvalidInputError(f"tasks[{i}]: {message}", status=413,
                                    code="payload_too_large",
                                    details=[{"field": f"tasks[{i}]", "message": message}])
        if i - start >= max_count or weight + cost > max_bytes:
            yield start, i
            start, weight = i, _BATCH_ENVELOPE
        weight += cost
    if start < len(bodies):
        yield start, len(bodies)


def _selections(ids: Sequence[UUID | str] | None, all: bool) -> list[dict[str, Any]]:
    """The bodies of the requests a selection takes: ``{"all": true}``, or the ids in
    slices of at most :data:`MAX_IDS` (the most one request may name)."""
    if all and ids:
        raise ValueError("give ids or all=True, not both")
    if all:
        return [{"all": True}]
    if not ids:
        raise ValueError("give ids (a non-empty list) or all=True")
    named = [str(i) for i in ids]
    return [{"ids": named[start:start + MAX_IDS]} for start in range(0, len(named), MAX_IDS)]


def _inline_too_large(exc: ApiError) -> bool:
    """Whether ``exc`` refuses a task's payload as too large inline: the API's 413 (or a
    422) naming ``….payload``, or the client's own 413 for a task no request can carry."""
    if exc.status not in (413, 422):
        return False
    for detail in exc.details:
        field, message = str(detail.get("field", "")), str(detail.get("message", ""))
        too_large = exc.code == "payload_too_large" or "too large" in message
        if too_large and (field.endswith(".payload") or _TASK_FIELD.fullmatch(field)):
            return True
    return False


def _offload_hint(exc: ApiError, offload_over: int | None) -> ApiError:
    """``exc``, its message followed by what ``offload_over`` does when it refuses a payload
    as too large inline (:func:`_inline_too_large`); any other error as it is."""
    if not _inline_too_large(exc):
        return exc
    if offload_over is None:
        hint = ("this client never uploads payloads (offload_over=None): give "
                "offload_over=<bytes> to upload those larger to the payload store")
    else:
        hint = (f"this client uploads to the payload store only payloads over "
                f"offload_over={offload_over} bytes, above this API's inline limit: give a "
                f"lower offload_over (at most the API's TIERQ_MAX_PAYLOAD_BYTES)")
    exc.message = f"{exc.message} ({hint})"
    exc.args = (exc.message,)
    return exc


# -- the API --------------------------------------------------------------------------------


class Operations:
    """Every route of one tierq API (``base_url`` like ``http://127.0.0.1:3000`` or
    ``https://<id>.execute-api.<region>.amazonaws.com``), as steps; a transport subclass
    opens the HTTP client (:meth:`_open`) and walks them.

    ``token``: a bearer token (JWT); ``sigv4=True``: AWS SigV4 signing (``aws_region``,
    ``aws_credentials``); ``retry``: when to try again (:class:`RetryPolicy`);
    ``transport``: an httpx transport of the transport's kind (tests, proxies);
    ``offload_over``: the payload size (its JSON, in bytes) above which :meth:`enqueue` and
    :meth:`flow` upload a payload to the deployment's payload store and enqueue a pointer to
    it; None: never. Its default, 256 KiB (:data:`~tierq.core.pointers.INLINE_LIMIT`), is the
    API's default inline limit: the client does not ask the server for its own
    (``TIERQ_MAX_PAYLOAD_BYTES``, which may be set lower, or higher up to 1 MiB), so give a
    deployment whose limit is lower that limit here. A payload the API refuses as too large
    inline raises an error whose message says that ``offload_over`` lowers the threshold."""

    def __init__(self, base_url: str | None = None, *, token: str | None = None,
                 sigv4: bool = False, aws_region: str | None = None,
                 aws_credentials: Any = None, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, headers: Mapping[str, str] | None = None,
                 transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
                 max_connections: int = 20,
                 offload_over: int | None = INLINE_LIMIT) -> None:
        self.base_url = (base_url or os.environ.get("TIERQ_URL") or DEFAULT_URL).rstrip("/")
        if token and sigv4:
            raise ValueError("give token= (JWT) or sigv4=True (IAM), not both")
        auth: httpx.Auth | None = None
        if token:
            auth = BearerAuth(token)
        elif sigv4:
            auth = SigV4Auth(aws_region or region_from_url(self.base_url),
                             credentials=aws_credentials)
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        # a payload whose JSON is longer goes to the payload store (None: never)
        self.offload_over = offload_over
        self._open({
            "base_url": self.base_url, "auth": auth, "timeout": timeout,
            "transport": transport,
            "headers": {"User-Agent": f"tierq-client/{__version__}",
                        "Accept": "application/json", **dict(headers or {})},
            "limits": httpx.Limits(max_connections=max_connections,
                                   max_keepalive_connections=max_connections),
        })

    def _open(self, options: dict[str, Any]) -> None:
        """Make the transport's HTTP client with these ``httpx`` options."""
        raise NotImplementedError

    @classmethod
    def from_env(cls, **overrides: Any) -> Self:
        """A client configured by ``TIERQ_URL``, ``TIERQ_TOKEN`` (bearer) or
        ``TIERQ_SIGV4=1`` (with ``AWS_REGION`` and the usual AWS credentials)."""
        options: dict[str, Any] = {
            "base_url": os.environ.get("TIERQ_URL"),
            "token": os.environ.get("TIERQ_TOKEN") or None,
            "sigv4": os.environ.get("TIERQ_SIGV4", "").lower() in ("1", "true", "yes"),
        }
        options.update(overrides)
        return cls(**options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    # -- requests ------------------------------------------------------------------------

    def _exchange(self, method: str, path: str, *, body: Any = None,
                  params: Mapping[str, Any] | None = None,
                  timeout: float | None = None, idempotency_key: str | None = None,
                  content: bytes | None = None,
                  extra_headers: Mapping[str, str] | None = None) -> Steps[Any]:
        """One request and its retries (see :meth:`request`)."""
        if content is None and body is not None:
            content = orjson.dumps(body)
        headers = {"Content-Type": "application/json"} if content is not None else {}
        if idempotency_key is not None:
            headers[IDEMPOTENCY_HEADER] = idempotency_key
        if extra_headers:
            headers.update(extra_headers)
        query = {k: v for k, v in (params or {}).items() if v is not None}
        send = Send(method, path, content, headers or None, query or None,
                    timeout if timeout is not None else self.timeout)
        retry = 0
        while True:
            answer = yield send
            if isinstance(answer, httpx.TransportError):
                if retry >= self.retry.max_retries:
                    raise ConnectionFailed(
                        f"cannot reach the tierq API at {self.base_url}: "
                        f"{type(answer).__name__}: {str(answer) or 'no answer'}",
                        method=method, url=f"{self.base_url}{path}") from answer
                yield Sleep(self.retry.delay(retry))
                retry += 1
                continue
            assert isinstance(answer, httpx.Response)
            if answer.is_error:
                error = error_from_response(answer)
                if (retry < self.retry.max_retries
                        and self.retry.retries(answer.status_code, error.code)):
                    yield Sleep(self.retry.delay(retry, error.retry_after))
                    retry += 1
                    continue
                raise error
            return answer.json() if answer.content else None

    @operation
    def request(self, method: str, path: str, *, body: Any = None,
                params: Mapping[str, Any] | None = None,
                timeout: float | None = None, idempotency_key: str | None = None,
                content: bytes | None = None) -> Steps[Any]:
        """Send one request (retrying as the policy says) and return its decoded JSON body
        (None when empty). ``content``: the body already serialised (instead of ``body``).
        ``idempotency_key`` is sent as the ``Idempotency-Key`` header, the same on every
        retry. Raises an :class:`ApiError` subclass for error responses and
        :class:`ConnectionFailed` when the API cannot be reached."""
        return (yield from self._exchange(method, path, body=body, params=params,
                                          timeout=timeout, idempotency_key=idempotency_key,
                                          content=content))

    # -- producers -----------------------------------------------------------------------

    @operation
    def enqueue(self, queue: str, tasks: Iterable[TaskIn | Mapping[str, Any]], *,
                tenant: str | None = None,
                trace: TraceContext | Mapping[str, Any] | None = None,
                propagate: bool = True) -> Steps[list[EnqueueOutcome]]:
        """Enqueue tasks (any number: sent in requests of at most 500 tasks that each fit
        Lambda's request limit, each one transaction with its own idempotency key).
        ``tenant`` applies to tasks that name none. ``trace`` (``traceparent``,
        ``tracestate``, ``aws_trace_header``) applies to tasks that give none; without it
        the current OpenTelemetry or Lambda trace context is sent unless ``propagate`` is
        false (tierq.client.tracing). Returns one outcome per task, in order."""
        items = _items(TaskIn, tasks, "tasks")
        headers = _trace_headers(trace, propagate)
        bodies: list[bytes] = []
        for task in items:
            body = _dump(task)
            if tenant is not None and task.tenant is None:
                body["tenant"] = tenant
            encoded = orjson.dumps(body)
            limit = self.offload_over
            if limit is not None and len(encoded) > limit:  # (the payload may be too)
                payload = orjson.dumps(body.get("payload"))
                if len(payload) > limit:
                    body["payload"] = yield from self._offload(queue, payload,
                                                               body.get("tenant"))
                    encoded = orjson.dumps(body)
            bodies.append(encoded)
        outcomes: list[EnqueueOutcome] = []
        try:
            for start, stop in enqueue_batches(bodies):
                content = b'{"tasks":[' + b",".join(bodies[start:stop]) + b"]}"
                data = yield from self._exchange(
                    "POST", f"/v1/queues/{_segment(queue)}/tasks", content=content,
                    idempotency_key=new_idempotency_key(), extra_headers=headers)
                outcomes.extend(EnqueueResults.model_validate(data).tasks)
        except ApiError as exc:
            raise _offload_hint(exc, self.offload_over) from None
        return outcomes

    @operation
    def enqueue_one(self, /, queue: str, payload: Any, **fields: Any) -> Steps[EnqueueOutcome]:
        """Enqueue one task: ``enqueue_one("emails", {"to": …}, key="k", delay_seconds=5)``."""
        outcomes = yield from Operations.enqueue.steps(self, queue,
                                                       [{"payload": payload, **fields}])
        return outcomes[0]

    # -- big payloads --------------------------------------------------------------------

    @operation
    def upload_payload(self, queue: str, payload: Any, *,
                       tenant: str | None = None) -> Steps[list[Any]]:
        """Upload ``payload`` (any JSON value) to the deployment's payload store under the
        tenant's prefix (``POST /v1/queues/{queue}/payloads``, then the presigned upload);
        returns the pointer to enqueue as a task's payload. :meth:`enqueue` does this by
        itself for a payload over ``offload_over``."""
        return (yield from self._offload(queue, orjson.dumps(payload), tenant))

    def _offload(self, queue: str, data: bytes, tenant: str | None) -> Steps[list[Any]]:
        body: dict[str, Any] = {"size": len(data)}
        if tenant is not None:
            body["tenant"] = tenant
        answer = yield from self._exchange("POST", f"/v1/queues/{_segment(queue)}/payloads",
                                           body=body)
        upload = PayloadUpload.model_validate(answer)
        yield from self._transfer(upload.upload, data)
        kind, fields = upload.pointer
        return [kind, fields.model_dump()]

    @operation
    def fetch_payload(self, queue: str, payload: Any) -> Steps[Any]:
        """The payload a task carries: for a pointer to a big payload, the object it names
        (``POST /v1/queues/{queue}/payloads/fetch``, then the presigned download, decoded
        from JSON); any other payload as it is."""
        if not looks_like_pointer(payload):
            return payload
        answer = yield from self._exchange(
            "POST", f"/v1/queues/{_segment(queue)}/payloads/fetch", body={"pointer": payload})
        data = yield from self._transfer(PayloadTransfer.model_validate(answer), None)
        return orjson.loads(data)

    @operation
    def with_payload(self, task: ClaimedTask) -> Steps[ClaimedTask]:
        """``task`` with its big payload fetched in place of its pointer (the Worker's step
        before a handler runs); the task itself when its payload is inline."""
        if not looks_like_pointer(task.payload):
            return task
        payload = yield from Operations.fetch_payload.steps(self, task.queue, task.payload)
        return task.model_copy(update={"payload": payload})

    def _transfer(self, transfer: PayloadTransfer, content: bytes | None) -> Steps[bytes]:
        """One presigned request to the payload store and its retries (connection errors and
        5xx); its body. Refused (4xx, or still failing): :class:`PayloadTransferError`."""
        send = Send(transfer.method, transfer.url, content, dict(transfer.headers) or None,
                    None, self.timeout, external=True)
        where = transfer.url.split("?", 1)[0]  # (the query holds the signature)
        retry = 0
        while True:
            answer = yield send
            if isinstance(answer, httpx.Response) and not answer.is_error:
                return answer.content
            retryable = not isinstance(answer, httpx.Response) or answer.status_code >= 500
            if retryable and retry < self.retry.max_retries:
                yield Sleep(self.retry.delay(retry))
                retry += 1
                continue
            if isinstance(answer, httpx.Response):
                status, text = answer.status_code, answer.text[:500]
            else:
                status, text = 0, f"{type(answer).__name__}: {answer}"
            raise PayloadTransferError(
                f"the payload store refused the {transfer.method}: {text}", status=status,
                code="payload_transfer_failed", method=transfer.method, url=where)

    @operation
    def flow(self, tasks: Iterable[FlowTaskIn | Mapping[str, Any]], *,
             tenant: str | None = None,
             trace: TraceContext | Mapping[str, Any] | None = None,
             propagate: bool = True) -> Steps[FlowResult]:
        """Create a flow in one request, all or nothing (``POST /v1/flows``, at most 500
        tasks, each with its ``queue``, a ``ref`` and ``after``: refs of this call or ids of
        existing tasks). A payload over ``offload_over`` is uploaded first, as by
        :meth:`enqueue`; ``trace`` and ``propagate`` as for :meth:`enqueue`. Returns each
        ref's task id, queue and state."""
        items = _items(FlowTaskIn, tasks, "tasks")
        body: dict[str, Any] = {"tasks": [_dump(t) for t in items]}
        if tenant is not None:
            body["tenant"] = tenant
        limit = self.offload_over
        for task in body["tasks"] if limit is not None else []:
            payload = orjson.dumps(task.get("payload"))
            if len(payload) > (limit or 0):  # a big payload: uploaded, a pointer in its place
                task["payload"] = yield from self._offload(task["queue"], payload, tenant)
        try:
            data = yield from self._exchange("POST", "/v1/flows", body=body,
                                             idempotency_key=new_idempotency_key(),
                                             extra_headers=_trace_headers(trace, propagate))
        except ApiError as exc:
            raise _offload_hint(exc, self.offload_over) from None
        return FlowResult.model_validate(data)

    # -- workers -------------------------------------------------------------------------

    @operation
    def claim(self, queue: str, *, max: int = 1, lease_seconds: int | None = None,
              tenant: str | None = None, worker: str | None = None,
              wait_seconds: float = 0) -> Steps[list[ClaimedTask]]:
        """Claim up to ``max`` tasks, each with a lease; long-polls up to ``wait_seconds``
        (≤ 20) when none is ready. The call's retries reuse one ``Idempotency-Key``: a claim
        whose answer was lost is answered again with the same leases, not new ones."""
        request = _validated(ClaimRequest, {
            "max": max, "lease_seconds": lease_seconds, "tenant": tenant, "worker": worker,
            "wait_seconds": wait_seconds}, "")
        body = request.model_dump(mode="json", exclude_none=True)
        data = yield from self._exchange("POST", f"/v1/queues/{_segment(queue)}/claims",
                                         body=body,
                                         timeout=self.timeout + request.wait_seconds,
                                         idempotency_key=new_idempotency_key())
        return ClaimResults.model_validate(data).tasks

    @operation
    def ack(self, queue: str, acks: Iterable[AckItem | Mapping[str, Any]]) -> Steps[AckResult]:
        """Finish tasks: ``[{"id", "lease_token", "result"?}]``. A task with a result is
        kept (state ``done``) until the queue's retention ends."""
        return (yield from self._settle(queue, "acks", _items(AckItem, acks, "acks"),
                                        AckResult()))

    @operation
    def ack_and_claim(self, queue: str,
                      acks: Iterable[AckItem | ClaimedTask | Mapping[str, Any]], *,
                      max: int = 1, lease_seconds: int | None = None,
                      tenant: str | None = None,
                      worker: str | None = None) -> Steps[AckClaimResult]:
        """Finish tasks and claim the next ones in one request, a worker's loop (``POST
        …/acks`` with ``claim``): the answer's ``tasks`` are claimed after the ack. A claim
        that fails after the ack leaves it done: no tasks, ``claim_error`` and
        ``retry_after_ms`` say why and when to claim again. The claim never long-polls
        (``claim`` does). The call's retries reuse one ``Idempotency-Key``: a repeat after
        a lost answer gets the first answer again, its tasks with the same leases. Past
        500 acks, the first go as plain acks and the last 500 with the claim."""
        options = _validated(ClaimOptions, {"max": max, "lease_seconds": lease_seconds,
                                            "tenant": tenant, "worker": worker}, "")
        items = _items(AckItem, [AckItem(id=i.id, lease_token=i.lease_token)
                                 if isinstance(i, ClaimedTask) else i for i in acks], "acks")
        out = AckClaimResult()
        head = len(items) - (len(items) - 1) % MAX_BATCH - 1  # (the last 500 at most: claim)
        if head:
            acked = yield from self._settle(queue, "acks", items[:head], AckResult())
            out.acked, out.rejected, out.cancelled = acked.acked, acked.rejected, acked.cancelled
        data = yield from self._exchange(
            "POST", f"/v1/queues/{_segment(queue)}/acks",
            body={"acks": [_dump(i) for i in items[head:]],
                  "claim": options.model_dump(mode="json", exclude_none=True)},
            idempotency_key=new_idempotency_key())
        last = AckClaimResult.model_validate(data)
        out.acked += last.acked
        out.rejected += last.rejected
        out.cancelled += last.cancelled
        out.tasks, out.retry_after_ms, out.claim_error = \
            last.tasks, last.retry_after_ms, last.claim_error
        return out

    @operation
    def nack(self, queue: str,
             nacks: Iterable[NackItem | Mapping[str, Any]]) -> Steps[NackResult]:
        """Fail tasks: ``[{"id", "lease_token", "error", "retry_in_seconds"?, "dead"?}]``.
        Retried with the queue's backoff (or after ``retry_in_seconds``), or dead-lettered
        at ``max_attempts`` or when ``dead`` is true."""
        return (yield from self._settle(queue, "nacks", _items(NackItem, nacks, "nacks"),
                                        NackResult()))

    @operation
    def release(self, queue: str,
                leases: Iterable[ReleaseItem | ClaimedTask | Mapping[str, Any]]
                ) -> Steps[ReleaseResult]:
        """Give leased tasks back unfinished: ``[{"id", "lease_token"}]`` or the claimed
        tasks. Each returns to its old place in line, ready at once, without counting an
        attempt (a task that failed is nacked instead)."""
        items = [ReleaseItem(id=i.id, lease_token=i.lease_token)
                 if isinstance(i, ClaimedTask) else i for i in leases]
        return (yield from self._settle(queue, "releases",
                                        _items(ReleaseItem, items, "releases"),
                                        ReleaseResult()))

    @operation
    def heartbeat(self, queue: str,
                  leases: Iterable[HeartbeatItem | Mapping[str, Any]]
                  ) -> Steps[HeartbeatResult]:
        """Extend leases: ``[{"id", "lease_token", "extend_seconds"?}]`` (default: the
        queue's lease_seconds from now)."""
        return (yield from self._settle(queue, "heartbeats",
                                        _items(HeartbeatItem, leases, "leases"),
                                        HeartbeatResult()))

    def _settle(self, queue: str, route: str, items: list[Any], out: ResultT) -> Steps[ResultT]:
        """POST lease outcomes in batches of the API's limit; the results' lists are merged
        into ``out``. The body key is ``leases`` for heartbeats, else the route's name."""
        key = "leases" if route == "heartbeats" else route
        for batch in _chunks(items):
            data = yield from self._exchange("POST", f"/v1/queues/{_segment(queue)}/{route}",
                                             body={key: [_dump(i) for i in batch]},
                                             idempotency_key=new_idempotency_key())
            part = type(out).model_validate(data)
            for name in type(out).model_fields:
                getattr(out, name).extend(getattr(part, name))
        return out

    # -- tasks ---------------------------------------------------------------------------

    @operation
    def get_task(self, queue: str, task_id: UUID | str, *,
                 wait_seconds: float | None = None) -> Steps[TaskView]:
        """The task; with ``wait_seconds`` (more than 0, at most 20), once it is done, dead
        or deleted (``NotFoundError``), or after that long as it stands."""
        if wait_seconds is not None and not 0 < wait_seconds <= MAX_WAIT_SECONDS:
            raise _refused("wait_seconds", f"must be more than 0 and at most "
                           f"{MAX_WAIT_SECONDS:g}, got {wait_seconds:g}")
        data = yield from self._exchange(
            "GET", f"/v1/queues/{_segment(queue)}/tasks/{_segment(task_id)}",
            params={"wait_seconds": wait_seconds},
            timeout=None if wait_seconds is None else self.timeout + wait_seconds)
        return TaskView.model_validate(data)

    @operation
    def wait(self, queue: str, task_id: UUID | str, *,
             timeout: float | None = None) -> Steps[TaskView]:
        """The task once it is done, dead or cancelled, or as it stands after ``timeout`` seconds
        (None: however long it takes): reads with ``wait_seconds`` (at most 20 each, woken
        by the task's end on the server), one after another. A task deleted meanwhile is
        ``NotFoundError``; the caller tells an answer after ``timeout`` by its state."""
        if timeout is not None and timeout < 0:
            raise _refused("timeout", f"must be 0 or more, got {timeout:g}")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = MAX_WAIT_SECONDS if deadline is None else deadline - time.monotonic()
            if left < WAIT_AT_LEAST:
                return (yield from Operations.get_task.steps(self, queue, task_id))
            task = yield from Operations.get_task.steps(
                self, queue, task_id, wait_seconds=min(MAX_WAIT_SECONDS, left))
            if task.state in ("done", "dead", "cancelled"):
                return task

    @operation
    def cancel(self, queue: str, task_id: UUID | str) -> Steps[TaskView]:
        """Cancel a task that has not finished, running or not: it is kept as
        ``cancelled`` until its queue's retention ends; a worker running it is told by its
        next heartbeat (``task.cancelled`` is set) and nothing is retried. Returns it
        cancelled (one cancelled already: as it is). A done or dead task is a
        ``ConflictError`` (409 ``task_finished``); another tenant's, ``NotFoundError``."""
        data = yield from self._exchange(
            "POST", f"/v1/queues/{_segment(queue)}/tasks/{_segment(task_id)}/cancel")
        return TaskView.model_validate(data)

    @operation
    def delete_task(self, queue: str, task_id: UUID | str) -> Steps[TaskView]:
        """Delete a task whatever its state (``DELETE …/tasks/{id}``): gone, a GET after it
        is 404; a worker running it is only refused its ack. Returns it as it was. To stop a
        task and keep it, :meth:`cancel`."""
        data = yield from self._exchange(
            "DELETE", f"/v1/queues/{_segment(queue)}/tasks/{_segment(task_id)}")
        return TaskView.model_validate(data)

    def _cancel_task(self, queue: str, task_id: UUID | str) -> Steps[TaskView]:
        """Deprecated: :meth:`delete_task` (this name deletes the task, while :meth:`cancel`
        cancels it and keeps it). Warns at the call (``DeprecationWarning``), then deletes."""
        # (not a generator: the warning points at the caller, for both clients alike)
        warnings.warn(f"{type(self).__name__}.cancel_task deletes the task: call delete_task "
                      f"(or cancel, which stops it and keeps it as cancelled)",
                      DeprecationWarning, stacklevel=3)
        return Operations.delete_task.steps(self, queue, task_id)

    cancel_task = operation(_cancel_task)

    # -- pages ---------------------------------------------------------------------------

    def _pages(self, fetch: Bound[..., Steps[PageT], Any, Any],
               **kwargs: Any) -> Stream[PageT]:
        """Every page of a list route, following its ``next`` cursor. A page may be short
        (it ends before it would overrun a Lambda response), even empty, while more follow."""
        after: str | None = None
        while True:
            page = yield from fetch.steps(self, after=after, **kwargs)
            yield Emit(page)
            after = page.next
            if not after:
                return

    def _page(self, model: type[PageT], path: str, **params: Any) -> Steps[PageT]:
        return model.model_validate((yield from self._exchange("GET", path, params=params)))

    # -- queues --------------------------------------------------------------------------

    @operation
    def list_queues(self, *, page_size: int | None = None
                    ) -> Steps[list[QueueView | TenantQueueView]]:
        """Every queue, page by page: admin views for an admin; for a caller pinned to a
        tenant, tenant views of the queues its tenant has had tasks in."""
        pages = yield from collect(self._pages(Operations.list_queues_page, limit=page_size))
        return [view for page in pages for view in page.queues]

    @operation
    def list_queues_page(self, *, after: str | None = None,
                         limit: int | None = None) -> Steps[QueueList]:
        """One page of queues in name order; pass ``page.next`` as ``after``."""
        return (yield from self._page(QueueList, "/v1/queues", after=after, limit=limit))

    @operation
    def get_queue(self, queue: str) -> Steps[QueueView | TenantQueueView]:
        """A queue's settings and counts: the admin view (:class:`QueueView`) for an admin;
        for a caller pinned to a tenant, its tenant view (:class:`TenantQueueView`: the
        settings workers read, its own counts), for any queue name. Both have
        ``settings.lease_seconds``, ``counts`` and ``mode``."""
        data = yield from self._exchange("GET", f"/v1/queues/{_segment(queue)}")
        view: QueueView | TenantQueueView = _QUEUE_VIEW.validate_python(data)
        return view

    @operation
    def put_queue(self, queue: str,
                  settings: QueueSettingsUpdate | Mapping[str, Any]) -> Steps[QueueView]:
        """Create a queue or change its settings (only the fields given); returns the queue
        with its effective settings and counts."""
        update = _validated(QueueSettingsUpdate, settings, "")
        data = yield from self._exchange("PUT", f"/v1/queues/{_segment(queue)}",
                                         body=_dump(update))
        return QueueView.model_validate(data)

    # -- dead letters --------------------------------------------------------------------

    @operation
    def dlq_list(self, queue: str, *, tenant: str | None = None, limit: int = 100,
                 after: str | None = None) -> Steps[DeadLetterPage]:
        """One page of dead letters, most recently dead first; pass ``page.next`` as
        ``after``. A page holds at most ``limit``, fewer when more would not fit a Lambda
        response."""
        data = yield from self._exchange("GET", f"/v1/queues/{_segment(queue)}/dlq",
                                         params={"tenant": tenant, "limit": limit,
                                                 "after": after})
        return DeadLetterPage.model_validate(data)

    @stream
    def dlq_iter(self, queue: str, *, tenant: str | None = None,
                 page_size: int = 100) -> Stream[TaskView]:
        """Every dead letter of a queue, page by page."""
        after: str | None = None
        while True:
            page = yield from Operations.dlq_list.steps(self, queue, tenant=tenant,
                                                        limit=page_size, after=after)
            for task in page.tasks:
                yield Emit(task)
            after = page.next or page.next_cursor
            if not after:
                return

    @operation
    def dlq_replay(self, queue: str, ids: Sequence[UUID | str] | None = None, *,
                   all: bool = False) -> Steps[ReplayResult]:
        """Make dead letters ready again (attempts reset, at the back of their line). Ids
        are sent 1000 per request, each request with its own idempotency key (reused on its
        retries); with ``all=True`` the API replays a bounded slice per request: this
        repeats the request until none is left. Returns every id replayed or skipped."""
        total = ReplayResult(replayed=[], skipped=[])
        for part in (yield from collect(self._slices(queue, "replay", ReplayResult, ids, all))):
            total.replayed.extend(part.replayed)
            total.skipped.extend(part.skipped)
        return total

    @stream
    def dlq_replay_slices(self, queue: str, ids: Sequence[UUID | str] | None = None, *,
                          all: bool = False) -> Stream[ReplayResult]:
        """The answer of each replay request, as it comes (see :meth:`dlq_replay`)."""
        yield from self._slices(queue, "replay", ReplayResult, ids, all)

    @operation
    def dlq_purge(self, queue: str, ids: Sequence[UUID | str] | None = None, *,
                  all: bool = False) -> Steps[PurgeResult]:
        """Delete dead letters for good. Ids are sent 1000 per request (a purge repeated
        deletes nothing more, so it needs no idempotency key); with ``all=True`` the API
        purges a bounded slice per request: this repeats the request until none is left."""
        total = PurgeResult(purged=[])
        for part in (yield from collect(self._slices(queue, "purge", PurgeResult, ids, all))):
            total.purged.extend(part.purged)
        return total

    @stream
    def dlq_purge_slices(self, queue: str, ids: Sequence[UUID | str] | None = None, *,
                         all: bool = False) -> Stream[PurgeResult]:
        """The answer of each purge request, as it comes (see :meth:`dlq_purge`)."""
        yield from self._slices(queue, "purge", PurgeResult, ids, all)

    def _slices(self, queue: str, action: str, model: type[SliceT],
                ids: Sequence[UUID | str] | None, all: bool) -> Stream[SliceT]:
        """Each request of a replay or purge, repeated while the API says ``more``. A replay
        request carries an idempotency key (a purge repeated deletes nothing more)."""
        for body in _selections(ids, all):
            while True:
                data = yield from self._exchange(
                    "POST", f"/v1/queues/{_segment(queue)}/dlq/{action}", body=body,
                    idempotency_key=new_idempotency_key() if action == "replay" else None)
                part = model.model_validate(data)
                yield Emit(part)
                if not part.more:
                    break

    # -- metrics -------------------------------------------------------------------------

    @operation
    def metrics_detailed(self, queue: str | None = None, *,
                         page_size: int | None = None) -> Steps[list[TenantCounts]]:
        """Per (queue, tenant): warm, cold, delayed, leased, dead and the oldest ready; every
        page."""
        pages = yield from collect(self._pages(Operations.metrics_detailed_page, queue=queue,
                                               limit=page_size))
        return [row for page in pages for row in page.queues]

    @operation
    def metrics_detailed_page(self, *, after: str | None = None, queue: str | None = None,
                              limit: int | None = None) -> Steps[DetailedMetrics]:
        """One page of counts in (queue, tenant) order; pass ``page.next`` as ``after``."""
        return (yield from self._page(DetailedMetrics, "/v1/metrics/queues/detailed",
                                      queue=queue, after=after, limit=limit))

    @operation
    def running(self, queue: str | None = None, *,
                page_size: int | None = None) -> Steps[list[RunningLease]]:
        """Current leases (of every queue, or of one), oldest first; every page."""
        pages = yield from collect(self._pages(Operations.running_page, queue=queue,
                                               limit=page_size))
        leases = [lease for page in pages for lease in page.running]
        leases.sort(key=lambda lease: lease.started_at)
        return leases

    @operation
    def running_page(self, *, after: str | None = None, queue: str | None = None,
                     limit: int | None = None) -> Steps[RunningMetrics]:
        """One page of current leases, by (queue, tenant) and oldest first within each."""
        return (yield from self._page(RunningMetrics, "/v1/metrics/queues/running",
                                      queue=queue, after=after, limit=limit))

    @operation
    def throughput(self, queue: str, *, tenant: str | None = None) -> Steps[QueueThroughput]:
        """Tasks enqueued and acked per second over the last 15 minutes (900 values, oldest
        first): of ``tenant``, or of every tenant of the queue summed (a caller pinned to a
        tenant gets its own; naming another is ``ForbiddenError``)."""
        return QueueThroughput.model_validate((yield from self._exchange(
            "GET", f"/v1/queues/{_segment(queue)}/throughput", params={"tenant": tenant})))

    # -- schedules -----------------------------------------------------------------------

    @operation
    def put_schedule(self, name: str,
                     schedule: ScheduleIn | Mapping[str, Any]) -> Steps[ScheduleView]:
        """Create or replace a schedule (``cron``, ``every_seconds`` or ``daily``)."""
        model = _validated(ScheduleIn, schedule, "")
        data = yield from self._exchange("PUT", f"/v1/schedules/{_segment(name)}",
                                         body=_dump(model))
        return ScheduleView.model_validate(data)

    # Schedule names are scoped per tenant: ``tenant`` says whose (a pinned caller's own by
    # default, else '_'); a pinned caller may only name its own.

    @operation
    def get_schedule(self, name: str, *, tenant: str | None = None) -> Steps[ScheduleView]:
        return ScheduleView.model_validate((yield from self._exchange(
            "GET", f"/v1/schedules/{_segment(name)}", params={"tenant": tenant})))

    @operation
    def list_schedules(self, *, tenant: str | None = None,
                       page_size: int | None = None) -> Steps[list[ScheduleView]]:
        """Every schedule (only the caller's tenant's when it is pinned), page by page."""
        pages = yield from collect(self._pages(Operations.list_schedules_page, tenant=tenant,
                                               limit=page_size))
        return [view for page in pages for view in page.schedules]

    @operation
    def list_schedules_page(self, *, after: str | None = None, tenant: str | None = None,
                            limit: int | None = None) -> Steps[ScheduleList]:
        """One page of schedules in (tenant, name) order; pass ``page.next`` as ``after``."""
        return (yield from self._page(ScheduleList, "/v1/schedules", tenant=tenant,
                                      after=after, limit=limit))

    @operation
    def delete_schedule(self, name: str, *,
                        tenant: str | None = None) -> Steps[ScheduleRemoved]:
        data = yield from self._exchange("DELETE", f"/v1/schedules/{_segment(name)}",
                                         params={"tenant": tenant})
        return ScheduleRemoved.model_validate(data)

    # -- service -------------------------------------------------------------------------

    @operation
    def openapi(self) -> Steps[dict[str, Any]]:
        """The API's OpenAPI document."""
        data = yield from self._exchange("GET", "/v1/openapi.json")
        return data if isinstance(data, dict) else {}
