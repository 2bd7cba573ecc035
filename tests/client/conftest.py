"""The client tests run against both clients: ``client_class`` is ``Client`` or a blocking
facade over ``AsyncClient`` (tests/client/blocking.py), and ``api`` is made with it. A module
about the Worker, which takes a blocking ``Client``, sets ``ONE_CLIENT`` (True, or the names
of its tests that run once) and its tests run once, with ``Client``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.client.blocking import CLIENTS
from tests.client.scripted_server import ScriptedServer, serve
from tests.support.local_api import api_url, names

__all__ = ["api", "api_url", "client_class", "names", "scripted"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    once = getattr(metafunc.module, "ONE_CLIENT", ())
    if once is True or metafunc.function.__name__ in once:
        return
    if "client_class" in metafunc.fixturenames:
        metafunc.parametrize("client_class", list(CLIENTS), indirect=True)


@pytest.fixture
def client_class(request: pytest.FixtureRequest) -> Callable[..., Any]:
    return CLIENTS[getattr(request, "param", "sync")]


@pytest.fixture
def api(api_url: str, clean_stores: None, client_class: Callable[..., Any]) -> Iterator[Any]:
    """A client of the local API (of ``client_class``); the stores are empty at the start of
    each test."""
    with client_class(api_url) as client:
        yield client


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    yield from serve()
