"""PostgreSQL and Valkey/Redis servers for scripts, tests and the local stack.

The rule, per service:

* ``DATABASE_URL`` (``VALKEY_URL``) is set and the server answers: use it, start nothing.
* Otherwise start a *private* server from local binaries under a state directory
  (default ``<repo root>/.local/services``, git-ignored, see :mod:`.server`), installing the
  Debian package when we are root on Debian and the binaries are missing.

Private servers listen on 127.0.0.1 only, on free ports, and survive the process that
started them until someone stops them, so a second caller (another script, the next test
run) re-uses them instead of starting new ones. PostgreSQL keeps its data directory across
runs (``initdb`` happens once); Redis runs without persistence and always starts empty.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from tierq.local.services.postgres import PrivatePostgres
from tierq.local.services.process import Kind, LocalServicesError, probe, redact, say
from tierq.local.services.server import (
    ExternalService,
    PrivateService,
    Service,
    default_state_dir,
    state_lock,
)
from tierq.local.services.valkey import PrivateValkey
from tierq.local.services.valkey_cluster import PrivateValkeyCluster, cluster_enabled


class LocalServices:
    """The PostgreSQL and Valkey/Redis a process uses. `stop()` (or leaving the `with`
    block) shuts down private servers, unless `python -m tierq.local.services up` owns them or
    another process still uses the same state directory."""

    def __init__(self, postgres: Service, valkey: Service, state_dir: Path) -> None:
        self.postgres = postgres
        self.valkey = valkey
        self.state_dir = state_dir
        self._users_fd: int | None = None
        if self._private():
            self._users_fd = os.open(state_dir / "users.lock", os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._users_fd, fcntl.LOCK_SH)

    def _private(self) -> list[PrivateService]:
        return [s for s in (self.postgres, self.valkey) if isinstance(s, PrivateService)]

    def env(self) -> dict[str, str]:
        """``DATABASE_URL`` and ``VALKEY_URL`` for child processes (and
        ``VALKEY_CLUSTER=true`` when Valkey is a cluster)."""
        env = {"DATABASE_URL": self.postgres.url, "VALKEY_URL": self.valkey.url}
        if self.valkey.cluster:
            env["VALKEY_CLUSTER"] = "true"
        return env

    def keep_running(self) -> None:
        """Leave the private servers running after this process (until
        ``python -m tierq.local.services down``)."""
        for service in self._private():
            service.keep_marker.write_text("started or adopted by `tierq.local.services up`\n")
        self._release()

    def stop(self) -> None:
        """Stop private servers unless kept by `up` or still used by another process."""
        private = self._private()
        if not private:
            return
        with state_lock(self.state_dir):
            self._release()
            fd = os.open(self.state_dir / "users.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    say("private servers still used by another process: leaving them running")
                    return
                for service in private:
                    if service.keep_marker.exists():
                        continue
                    service._stop()
            finally:
                os.close(fd)

    def _release(self) -> None:
        if self._users_fd is not None:
            os.close(self._users_fd)
            self._users_fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<LocalServices {self.postgres!r} {self.valkey!r}>"


def _external_or_none(
    kind: Kind, env_name: str, want_private: bool | None
) -> ExternalService | None:
    """The server named by `env_name` when it should be used, None for a private one."""
    url = os.environ.get(env_name, "").strip()
    if want_private is True:
        return None
    if not url:
        if want_private is False:
            raise LocalServicesError(f"want_private=False but {env_name} is not set")
        return None
    reason = probe(kind, url)
    if reason is None:
        say(f"using {env_name} ({redact(url)})")
        return ExternalService(kind, url)
    if want_private is False:
        raise LocalServicesError(f"{env_name}={redact(url)} does not answer: {reason}")
    say(f"{env_name}={redact(url)} does not answer ({reason}); using a private server")
    return None


def _start_or_reuse(service: PrivateService) -> PrivateService:
    pid = service.pid
    if pid is not None and service.is_up():
        say(f"reusing private {service.kind} (pid {pid}) at {redact(service.url)}")
    elif pid is None:
        # A fresh server belongs to whoever starts it now, whatever an earlier `up` said.
        service.keep_marker.unlink(missing_ok=True)
    service._start()
    return service


def _cluster_or_none(external: ExternalService | None, want_cluster: bool,
                     want_private: bool | None) -> ExternalService | None:
    """The external Valkey marked as a cluster when it is one; None when a cluster is wanted
    and it is not (a private cluster is started instead)."""
    if external is None:
        return None
    if cluster_enabled(external.url):
        external.cluster = True
        return external
    if not want_cluster:
        return external
    if want_private is False:
        raise LocalServicesError(f"VALKEY_URL={redact(external.url)} is not a cluster")
    say(f"VALKEY_URL={redact(external.url)} is not a cluster; using a private cluster")
    return None


def ensure_services(
    state_dir: Path | None = None, *, want_private: bool | None = None,
    valkey_cluster: bool = False,
) -> LocalServices:
    """A PostgreSQL and a Valkey/Redis that answer.

    ``want_private``: None (default) uses DATABASE_URL / VALKEY_URL when set and answering
    and starts private servers otherwise; True always uses private servers; False never
    does (raises unless both variables name answering servers). ``valkey_cluster``: Valkey
    must be a cluster (a private one has three masters, see ``valkey_cluster.py``).
    """
    state = Path(state_dir) if state_dir is not None else default_state_dir()
    state = state.absolute()
    started = time.monotonic()
    pg: Service | None = _external_or_none("postgres", "DATABASE_URL", want_private)
    kv: Service | None = _cluster_or_none(
        _external_or_none("valkey", "VALKEY_URL", want_private), valkey_cluster, want_private)
    if pg is not None and kv is not None:
        return LocalServices(pg, kv, state)
    with state_lock(state):
        if pg is None:
            pg = _start_or_reuse(PrivatePostgres(state))
        if kv is None:
            if valkey_cluster:
                kv = _start_or_reuse(PrivateValkeyCluster(state))
            else:
                kv = _start_or_reuse(PrivateValkey(state))
        services = LocalServices(pg, kv, state)
    elapsed = time.monotonic() - started
    if elapsed > 1:
        say(f"services ready in {elapsed:.1f}s")
    return services


def stop_private_services(state_dir: Path | None = None) -> list[str]:
    """Stop every private server found in `state_dir` (``python -m tierq.local.services down``).

    Returns a description of what was stopped."""
    state = (Path(state_dir) if state_dir is not None else default_state_dir()).absolute()
    if not state.is_dir():
        return []
    stopped: list[str] = []
    with state_lock(state):
        for service in (PrivatePostgres(state), PrivateValkey(state),
                        PrivateValkeyCluster(state)):
            pid = service.pid
            if pid is not None:
                service._stop()
                stopped.append(f"{service.kind} (pid {pid}, {redact(service.url)})")
            service.keep_marker.unlink(missing_ok=True)
    return stopped
