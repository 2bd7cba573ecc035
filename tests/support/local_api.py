"""The local API for the client, worker, CLI and dashboard tests: ``tierq dev --no-services``
over the test session's PostgreSQL and Redis (started by
:func:`tests.support.dev_server.start_dev_server`), shared by every test directory that asks
for it: started on first use, stopped when the last user lets go.

The fixtures ``names``, ``api_url`` and ``api`` are imported by the conftest.py of each
folder that uses them (not loaded suite-wide): ``api_url`` is package-scoped, so the server
stops once the tests of the package that asked for it are done."""

from __future__ import annotations

import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.dev_server import DevServer, start_dev_server
from tierq.client import Client

# Settings never cached, lost warm rows re-pushed soon: tests see effects at once. One
# process serves every function at once: a database pool to match (template.yaml sizes it
# for a Lambda environment, which serves one request at a time).
EXTRA_ENV = {"TIERQ_SETTINGS_CACHE_SECONDS": "0", "TIERQ_RECONCILE_GRACE_SECONDS": "5",
             "TIERQ_DB_POOL_MAX": "16"}

_lock = threading.Lock()
_server: DevServer | None = None
_users = 0


def shared_local_api(database_url: str, valkey_url: str) -> Iterator[str]:
    """Yield the URL of the shared local API (for a session-scoped fixture)."""
    global _server, _users
    with _lock:
        if _server is None:
            log = Path(tempfile.mkdtemp(prefix="tierq-test-api-")) / "tierq-dev.log"
            _server = start_dev_server(database_url, valkey_url, log, extra_env=EXTRA_ENV)
        _users += 1
        server = _server
    try:
        yield server.url
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                code = server.stop()
                if code != 0:
                    print(f"tierq dev exited with {code}:\n{server.log()[-5000:]}",
                          file=sys.stderr)
                _server = None


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
