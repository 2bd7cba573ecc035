"""The local API for the client, worker, CLI and dashboard tests: ``tierq dev --no-services``
over the test session's PostgreSQL and Redis (started by the e2e suite's
:func:`tests.e2e.conftest.start_dev_server`), shared by every test directory that asks for
it: started on first use, stopped when the last user lets go."""

from __future__ import annotations

import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.e2e.conftest import DevServer, start_dev_server

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
