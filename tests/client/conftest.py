from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.client.scripted_server import ScriptedServer, serve


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    yield from serve()
