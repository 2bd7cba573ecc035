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

The routes, their retries and their errors are written once, without I/O, in
:mod:`tierq.client.core`; this module performs their steps with ``httpx.Client`` and
``time.sleep``
(:class:`~tierq.client.aio.AsyncClient` does with ``httpx.AsyncClient``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from tierq.client.core import (
    DEFAULT_URL,
    IDEMPOTENCY_HEADER,
    MAX_BATCH,
    MAX_IDS,
    Blocking,
    Operations,
    Send,
    Sleep,
    enqueue_batches,
    new_idempotency_key,
)


class Client(Operations, Blocking):
    """A client for one tierq API (``base_url`` like ``http://127.0.0.1:3000`` or
    ``https://<id>.execute-api.<region>.amazonaws.com``). Thread-safe: one client can be
    shared by a worker's threads. Its methods are those of
    :class:`~tierq.client.core.Operations`."""

    _http: httpx.Client

    def _open(self, options: dict[str, Any]) -> None:
        self._sleep: Callable[[float], None] = time.sleep
        self._http = httpx.Client(**options)

    async def _perform(self, step: Send | Sleep) -> httpx.Response | None:
        """Perform a step, blocking: it never suspends (:class:`Transport`)."""
        if isinstance(step, Sleep):
            self._sleep(step.seconds)
            return None
        return self._http.request(**step.options())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["DEFAULT_URL", "IDEMPOTENCY_HEADER", "MAX_BATCH", "MAX_IDS", "Client",
           "enqueue_batches", "new_idempotency_key"]
