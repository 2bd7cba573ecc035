from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.client.scripted_server import ScriptedServer, serve
from tests.support.local_api import api, api_url, names

__all__ = ["api", "api_url", "names", "scripted"]


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    yield from serve()
