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
idempotency keys, authentication and errors: both walk the steps of
:mod:`tierq.client.core`. SigV4 signing reads refreshable AWS credentials synchronously, as
botocore does, which may block the event loop for the moment a refresh takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from tierq.client.core import Awaiting, Emit, Operations, R, Send, Sleep, Steps, Stream, T, Walk


class AsyncClient(Operations, Awaiting):
    """An asyncio client for one tierq API; its methods are those of
    :class:`~tierq.client.core.Operations`, each a coroutine. One client serves one event
    loop (the loop its first request runs on), any number of tasks at once."""

    _http: httpx.AsyncClient

    def _open(self, options: dict[str, Any]) -> None:
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self._http = httpx.AsyncClient(**options)

    async def close(self) -> None:
        await self._http.aclose()

    aclose = close

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _perform(self, step: Send | Sleep) -> httpx.Response | None:
        if isinstance(step, Sleep):
            await self._sleep(step.seconds)
            return None
        return await self._http.request(**step.options())

    async def _run(self, steps: Steps[R]) -> R:
        walk = Walk(steps)
        for step in walk:
            assert not isinstance(step, Emit)  # a stream's steps go to _stream
            with walk.answering():
                walk.answer = await self._perform(step)
        return walk.result

    async def _stream(self, steps: Stream[T]) -> AsyncIterator[T]:
        walk = Walk(steps)
        for step in walk:
            if isinstance(step, Emit):
                yield step.item
            else:
                with walk.answering():
                    walk.answer = await self._perform(step)


__all__ = ["AsyncClient"]
