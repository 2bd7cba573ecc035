"""A private valkey-server / redis-server in ``<state>/valkey``: no persistence, so every
start begins empty."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tierq.local.services.install import require_valkey_binary
from tierq.local.services.process import (
    STOP_TIMEOUT,
    Kind,
    LocalServicesError,
    log_tail,
    make_dirs,
    pid_alive,
    proc_cmdline,
    read_int_line,
    run,
    say,
)
from tierq.local.services.server import PrivateService


def server_pid(pid_file: Path, port: int | None) -> int | None:
    """The pid in ``pid_file`` when it is a live valkey-server / redis-server serving
    ``port`` (not a stale file whose number now belongs to another process)."""
    pid = read_int_line(pid_file)
    if pid is None or port is None or not pid_alive(pid):
        return None
    cmdline = proc_cmdline(pid)
    if cmdline is None:
        return pid if not Path("/proc/self").exists() else None
    ours = ("redis" in cmdline or "valkey" in cmdline) and f":{port}" in cmdline
    return pid if ours else None


class PrivateValkey(PrivateService):
    """A valkey-server / redis-server in ``<state>/valkey``: no persistence, starts empty."""

    kind: Kind = "valkey"

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir)
        self.root = state_dir / "valkey"
        self.pid_file = self.root / "server.pid"
        self.log_file = self.root / "server.log"
        self.port = self._saved_port() if self.pid is not None else None
        self.binary: Path | None = None

    @property
    def url(self) -> str:
        port = self.port if self.port is not None else self._saved_port()
        return f"redis://127.0.0.1:{port}/0"

    @property
    def pid(self) -> int | None:
        return server_pid(self.pid_file, self._saved_port())

    def _binary(self) -> Path:
        if self.binary is None:
            self.binary = require_valkey_binary()
        return self.binary

    def _start(self) -> None:
        if self.pid is not None:
            self.port = self._saved_port()
            if self.is_up():
                return
            self._wait_until_up(self.log_file, f"private {self.kind}")
            return
        binary = self._binary()
        make_dirs(self.root)
        self.pid_file.unlink(missing_ok=True)
        # No persistence, but never load a dump someone left here: restarts start empty.
        (self.root / "dump.rdb").unlink(missing_ok=True)
        port = self._choose_port()
        self.port = port
        self.port_file.write_text(f"{port}\n")
        say(f"starting {binary.name} on 127.0.0.1:{port}...")
        started = time.monotonic()
        code, out = run(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.root,
                "--daemonize",
                "yes",
                "--pidfile",
                self.pid_file,
                "--logfile",
                self.log_file,
            ],
            what=binary.name,
            check=False,
            cwd=self.root,
            timeout=self.start_timeout,
        )
        if code != 0:
            raise LocalServicesError(
                f"{binary.name} did not start (exit {code}) on port {port}:\n{out.strip()}\n"
                f"--- tail of {self.log_file} ---\n{log_tail(self.log_file)}"
            )
        self._wait_until_up(self.log_file, binary.name)
        say(f"{binary.name} up in {time.monotonic() - started:.1f}s at {self.url}")

    def _stop(self) -> None:
        pid = self.pid
        if pid is None:
            return
        say(f"stopping private {self.kind} (pid {pid})...")
        self._terminate(pid, signal.SIGTERM, STOP_TIMEOUT)  # no save points: nothing written
        self.pid_file.unlink(missing_ok=True)
