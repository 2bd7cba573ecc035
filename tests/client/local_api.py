"""The local API for the client, worker, CLI and dashboard tests: ``tierq dev --no-services``
in a child process over the test session's private PostgreSQL and Redis, on a free port,
with short maintenance ticks. One process serves every test directory that asks for it
(started on first use, stopped when the last user lets go)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 90.0
# Maintenance every fraction of a second, settings never cached: tests see effects at once.
TEST_TICKS = {
    "TIERQ_COLD_TO_WARM_EVERY": "0.2",
    "TIERQ_DELAYED_EVERY": "0.2",
    "TIERQ_REAPER_EVERY": "0.3",
    "TIERQ_CRON_EVERY": "0.5",
    "TIERQ_SETTINGS_CACHE_SECONDS": "0",
    "TIERQ_RECONCILE_GRACE_SECONDS": "5",
}


class LocalApi:
    def __init__(self, database_url: str, valkey_url: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkstemp(prefix="tierq-test-api-", suffix=".log")[1])
        env = {**os.environ, "DATABASE_URL": database_url, "VALKEY_URL": valkey_url,
               **TEST_TICKS}
        env.pop("DB_SECRET_ARN", None)
        command = [sys.executable, "-c", "from tierq.cli import app; app()", "dev",
                   "--no-services", "--port", str(self.port), "--quiet",
                   "--schedule-period", "1", "--template", str(REPO / "template.yaml")]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_until_up()

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tierq dev exited ({self.process.returncode}):\n"
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            try:
                if httpx.get(f"{self.url}/v1/queues", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"tierq dev did not answer within {START_TIMEOUT:g}s:\n"
                           f"{self.log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.unlink(missing_ok=True)


_lock = threading.Lock()
_api: LocalApi | None = None
_users = 0


def shared_local_api(database_url: str, valkey_url: str) -> Iterator[str]:
    """Yield the URL of the shared local API (for a session-scoped fixture)."""
    global _api, _users
    with _lock:
        if _api is None:
            _api = LocalApi(database_url, valkey_url)
        _users += 1
        url = _api.url
    try:
        yield url
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _api is not None:
                _api.stop()
                _api = None
