"""End-to-end fixtures: ``tierq dev --no-services`` running as a subprocess over this test
session's PostgreSQL and Valkey, spoken to over real HTTP.

* ``base_url``: the local stack's URL (started once per package, stopped after its tests:
  its scheduled maintenance touches every queue and must not run under other tests).
* ``http``: an ``httpx.Client`` on that URL.
* ``queue``: a queue name no other test uses. The stack's engine keeps per-process caches
  of known (queue, tenant) pairs, so tests that empty the stores between them
  (``clean_stores``) must not reuse queue names — take this fixture.
* ``dev_log``: the stack's output so far (for messages when a test fails).

The stack itself (``start_dev_server``, ``DevServer``) is tests/support/dev_server.py.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.support.dev_server import DevServer, start_dev_server


@pytest.fixture(scope="package")
def dev_server(database_url: str, valkey_url: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = start_dev_server(database_url, valkey_url,
                              tmp_path_factory.mktemp("tierq-dev") / "tierq-dev.log")
    yield server
    code = server.stop()
    if code != 0:
        print(f"tierq dev exited with {code}:\n{server.log()[-5000:]}", file=sys.stderr)


@pytest.fixture(scope="package")
def base_url(dev_server: DevServer) -> str:
    return dev_server.url


@pytest.fixture
def dev_log(dev_server: DevServer) -> str:
    return dev_server.log()


@pytest.fixture
def http(base_url: str, clean_stores: None) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        yield client


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"
