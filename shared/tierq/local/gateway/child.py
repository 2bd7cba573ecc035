"""``tierq dev --no-services`` in a child process, over the PostgreSQL and Valkey its
environment names: what ``tierq demo`` and the tests that need a whole local API start.

A child process rather than a :class:`~tierq.local.gateway.stack.DevStack` in-process: the
API then serves requests on its own interpreter, as it does for a real client, instead of
sharing one GIL with the workers and monitors of the process that drives it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tierq.local.gateway.stack import GatewayStackError
from tierq.local.services.process import free_port, log_tail

START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
LOG_TAIL_LINES = 60


def tierq_command() -> list[str]:
    """The ``tierq`` script beside this interpreter, else the same entry point via ``-c``."""
    script = Path(sys.executable).with_name("tierq")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from tierq.cli import app; app()"]


@dataclass
class GatewayChild:
    """A running ``tierq dev`` child: its process, the API's URL and its log file."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_until_answering(self, timeout: float = START_TIMEOUT) -> None:
        """Return once the API serves its OpenAPI document; GatewayStackError with the
        log's tail when the child exits first or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise GatewayStackError(
                    f"tierq dev exited with status {self.process.returncode}; its log:\n"
                    f"{log_tail(self.log_path, LOG_TAIL_LINES)}")
            if self._answers():
                return
            time.sleep(0.2)
        raise GatewayStackError(f"tierq dev did not answer within {timeout:g}s; its log:\n"
                                f"{log_tail(self.log_path, LOG_TAIL_LINES)}")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/v1/openapi.json", timeout=2) as response:
                return int(response.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM (the stack stops cleanly), SIGKILL after ``timeout``; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return int(self.process.returncode)


def start_gateway_child(env: Mapping[str, str], log_path: Path, *, cwd: Path,
                        port: int | None = None, args: Sequence[str] = (),
                        timeout: float = START_TIMEOUT) -> GatewayChild:
    """Start ``tierq dev --no-services`` on 127.0.0.1:``port`` (default: a free one) with
    ``env`` (which names DATABASE_URL and VALKEY_URL) and wait until it answers.

    The child runs in a session of its own, so a Ctrl-C in the terminal reaches only the
    parent, which stops it with :meth:`GatewayChild.stop`."""
    port = port or free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*tierq_command(), "dev", "--no-services", "--port", str(port), *args],
            cwd=cwd, env=dict(env), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
    child = GatewayChild(process, f"http://127.0.0.1:{port}", log_path)
    try:
        child.wait_until_answering(timeout)
    except BaseException:
        child.stop()
        raise
    return child
