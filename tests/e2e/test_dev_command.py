"""``tierq dev`` as a user runs it: what it prints, that it stops cleanly on SIGTERM and
Ctrl-C, and that it refuses to start without its stores."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.support.dev_server import REPO, start_dev_server, tierq_command

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_starts_prints_its_urls_and_stops_cleanly(database_url: str, valkey_url: str,
                                                  tmp_path: Path,
                                                  stop_signal: signal.Signals) -> None:
    server = start_dev_server(database_url, valkey_url, tmp_path / "dev.log",
                              extra_env={"TIERQ_TICK_MAX_SECONDS": "55"})
    try:
        # the first request builds the engine in the server; a loaded machine takes seconds
        assert httpx.get(f"{server.url}/v1/queues", timeout=30).status_code == 200
        log = server.log()
        assert f"API        {server.url}" in log
        assert f"dashboard  {server.url}/dashboard" in log
        assert "schedule ReaperSchedule: reaper every 3s" in log
        time.sleep(0.5)  # the scheduled invocations are inside their 55 s tick loops now
        started = time.monotonic()
        server.process.send_signal(stop_signal)
        code = server.process.wait(20)
        assert code == 0, server.log()
        assert time.monotonic() - started < 10  # the tick loops saw their time run out
        assert "tierq dev: stopped" in server.log()
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{server.url}/v1/queues", timeout=2)
    finally:
        server.stop()


def test_no_services_without_urls_is_a_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "VALKEY_URL")}
    result = subprocess.run([*tierq_command(), "dev", "--no-services", "--port", "0"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "--no-services needs DATABASE_URL and VALKEY_URL set" in result.stdout + result.stderr
