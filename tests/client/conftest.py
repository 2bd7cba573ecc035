from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.client.local_api import shared_local_api
from tests.client.scripted_server import ScriptedServer, serve
from tierq.client import Client


class QueueNames(dict[str, str]):
    """``names["emails"]`` -> ``emails-1f3a9c``: queue names no earlier test used, so the
    local API's in-process caches (known (queue, tenant) pairs, tier modes) never carry
    over from another test after the stores were emptied."""

    def __init__(self) -> None:
        super().__init__()
        self.suffix = uuid.uuid4().hex[:6]

    def __missing__(self, base: str) -> str:
        self[base] = f"{base}-{self.suffix}"
        return self[base]


@pytest.fixture
def names() -> QueueNames:
    return QueueNames()


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    yield from serve()


@pytest.fixture(scope="package")
def api_url(database_url: str, valkey_url: str) -> Iterator[str]:
    """URL of a running local API (`tierq dev --no-services`) over this session's stores.
    Package-scoped: the server (and its scheduled maintenance, which touches every queue)
    stops when the package's tests are done, so it never runs under other packages' tests."""
    yield from shared_local_api(database_url, valkey_url)


@pytest.fixture
def api(api_url: str, clean_stores: None) -> Iterator[Client]:
    """A client of the local API; the stores are empty at the start of each test."""
    with Client(api_url) as client:
        yield client
