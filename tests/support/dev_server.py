"""``tierq dev --no-services`` as a subprocess over a test session's PostgreSQL and Valkey
(the e2e fixtures, the client's local API and the tests that start their own stack).

The scheduled functions run with short intervals (the ``TIERQ_*_EVERY`` values in
``TICKS``), each invocation lasting about ``TICK_MAX_SECONDS``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from tierq.local.services.manager import free_port

REPO = Path(__file__).resolve().parents[2]
TICKS = {
    "TIERQ_COLD_TO_WARM_EVERY": "0.5",
    "TIERQ_DELAYED_EVERY": "0.2",
    "TIERQ_REAPER_EVERY": "0.5",
    "TIERQ_CRON_EVERY": "0.5",
}
TICK_MAX_SECONDS = "3"
SCHEDULE_PERIOD = "3"
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0


def tierq_command() -> list[str]:
    script = Path(sys.executable).with_name("tierq")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from tierq.cli import app; app()"]


@dataclass
class DevServer:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return int(self.process.returncode)


def start_dev_server(database_url: str, valkey_url: str, log_path: Path, *,
                     extra_env: Mapping[str, str] | None = None,
                     args: tuple[str, ...] = ()) -> DevServer:
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "VALKEY_URL": valkey_url,
           "TIERQ_TICK_MAX_SECONDS": TICK_MAX_SECONDS, **TICKS, **(extra_env or {})}
    env.pop("DB_SECRET_ARN", None)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*tierq_command(), "dev", "--no-services", "--port", str(port),
             "--schedule-period", SCHEDULE_PERIOD, *args],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    server = DevServer(process, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"tierq dev exited with {process.returncode}:\n{server.log()}")
        try:
            if httpx.get(f"{server.url}/v1/openapi.json", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"tierq dev did not answer within {START_TIMEOUT:.0f}s:\n{server.log()}")
