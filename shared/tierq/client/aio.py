"""``AsyncClient``: the client of :mod:`tierq.client.http` for asyncio, over
``httpx.AsyncClient``.

    from tierq.client import AsyncClient

    async with AsyncClient("http://127.0.0.1:3000") as api:
        await api.enqueue("emails", [{"payload": {"to": "a@example.com"}}])
        for task in await api.claim("emails", max=10, wait_seconds=5):
            ...
        async for dead in api.dlq_iter("emails"):
            ...

Every method of :class:`~tierq.client.Client` is here, a coroutine (the iterators are async
iterators), with the same routes, models, retries (``asyncio.sleep`` between attempts),
idempotency keys, authentication and errors: both perform the steps of
:mod:`tierq.client.core`. SigV4 signing reads refreshable AWS credentials synchronously, as
botocore does, which may block the event loop for the moment a refresh takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from tierq.client.core import Awaiting, Operations, Send, Sleep


class AsyncClient(Operations, Awaiting):
    """An asyncio client for one tierq API; its methods are those of
    :class:`~tierq.client.core.Operations`, each a coroutine. One client serves one event
    loop (the loop its first request runs on), any number of tasks at once."""

    _http: httpx.AsyncClient

    def _open(self, options: dict[str, Any]) -> None:
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self._http = httpx.AsyncClient(**options)

    async def _perform(self, step: Send | Sleep) -> httpx.Response | None:
        if isinstance(step, Sleep):
            await self._sleep(step.seconds)
            return None
        return await self._http.request(**step.options())

    async def close(self) -> None:
        await self._http.aclose()

    aclose = close

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["AsyncClient"]
