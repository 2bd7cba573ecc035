"""``Blocking``: an :class:`~tierq.client.AsyncClient` behind the blocking surface of
:class:`~tierq.client.Client`, for the tests only, so that each client test runs against both
clients: every call is a coroutine run on the facade's own event loop (a thread of its own),
and an async iterator is read item by item."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from tierq.client import AsyncClient, Client


class Blocking:
    """``Blocking(url, **options)`` takes what ``Client`` and ``AsyncClient`` take. Setting
    ``_sleep`` (a test recording backoff) replaces the async client's sleep with a coroutine
    that calls it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="blocking-async-client")
        self._thread.start()
        self._inner = AsyncClient(*args, **kwargs)

    def _wait(self, awaitable: Any) -> Any:
        async def run() -> Any:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def _iterate(self, items: AsyncIterator[Any]) -> Iterator[Any]:
        while True:
            try:
                yield self._wait(items.__anext__())
            except StopAsyncIteration:
                return

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            out = attr(*args, **kwargs)
            if inspect.isawaitable(out):
                return self._wait(out)
            if isinstance(out, AsyncIterator):
                return self._iterate(out)
            return out

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        if name != "_sleep":
            object.__setattr__(self, name, value)
            return

        async def sleep(seconds: float) -> None:
            value(seconds)

        self._inner._sleep = sleep

    def close(self) -> None:
        self._wait(self._inner.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> Blocking:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


CLIENTS: dict[str, Callable[..., Any]] = {"sync": Client, "async": Blocking}
