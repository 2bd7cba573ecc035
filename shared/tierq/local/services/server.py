"""What every server of the local stack is: :class:`Service` (external or private), and the
state directory private servers live in, with the lock that serialises their starts and stops.

Layout of the state directory (default ``<repo root>/.local/services``, git-ignored)::

    .lock, users.lock       serialise starts/stops; count live users (flock)
    postgres/data/          PGDATA (our settings live in data/tierq.conf, rewritten per start)
    postgres/run/           unix socket directory
    postgres/server.log     server log (pg_ctl -l)
    postgres/port           last port used (re-used when still free)
    valkey/server.pid, valkey/server.log, valkey/port
    valkey-cluster/node-<i>/  one directory per node of a private cluster
    <service>/keep          present when ``python -m tierq.local.services up`` owns the server
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

from tierq.local.services.process import (
    RESERVED_PORTS,
    START_TIMEOUT,
    STOP_TIMEOUT,
    Kind,
    LocalServicesError,
    free_port,
    log_tail,
    make_dirs,
    port_is_free,
    probe,
    read_int_line,
    redact,
    say,
    wait_pid_gone,
)


def repo_root(start: Path | None = None) -> Path:
    """Nearest directory at or above ``start`` (default: cwd) holding a pyproject.toml."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "pyproject.toml").is_file():
            return candidate
    return here


def default_state_dir() -> Path:
    return repo_root() / ".local" / "services"


@contextlib.contextmanager
def state_lock(state_dir: Path) -> Iterator[None]:
    """Exclusive lock serialising starts and stops on one state directory."""
    make_dirs(state_dir)
    fd = os.open(state_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another process working on {state_dir}...")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class Service(ABC):
    """A PostgreSQL or Valkey/Redis server: external (from the environment) or private."""

    kind: Kind
    private: bool
    cluster: bool = False  # a Valkey/Redis Cluster (clients need VALKEY_CLUSTER=true)

    @property
    @abstractmethod
    def url(self) -> str:
        """Connection URL (postgresql://… or redis://…)."""

    def is_up(self) -> bool:
        """Whether the server answers right now (a query / a PING)."""
        return probe(self.kind, self.url, timeout=2.0) is None

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def restart(self) -> None: ...

    @abstractmethod
    def kill(self) -> None: ...

    def __repr__(self) -> str:
        scope = "private" if self.private else "external"
        return f"<{type(self).__name__} {self.kind} {scope} {redact(self.url)}>"


class ExternalService(Service):
    """A server named by DATABASE_URL / VALKEY_URL: used as is, never started or stopped."""

    private = False

    def __init__(self, kind: Kind, url: str, *, cluster: bool = False) -> None:
        self.kind = kind
        self._url = url
        self.cluster = cluster

    @property
    def url(self) -> str:
        return self._url

    def start(self) -> None:
        reason = probe(self.kind, self.url)
        if reason is not None:
            raise LocalServicesError(
                f"{self.kind} at {redact(self.url)} does not answer ({reason}); "
                "it is not a private server, so it cannot be started here"
            )

    def stop(self) -> None:
        """Nothing to do: not ours."""

    def restart(self) -> None:
        raise LocalServicesError(f"cannot restart {redact(self.url)}: not a private server")

    def kill(self) -> None:
        raise LocalServicesError(f"cannot kill {redact(self.url)}: not a private server")


class PrivateService(Service):
    private = True
    root: Path
    port: int | None

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.start_timeout = START_TIMEOUT

    @property
    def keep_marker(self) -> Path:
        return self.root / "keep"

    @property
    def port_file(self) -> Path:
        return self.root / "port"

    def _saved_port(self) -> int | None:
        return read_int_line(self.port_file)

    def _choose_port(self) -> int:
        """Keep the port this object used (restarts); else last run's, if free; else new."""
        if self.port is not None:
            return self.port
        saved = self._saved_port()
        if saved is not None and saved not in RESERVED_PORTS and port_is_free(saved):
            return saved
        return free_port()

    @property
    @abstractmethod
    def pid(self) -> int | None:
        """Pid of our running server, or None."""

    @abstractmethod
    def _start(self) -> None: ...

    @abstractmethod
    def _stop(self) -> None: ...

    def start(self) -> None:
        """Start (or adopt) the server and wait until it answers. No-op when it is up."""
        with state_lock(self.state_dir):
            self._start()

    def stop(self) -> None:
        """Shut the server down (fast) and wait until its process is gone."""
        with state_lock(self.state_dir):
            self._stop()

    def restart(self) -> None:
        """Stop, then start on the same port; returns once the server answers again."""
        with state_lock(self.state_dir):
            self._stop()
            self._start()

    def kill(self) -> None:
        """SIGKILL the server (a crash, for reliability tests). `start()` brings it back."""
        with state_lock(self.state_dir):
            pid = self.pid
            if pid is None:
                return
            say(f"killing private {self.kind} (pid {pid}) with SIGKILL")
            self._sigkill(pid)
            if not wait_pid_gone(pid, STOP_TIMEOUT):
                raise LocalServicesError(f"{self.kind} pid {pid} survived SIGKILL")

    def _sigkill(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def _terminate(self, pid: int, sig: signal.Signals, timeout: float) -> None:
        """Send `sig`, wait; escalate to SIGKILL when it does not go away."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if wait_pid_gone(pid, timeout):
            return
        say(f"{self.kind} pid {pid} ignored {sig.name} for {timeout:.0f}s; sending SIGKILL")
        self._sigkill(pid)
        if not wait_pid_gone(pid, 10):
            raise LocalServicesError(f"{self.kind} pid {pid} did not exit")

    def _wait_until_up(self, log: Path, what: str, url: str | None = None) -> None:
        url = url or self.url
        deadline = time.monotonic() + self.start_timeout
        reason: str | None = "not tried"
        while time.monotonic() < deadline:
            reason = probe(self.kind, url, timeout=2.0)
            if reason is None:
                return
            time.sleep(0.1)
        raise LocalServicesError(
            f"{what} did not answer at {self.url} within {self.start_timeout:.0f}s "
            f"(last error: {reason})\n--- tail of {log} ---\n{log_tail(log)}"
        )
