"""``Client``: a typed, synchronous HTTP client for every route of the tierq API.

    from tierq.client import Client

    with Client("http://127.0.0.1:3000") as api:
        api.enqueue("emails", [{"payload": {"to": "a@example.com"}, "key": "welcome-42"}])
        for task in api.claim("emails", max=10, wait_seconds=5):
            ...
            api.ack("emails", [{"id": task.id, "lease_token": task.lease_token}])

Requests are retried with exponential backoff and jitter on 429, 5xx and connection errors,
honouring ``Retry-After`` (:class:`~tierq.client.retry.RetryPolicy`). Each enqueue,
dead-letter replay, claim, ack, nack, release and heartbeat request carries a fresh
``Idempotency-Key`` that its retries reuse: a retry never creates a second task, nor leases
more tasks for a claim whose answer was lost. Enqueues
are split into requests of at most 500 tasks that each fit Lambda's request limit.
Authentication: a bearer token (``token=``) for a JWT-authorised API, or AWS SigV4
(``sigv4=True``, with ``aws_region=`` or the region in an ``execute-api`` URL) for an
IAM-authorised one.
Input is validated with the API's own models before sending, so bad input raises
:class:`~tierq.client.errors.InvalidInputError` naming the field and sends nothing.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote
from uuid import UUID

import httpx
import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from tierq import __version__
from tierq.client.auth import BearerAuth, SigV4Auth, region_from_url
from tierq.client.errors import (
    ConnectionFailed,
    InvalidInputError,
    error_from_response,
    invalid_input,
)
from tierq.client.retry import RetryPolicy
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
from tierq.models.queues import AnyQueueView
from tierq.models.schedules import ScheduleIn, ScheduleList, ScheduleRemoved, ScheduleView
from tierq.models.throughput import QueueThroughput

DEFAULT_URL = "http://127.0.0.1:3000"  # `tierq dev`
MAX_BATCH = 500  # tasks per enqueue request, acks/nacks/heartbeats per request
MAX_IDS = 1000  # dead-letter ids per replay or purge request (the API's limit)
IDEMPOTENCY_HEADER = "Idempotency-Key"
# The JSON around an enqueue batch's tasks: {"tasks":[ ... ]}
_BATCH_ENVELOPE = body_cost(b'{"tasks":[]}')
Model = TypeVar("Model", bound=BaseModel)
ResultT = TypeVar("ResultT", AckResult, NackResult, ReleaseResult, HeartbeatResult)
PageT = TypeVar("PageT", QueueList, DetailedMetrics, RunningMetrics, ScheduleList)
# a queue's view: an admin's, or a pinned caller's (told apart by its "view")
_QUEUE_VIEW: TypeAdapter[QueueView | TenantQueueView] = TypeAdapter(AnyQueueView,
                                                                     config=DEFERRED)


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


class Client:
    """A client for one tierq API (``base_url`` like ``http://127.0.0.1:3000`` or
    ``https://<id>.execute-api.<region>.amazonaws.com``). Thread-safe: one client can be
    shared by a worker's threads."""

    def __init__(self, base_url: str | None = None, *, token: str | None = None,
                 sigv4: bool = False, aws_region: str | None = None,
                 aws_credentials: Any = None, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, headers: Mapping[str, str] | None = None,
                 transport: httpx.BaseTransport | None = None,
                 max_connections: int = 20) -> None:
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
        self._sleep: Callable[[float], None] = time.sleep
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=self.base_url, auth=auth, timeout=timeout, transport=transport,
            headers={"User-Agent": f"tierq-client/{__version__}",
                     "Accept": "application/json", **dict(headers or {})},
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections),
        )

    @classmethod
    def from_env(cls, **overrides: Any) -> Client:
        """A client configured by ``TIERQ_URL``, ``TIERQ_TOKEN`` (bearer) or
        ``TIERQ_SIGV4=1`` (with ``AWS_REGION`` and the usual AWS credentials)."""
        options: dict[str, Any] = {
            "base_url": os.environ.get("TIERQ_URL"),
            "token": os.environ.get("TIERQ_TOKEN") or None,
            "sigv4": os.environ.get("TIERQ_SIGV4", "").lower() in ("1", "true", "yes"),
        }
        options.update(overrides)
        return cls(**options)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"

    # -- transport ---------------------------------------------------------------------

    def request(self, method: str, path: str, *, body: Any = None,
                params: Mapping[str, Any] | None = None,
                timeout: float | None = None, idempotency_key: str | None = None,
                content: bytes | None = None) -> Any:
        """Send one request (retrying as the policy says) and return its decoded JSON body
        (None when empty). ``content``: the body already serialised (instead of ``body``).
        ``idempotency_key`` is sent as the ``Idempotency-Key`` header, the same on every
        retry. Raises an :class:`ApiError` subclass for error responses and
        :class:`ConnectionFailed` when the API cannot be reached."""
        if content is None and body is not None:
            content = orjson.dumps(body)
        headers = {"Content-Type": "application/json"} if content is not None else {}
        if idempotency_key is not None:
            headers[IDEMPOTENCY_HEADER] = idempotency_key
        query = {k: v for k, v in (params or {}).items() if v is not None}
        retry = 0
        while True:
            try:
                response = self._http.request(
                    method, path, content=content, headers=headers or None,
                    params=query or None,
                    timeout=timeout if timeout is not None else self.timeout)
            except httpx.TransportError as exc:
                if retry >= self.retry.max_retries:
                    raise ConnectionFailed(
                        f"cannot reach the tierq API at {self.base_url}: "
                        f"{type(exc).__name__}: {str(exc) or 'no answer'}",
                        method=method, url=f"{self.base_url}{path}") from exc
                self._sleep(self.retry.delay(retry))
                retry += 1
                continue
            if response.is_error:
                error = error_from_response(response)
                if (retry < self.retry.max_retries
                        and self.retry.retries(response.status_code, error.code)):
                    self._sleep(self.retry.delay(retry, error.retry_after))
                    retry += 1
                    continue
                raise error
            if not response.content:
                return None
            return response.json()

    # -- producers ---------------------------------------------------------------------

    def enqueue(self, queue: str, tasks: Iterable[TaskIn | Mapping[str, Any]], *,
                tenant: str | None = None) -> list[EnqueueOutcome]:
        """Enqueue tasks (any number: sent in requests of at most 500 tasks that each fit
        Lambda's request limit, each one transaction with its own idempotency key).
        ``tenant`` applies to tasks that name none. Returns one outcome per task, in order."""
        items = _items(TaskIn, tasks, "tasks")
        bodies: list[bytes] = []
        for task in items:
            body = _dump(task)
            if tenant is not None and task.tenant is None:
                body["tenant"] = tenant
            bodies.append(orjson.dumps(body))
        outcomes: list[EnqueueOutcome] = []
        for start, stop in enqueue_batches(bodies):
            content = b'{"tasks":[' + b",".join(bodies[start:stop]) + b"]}"
            data = self.request("POST", f"/v1/queues/{_segment(queue)}/tasks",
                                content=content, idempotency_key=new_idempotency_key())
            outcomes.extend(EnqueueResults.model_validate(data).tasks)
        return outcomes

    def enqueue_one(self, queue: str, payload: Any, **fields: Any) -> EnqueueOutcome:
        """Enqueue one task: ``enqueue_one("emails", {"to": …}, key="k", delay_seconds=5)``."""
        return self.enqueue(queue, [{"payload": payload, **fields}])[0]

    def flow(self, tasks: Iterable[FlowTaskIn | Mapping[str, Any]], *,
             tenant: str | None = None) -> FlowResult:
        """Create a flow in one request, all or nothing (``POST /v1/flows``, at most 500
        tasks, each with its ``queue``, a ``ref`` and ``after``: refs of this call or ids of
        existing tasks). Returns each ref's task id, queue and state."""
        items = _items(FlowTaskIn, tasks, "tasks")
        body: dict[str, Any] = {"tasks": [_dump(t) for t in items]}
        if tenant is not None:
            body["tenant"] = tenant
        data = self.request("POST", "/v1/flows", body=body,
                            idempotency_key=new_idempotency_key())
        return FlowResult.model_validate(data)

    # -- workers -----------------------------------------------------------------------

    def claim(self, queue: str, *, max: int = 1, lease_seconds: int | None = None,
              tenant: str | None = None, worker: str | None = None,
              wait_seconds: float = 0) -> list[ClaimedTask]:
        """Claim up to ``max`` tasks, each with a lease; long-polls up to ``wait_seconds``
        (≤ 20) when none is ready. The call's retries reuse one ``Idempotency-Key``: a claim
        whose answer was lost is answered again with the same leases, not new ones."""
        request = _validated(ClaimRequest, {
            "max": max, "lease_seconds": lease_seconds, "tenant": tenant, "worker": worker,
            "wait_seconds": wait_seconds}, "")
        body = request.model_dump(mode="json", exclude_none=True)
        data = self.request("POST", f"/v1/queues/{_segment(queue)}/claims", body=body,
                            timeout=self.timeout + request.wait_seconds,
                            idempotency_key=new_idempotency_key())
        return ClaimResults.model_validate(data).tasks

    def ack(self, queue: str, acks: Iterable[AckItem | Mapping[str, Any]]) -> AckResult:
        """Finish tasks: ``[{"id", "lease_token", "result"?}]``. A task with a result is
        kept (state ``done``) until the queue's retention ends."""
        return self._settle(queue, "acks", _items(AckItem, acks, "acks"), AckResult())

    def nack(self, queue: str, nacks: Iterable[NackItem | Mapping[str, Any]]) -> NackResult:
        """Fail tasks: ``[{"id", "lease_token", "error", "retry_in_seconds"?, "dead"?}]``.
        Retried with the queue's backoff (or after ``retry_in_seconds``), or dead-lettered
        at ``max_attempts`` or when ``dead`` is true."""
        return self._settle(queue, "nacks", _items(NackItem, nacks, "nacks"), NackResult())

    def release(self, queue: str, leases: Iterable[ReleaseItem | ClaimedTask | Mapping[str, Any]]
                ) -> ReleaseResult:
        """Give leased tasks back unfinished: ``[{"id", "lease_token"}]`` or the claimed
        tasks. Each returns to its old place in line, ready at once, without counting an
        attempt (a task that failed is nacked instead)."""
        items = [ReleaseItem(id=i.id, lease_token=i.lease_token)
                 if isinstance(i, ClaimedTask) else i for i in leases]
        return self._settle(queue, "releases", _items(ReleaseItem, items, "releases"),
                            ReleaseResult())

    def heartbeat(self, queue: str,
                  leases: Iterable[HeartbeatItem | Mapping[str, Any]]) -> HeartbeatResult:
        """Extend leases: ``[{"id", "lease_token", "extend_seconds"?}]`` (default: the
        queue's lease_seconds from now)."""
        return self._settle(queue, "heartbeats", _items(HeartbeatItem, leases, "leases"),
                            HeartbeatResult())

    def _settle(self, queue: str, route: str, items: list[Any], out: ResultT) -> ResultT:
        """POST lease outcomes in batches of the API's limit; the results' lists are merged
        into ``out``. The body key is ``leases`` for heartbeats, else the route's name."""
        key = "leases" if route == "heartbeats" else route
        for batch in _chunks(items):
            data = self.request("POST", f"/v1/queues/{_segment(queue)}/{route}",
                                body={key: [_dump(i) for i in batch]},
                                idempotency_key=new_idempotency_key())
            part = type(out).model_validate(data)
            for name in type(out).model_fields:
                getattr(out, name).extend(getattr(part, name))
        return out

    # -- tasks -------------------------------------------------------------------------

    def get_task(self, queue: str, task_id: UUID | str) -> TaskView:
        data = self.request("GET", f"/v1/queues/{_segment(queue)}/tasks/{_segment(task_id)}")
        return TaskView.model_validate(data)

    def cancel_task(self, queue: str, task_id: UUID | str) -> TaskView:
        """Withdraw a task that has not finished; returns it as it was."""
        data = self.request("DELETE",
                            f"/v1/queues/{_segment(queue)}/tasks/{_segment(task_id)}")
        return TaskView.model_validate(data)

    # -- queues ------------------------------------------------------------------------

    def list_queues(self, *,
                    page_size: int | None = None) -> list[QueueView | TenantQueueView]:
        """Every queue, page by page: admin views for an admin; for a caller pinned to a
        tenant, tenant views of the queues its tenant has had tasks in."""
        return [view for page in self._pages(self.list_queues_page, limit=page_size)
                for view in page.queues]

    def list_queues_page(self, *, after: str | None = None,
                         limit: int | None = None) -> QueueList:
        """One page of queues in name order; pass ``page.next`` as ``after``."""
        return QueueList.model_validate(self.request(
            "GET", "/v1/queues", params={"after": after, "limit": limit}))

    @staticmethod
    def _pages(fetch: Callable[..., PageT], **kwargs: Any) -> Iterator[PageT]:
        """Every page of a list route, following its ``next`` cursor. A page may be short
        (it ends before it would overrun a Lambda response), even empty, while more follow."""
        after: str | None = None
        while True:
            page = fetch(after=after, **kwargs)
            yield page
            after = page.next
            if not after:
                return

    def get_queue(self, queue: str) -> QueueView | TenantQueueView:
        """A queue's settings and counts: the admin view (:class:`QueueView`) for an admin;
        for a caller pinned to a tenant, its tenant view (:class:`TenantQueueView`: the
        settings workers read, its own counts), for any queue name. Both have
        ``settings.lease_seconds``, ``counts`` and ``mode``."""
        data = self.request("GET", f"/v1/queues/{_segment(queue)}")
        view: QueueView | TenantQueueView = _QUEUE_VIEW.validate_python(data)
        return view

    def put_queue(self, queue: str,
                  settings: QueueSettingsUpdate | Mapping[str, Any]) -> QueueView:
        """Create a queue or change its settings (only the fields given); returns the queue
        with its effective settings and counts."""
        update = _validated(QueueSettingsUpdate, settings, "")
        data = self.request("PUT", f"/v1/queues/{_segment(queue)}", body=_dump(update))
        return QueueView.model_validate(data)

    # -- dead letters ------------------------------------------------------------------

    def dlq_list(self, queue: str, *, tenant: str | None = None, limit: int = 100,
                 after: str | None = None) -> DeadLetterPage:
        """One page of dead letters, most recently dead first; pass ``page.next`` as
        ``after``. A page holds at most ``limit``, fewer when more would not fit a Lambda
        response."""
        data = self.request("GET", f"/v1/queues/{_segment(queue)}/dlq",
                            params={"tenant": tenant, "limit": limit, "after": after})
        return DeadLetterPage.model_validate(data)

    def dlq_iter(self, queue: str, *, tenant: str | None = None,
                 page_size: int = 100) -> Iterator[TaskView]:
        """Every dead letter of a queue, page by page."""
        after: str | None = None
        while True:
            page = self.dlq_list(queue, tenant=tenant, limit=page_size, after=after)
            yield from page.tasks
            after = page.next or page.next_cursor
            if not after:
                return

    @staticmethod
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

    def dlq_replay(self, queue: str, ids: Sequence[UUID | str] | None = None, *,
                   all: bool = False) -> ReplayResult:
        """Make dead letters ready again (attempts reset, at the back of their line). Ids
        are sent 1000 per request, each request with its own idempotency key (reused on its
        retries); with ``all=True`` the API replays a bounded slice per request: this
        repeats the request until none is left. Returns every id replayed or skipped."""
        total = ReplayResult(replayed=[], skipped=[])
        for part in self.dlq_replay_slices(queue, ids, all=all):
            total.replayed.extend(part.replayed)
            total.skipped.extend(part.skipped)
        return total

    def dlq_replay_slices(self, queue: str, ids: Sequence[UUID | str] | None = None, *,
                          all: bool = False) -> Iterator[ReplayResult]:
        """The answer of each replay request, as it comes (see :meth:`dlq_replay`)."""
        for body in self._selections(ids, all):
            while True:
                data = self.request("POST", f"/v1/queues/{_segment(queue)}/dlq/replay",
                                    body=body, idempotency_key=new_idempotency_key())
                part = ReplayResult.model_validate(data)
                yield part
                if not part.more:
                    break

    def dlq_purge(self, queue: str, ids: Sequence[UUID | str] | None = None, *,
                  all: bool = False) -> PurgeResult:
        """Delete dead letters for good. Ids are sent 1000 per request (a purge repeated
        deletes nothing more, so it needs no idempotency key); with ``all=True`` the API
        purges a bounded slice per request: this repeats the request until none is left."""
        total = PurgeResult(purged=[])
        for part in self.dlq_purge_slices(queue, ids, all=all):
            total.purged.extend(part.purged)
        return total

    def dlq_purge_slices(self, queue: str, ids: Sequence[UUID | str] | None = None, *,
                         all: bool = False) -> Iterator[PurgeResult]:
        """The answer of each purge request, as it comes (see :meth:`dlq_purge`)."""
        for body in self._selections(ids, all):
            while True:
                data = self.request("POST", f"/v1/queues/{_segment(queue)}/dlq/purge",
                                    body=body)
                part = PurgeResult.model_validate(data)
                yield part
                if not part.more:
                    break

    # -- metrics -----------------------------------------------------------------------

    def metrics_detailed(self, queue: str | None = None, *,
                         page_size: int | None = None) -> list[TenantCounts]:
        """Per (queue, tenant): warm, cold, delayed, leased, dead and the oldest ready; every
        page."""
        return [row for page in self._pages(self.metrics_detailed_page, queue=queue,
                                            limit=page_size)
                for row in page.queues]

    def metrics_detailed_page(self, *, after: str | None = None, queue: str | None = None,
                              limit: int | None = None) -> DetailedMetrics:
        """One page of counts in (queue, tenant) order; pass ``page.next`` as ``after``."""
        return DetailedMetrics.model_validate(self.request(
            "GET", "/v1/metrics/queues/detailed",
            params={"queue": queue, "after": after, "limit": limit}))

    def running(self, queue: str | None = None, *,
                page_size: int | None = None) -> list[RunningLease]:
        """Current leases (of every queue, or of one), oldest first; every page."""
        leases = [lease for page in self._pages(self.running_page, queue=queue,
                                                limit=page_size)
                  for lease in page.running]
        leases.sort(key=lambda lease: lease.started_at)
        return leases

    def running_page(self, *, after: str | None = None, queue: str | None = None,
                     limit: int | None = None) -> RunningMetrics:
        """One page of current leases, by (queue, tenant) and oldest first within each."""
        return RunningMetrics.model_validate(self.request(
            "GET", "/v1/metrics/queues/running",
            params={"queue": queue, "after": after, "limit": limit}))

    def throughput(self, queue: str, *, tenant: str | None = None) -> QueueThroughput:
        """Tasks enqueued and acked per second over the last 15 minutes (900 values, oldest
        first): of ``tenant``, or of every tenant of the queue summed (a caller pinned to a
        tenant gets its own; naming another is ``ForbiddenError``)."""
        return QueueThroughput.model_validate(self.request(
            "GET", f"/v1/queues/{_segment(queue)}/throughput", params={"tenant": tenant}))

    # -- schedules ---------------------------------------------------------------------

    def put_schedule(self, name: str, schedule: ScheduleIn | Mapping[str, Any]) -> ScheduleView:
        """Create or replace a schedule (``cron``, ``every_seconds`` or ``daily``)."""
        model = _validated(ScheduleIn, schedule, "")
        data = self.request("PUT", f"/v1/schedules/{_segment(name)}", body=_dump(model))
        return ScheduleView.model_validate(data)

    # Schedule names are scoped per tenant: ``tenant`` says whose (a pinned caller's own by
    # default, else '_'); a pinned caller may only name its own.

    def get_schedule(self, name: str, *, tenant: str | None = None) -> ScheduleView:
        return ScheduleView.model_validate(self.request(
            "GET", f"/v1/schedules/{_segment(name)}", params={"tenant": tenant}))

    def list_schedules(self, *, tenant: str | None = None,
                       page_size: int | None = None) -> list[ScheduleView]:
        """Every schedule (only the caller's tenant's when it is pinned), page by page."""
        return [view for page in self._pages(self.list_schedules_page, tenant=tenant,
                                             limit=page_size)
                for view in page.schedules]

    def list_schedules_page(self, *, after: str | None = None, tenant: str | None = None,
                            limit: int | None = None) -> ScheduleList:
        """One page of schedules in (tenant, name) order; pass ``page.next`` as ``after``."""
        return ScheduleList.model_validate(self.request(
            "GET", "/v1/schedules", params={"tenant": tenant, "after": after, "limit": limit}))

    def delete_schedule(self, name: str, *, tenant: str | None = None) -> ScheduleRemoved:
        data = self.request("DELETE", f"/v1/schedules/{_segment(name)}",
                            params={"tenant": tenant})
        return ScheduleRemoved.model_validate(data)

    # -- service -----------------------------------------------------------------------

    def openapi(self) -> dict[str, Any]:
        """The API's OpenAPI document."""
        data = self.request("GET", "/v1/openapi.json")
        return data if isinstance(data, dict) else {}
