"""PostgreSQL and Valkey/Redis servers for scripts, tests and the local stack.

The rule, per service:

* ``DATABASE_URL`` (``VALKEY_URL``) is set and the server answers: use it, start nothing.
* Otherwise start a *private* server from local binaries under a state directory
  (default ``<repo root>/.local/services``, git-ignored), installing the Debian package
  when we are root on Debian and the binaries are missing.

Private servers listen on 127.0.0.1 only, on free ports, and survive the process that
started them until someone stops them, so a second caller (another script, the next test
run) re-uses them instead of starting new ones. PostgreSQL keeps its data directory across
runs (``initdb`` happens once); Redis runs without persistence and always starts empty.

Layout of the state directory::

    .lock, users.lock       serialise starts/stops; count live users (flock)
    postgres/data/          PGDATA (our settings live in data/tierq.conf, rewritten per start)
    postgres/run/           unix socket directory
    postgres/server.log     server log (pg_ctl -l)
    postgres/port           last port used (re-used when still free)
    valkey/server.pid, valkey/server.log, valkey/port
    <service>/keep          present when ``python -m tierq.local.services up`` owns the server
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, Self
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
from psycopg import sql

__all__ = [
    "ExternalService",
    "LocalServices",
    "LocalServicesError",
    "PrivatePostgres",
    "PrivateValkey",
    "Service",
    "default_state_dir",
    "ensure_services",
    "repo_root",
    "stop_private_services",
]

Kind = Literal["postgres", "valkey"]

PG_SUPERUSER = "postgres"
PG_DATABASE = "tierq"
PG_SYSTEM_USER = "postgres"
RESERVED_PORTS = frozenset({5432, 6379})
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
LOG_TAIL_LINES = 25
# sun_path is 108 bytes including the NUL; postgres appends "/.s.PGSQL.<port>".
_MAX_SOCKET_DIR_LEN = 107 - len("/.s.PGSQL.65535") - len(".lock")


class LocalServicesError(RuntimeError):
    """A local server could not be found, installed, started or stopped."""


# --------------------------------------------------------------------------- helpers


def say(message: str) -> None:
    """One short progress line on stderr (stdout is reserved for `up`'s export lines)."""
    print(f"[devstack] {message}", file=sys.stderr, flush=True)


def repo_root(start: Path | None = None) -> Path:
    """Nearest directory at or above ``start`` (default: cwd) holding a pyproject.toml."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "pyproject.toml").is_file():
            return candidate
    return here


def default_state_dir() -> Path:
    return repo_root() / ".local" / "services"


def redact(url: str) -> str:
    """The URL with its password replaced, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username or ''}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def free_port() -> int:
    """A port nobody listens on right now (bind to port 0), never 5432 or 6379."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in RESERVED_PORTS:
            return port
    raise LocalServicesError("could not find a free TCP port on 127.0.0.1")


def port_is_free(port: int) -> bool:
    """Whether a server could bind 127.0.0.1:port (with SO_REUSEADDR, like servers do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS): trust kill(0)
    fields = stat_line.rsplit(")", 1)[-1].split()
    return not fields or fields[0] not in ("Z", "X")


def wait_pid_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _read_int_line(path: Path, line: int = 0) -> int | None:
    try:
        lines = path.read_text().splitlines()
        return int(lines[line].strip())
    except (OSError, ValueError, IndexError):
        return None


def _proc_cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace")


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else f"(log {path} is empty)"


def _which(name: str, extra_dirs: Sequence[str] = ()) -> Path | None:
    found = shutil.which(name)
    if found:
        return Path(found)
    for directory in (*extra_dirs, "/usr/local/sbin", "/usr/sbin", "/sbin"):
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass(frozen=True)
class RunAs:
    """A system user to run PostgreSQL's tools as (we are root, PostgreSQL refuses root)."""

    name: str
    uid: int
    gid: int

    def wrap(self, cmd: Sequence[str]) -> list[str]:
        runuser = _which("runuser")
        if runuser:
            return [str(runuser), "-u", self.name, "--", *cmd]
        setpriv = _which("setpriv")
        if setpriv:
            return [
                str(setpriv),
                f"--reuid={self.uid}",
                f"--regid={self.gid}",
                "--init-groups",
                "--",
                *cmd,
            ]
        raise LocalServicesError(
            "need `runuser` or `setpriv` (util-linux) to run PostgreSQL as user "
            f"{self.name!r} while we are root"
        )

    def chown(self, path: Path) -> None:
        os.chown(path, self.uid, self.gid)


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    what: str,
    check: bool = True,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> tuple[int, str]:
    """Run a command with output captured in a temp file (not a pipe: daemons it starts
    must never hold our pipes open). Returns (exit code, output)."""
    args = [os.fspath(part) for part in cmd]
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.run(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError as exc:
            raise LocalServicesError(f"{what}: {args[0]} not found") from exc
        except subprocess.TimeoutExpired as exc:
            raise LocalServicesError(
                f"{what}: timed out after {timeout:.0f}s: {' '.join(args)}"
            ) from exc
        out.seek(0)
        text = out.read().decode(errors="replace")
    if check and proc.returncode != 0:
        tail = "\n".join(text.splitlines()[-LOG_TAIL_LINES:])
        raise LocalServicesError(
            f"{what} failed (exit {proc.returncode}): {' '.join(args)}\n{tail}"
        )
    return proc.returncode, text


def _make_dirs(path: Path, mode: int = 0o755) -> None:
    """mkdir -p, giving the directories *we* create an explicit mode (umask aside)."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=mode)
            directory.chmod(mode)


def _is_debian_root() -> bool:
    return (
        os.geteuid() == 0 and Path("/etc/debian_version").exists() and _which("apt-get") is not None
    )


def apt_install(packages: Sequence[str]) -> None:
    """Non-interactive ``apt-get install``; runs ``apt-get update`` and retries on failure."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [
        "apt-get",
        "install",
        "-y",
        "--no-install-recommends",
        "-o",
        "Dpkg::Options::=--force-confdef",
        "-o",
        "Dpkg::Options::=--force-confold",
        *packages,
    ]
    names = " ".join(packages)
    say(f"installing {names} with apt-get (can take a minute or more)...")
    started = time.monotonic()
    code, _ = run(cmd, what=f"apt-get install {names}", check=False, env=env, timeout=1800)
    if code != 0:
        say("apt-get install failed; running apt-get update and retrying...")
        run(["apt-get", "update"], what="apt-get update", env=env, timeout=900)
        run(cmd, what=f"apt-get install {names}", env=env, timeout=1800)
    say(f"installed {names} in {time.monotonic() - started:.0f}s")


@contextlib.contextmanager
def _state_lock(state_dir: Path) -> Iterator[None]:
    """Exclusive lock serialising starts and stops on one state directory."""
    _make_dirs(state_dir)
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


def probe(kind: Kind, url: str, timeout: float = 3.0) -> str | None:
    """None when the server at `url` answers (SELECT 1 / PING), else a one-line reason."""
    try:
        if kind == "postgres":
            with psycopg.connect(url, connect_timeout=max(1, round(timeout))) as conn:
                conn.execute("SELECT 1")
        else:
            client = redis.Redis.from_url(
                url, socket_connect_timeout=timeout, socket_timeout=timeout
            )
            try:
                client.ping()
            finally:
                client.close()
    except (psycopg.Error, redis.RedisError, OSError) as exc:
        first = str(exc).strip().splitlines()
        return first[0] if first else type(exc).__name__
    return None


# --------------------------------------------------------------------------- services


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
                "it is not a private server, so devstack cannot start it"
            )

    def stop(self) -> None:
        """Nothing to do: not ours."""

    def restart(self) -> None:
        raise LocalServicesError(f"cannot restart {redact(self.url)}: not a private server")

    def kill(self) -> None:
        raise LocalServicesError(f"cannot kill {redact(self.url)}: not a private server")


class _PrivateService(Service):
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
        return _read_int_line(self.port_file)

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
        with _state_lock(self.state_dir):
            self._start()

    def stop(self) -> None:
        """Shut the server down (fast) and wait until its process is gone."""
        with _state_lock(self.state_dir):
            self._stop()

    def restart(self) -> None:
        """Stop, then start on the same port; returns once the server answers again."""
        with _state_lock(self.state_dir):
            self._stop()
            self._start()

    def kill(self) -> None:
        """SIGKILL the server (a crash, for reliability tests). `start()` brings it back."""
        with _state_lock(self.state_dir):
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


class PrivatePostgres(_PrivateService):
    """A PostgreSQL cluster in ``<state>/postgres``, run by pg_ctl (as user postgres if root)."""

    kind: Kind = "postgres"

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir)
        self.root = state_dir / "postgres"
        self.data_dir = self.root / "data"
        self.log_file = self.root / "server.log"
        self.port = self._running_port()
        self._bins: PgBinaries | None = None
        self._run_as: RunAs | None = None

    # -- addresses

    @property
    def url(self) -> str:
        return self.url_for(PG_DATABASE)

    def url_for(self, database: str) -> str:
        port = self.port if self.port is not None else self._saved_port()
        return f"postgresql://{PG_SUPERUSER}@127.0.0.1:{port}/{database}"

    @property
    def socket_dir(self) -> Path:
        preferred = self.root / "run"
        if len(os.fsencode(preferred)) <= _MAX_SOCKET_DIR_LEN:
            return preferred
        # Too long for a unix socket path: a short, stable directory keyed by the state dir.
        digest = hashlib.sha1(os.fsencode(self.root.resolve())).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"tierq-pg-{digest}"

    # -- process

    @property
    def pid(self) -> int | None:
        pid = _read_int_line(self.data_dir / "postmaster.pid")
        if pid is None or not pid_alive(pid):
            return None
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except FileNotFoundError:
            return pid if not Path("/proc/self").exists() else None
        except PermissionError:
            # Another user's process: ours only if it is a postgres at all.
            return pid if "postgres" in (_proc_cmdline(pid) or "") else None
        except OSError:
            return None
        # The postmaster chdirs into its data directory: this tells ours from a stale
        # pid file whose number now belongs to some other process.
        return pid if cwd == self.data_dir.resolve() else None

    def _clear_stale_pidfile(self) -> None:
        """Remove a postmaster.pid whose process is gone. PostgreSQL would do it itself, but
        it counts a zombie (a killed postmaster its new parent has not reaped yet) as alive
        and refuses to start."""
        pidfile = self.data_dir / "postmaster.pid"
        if pidfile.exists() and self.pid is None:
            pidfile.unlink(missing_ok=True)
        # The unix socket's lock file gets the same check.
        with contextlib.suppress(OSError):
            for lock in self.socket_dir.glob(".s.PGSQL.*.lock"):
                pid = _read_int_line(lock)
                if pid is None or not pid_alive(pid):
                    lock.unlink(missing_ok=True)

    def _running_port(self) -> int | None:
        if self.pid is None:
            return None
        return _read_int_line(self.data_dir / "postmaster.pid", 3)

    @property
    def initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").is_file()

    def _binaries(self) -> PgBinaries:
        if self._bins is None:
            want = _read_int_line(self.data_dir / "PG_VERSION")
            bins = find_pg_binaries(want)
            if bins is None:
                if not _is_debian_root():
                    raise LocalServicesError(
                        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found "
                        "under /usr/lib/postgresql/*/bin or on PATH. Install them "
                        "(Debian/Ubuntu: `sudo apt-get install postgresql`; macOS: "
                        "`brew install postgresql@16`; Fedora: `sudo dnf install "
                        "postgresql-server`), or set DATABASE_URL to a server that answers."
                    )
                apt_install(["postgresql"])
                bins = find_pg_binaries(want)
                if bins is None:
                    raise LocalServicesError(
                        "installed postgresql but still no initdb/pg_ctl found"
                    )
            if want is not None and bins.major != want:
                raise LocalServicesError(
                    f"{self.data_dir} was initialised by PostgreSQL {want}, but only "
                    f"PostgreSQL {bins.major} binaries were found ({bins.bindir}). Install "
                    f"PostgreSQL {want}, or delete {self.data_dir} to start afresh."
                )
            self._bins = bins
        return self._bins

    def _user(self) -> RunAs | None:
        """Who runs PostgreSQL: us, or (when we are root) the `postgres` system user."""
        if os.geteuid() != 0:
            return None
        if self._run_as is None:
            self._run_as = ensure_system_user(PG_SYSTEM_USER)
        return self._run_as

    def _cmd(self, cmd: Sequence[str | os.PathLike[str]]) -> list[str]:
        args = [os.fspath(part) for part in cmd]
        user = self._user()
        return user.wrap(args) if user else args

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        env.pop("LANG", None)
        return env

    def _prepare_dirs(self) -> None:
        user = self._user()
        _make_dirs(self.root)
        for directory in (self.root, self.socket_dir):
            _make_dirs(directory)
            if user:
                user.chown(directory)
        if user:
            _check_reachable(self.root, user)
            if self.initialized and self.data_dir.stat().st_uid != user.uid:
                say(f"giving {self.data_dir} to user {user.name}")
                _chown_tree(self.data_dir, user)
            if self.log_file.exists():
                user.chown(self.log_file)

    def _initdb(self) -> None:
        bins = self._binaries()
        say(f"initialising PostgreSQL {bins.major} in {self.data_dir} (first run only)...")
        started = time.monotonic()
        staging = self.root / "data.initdb"
        if staging.exists():
            shutil.rmtree(staging)
        run(
            self._cmd(
                [
                    bins.initdb,
                    "-D",
                    staging,
                    "-U",
                    PG_SUPERUSER,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-locale",
                ]
            ),
            what="initdb",
            cwd=self.root,
            env=self._env(),
            timeout=600,
        )
        with (staging / "postgresql.conf").open("a") as conf:
            conf.write("\n# Added by tierq.local.services: settings rewritten at every start.\n")
            conf.write("include_if_exists = 'tierq.conf'\n")
        if self.data_dir.is_dir() and not any(self.data_dir.iterdir()):
            self.data_dir.rmdir()
        if self.data_dir.exists():
            raise LocalServicesError(
                f"{self.data_dir} exists but is not a PostgreSQL data directory "
                "(no PG_VERSION); move it away or delete it"
            )
        staging.rename(self.data_dir)
        say(f"initdb done in {time.monotonic() - started:.1f}s")

    def _write_conf(self, port: int) -> None:
        sock = str(self.socket_dir).replace("'", "''")
        text = (
            "# Written by tierq.local.services before every start; put your own settings in\n"
            "# postgresql.conf (before the include) or ALTER SYSTEM.\n"
            "listen_addresses = '127.0.0.1'\n"
            f"port = {port}\n"
            f"unix_socket_directories = '{sock}'\n"
            "max_connections = 200\n"
            "shared_buffers = '256MB'\n"
            "fsync = on\n"
            "synchronous_commit = on\n"
            "full_page_writes = on\n"
        )
        path = self.data_dir / "tierq.conf"
        path.write_text(text)
        path.chmod(0o600)
        user = self._user()
        if user:
            user.chown(path)

    def _ensure_database(self) -> None:
        with psycopg.connect(self.url_for("postgres"), autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)
            ).fetchone()
            if row is None:
                say(f"creating database {PG_DATABASE!r}")
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(PG_DATABASE)))

    def _start(self) -> None:
        if self.pid is not None:
            self.port = self._running_port()
            if self.is_up():
                return
            # Running but not answering yet (e.g. crash recovery): give it the start timeout.
            self._wait_until_up(self.log_file, "private PostgreSQL", self.url_for("postgres"))
            self._ensure_database()
            return
        bins = self._binaries()
        self._prepare_dirs()
        if not self.initialized:
            self._initdb()
        self._clear_stale_pidfile()
        port = self._choose_port()
        self._write_conf(port)
        self.port = port
        self.port_file.write_text(f"{port}\n")
        say(f"starting PostgreSQL {bins.major} on 127.0.0.1:{port}...")
        started = time.monotonic()
        code, out = run(
            self._cmd(
                [
                    bins.pg_ctl,
                    "-D",
                    self.data_dir,
                    "-l",
                    self.log_file,
                    "-w",
                    "-t",
                    str(round(self.start_timeout)),
                    "start",
                ]
            ),
            what="pg_ctl start",
            check=False,
            cwd=self.root,
            env=self._env(),
            timeout=self.start_timeout + 30,
        )
        if code != 0:
            raise LocalServicesError(
                f"PostgreSQL did not start (pg_ctl exit {code}) on port {port}:\n"
                f"{out.strip()}\n--- tail of {self.log_file} ---\n{log_tail(self.log_file)}"
            )
        self._wait_until_up(self.log_file, "private PostgreSQL", self.url_for("postgres"))
        self._ensure_database()
        say(f"PostgreSQL up in {time.monotonic() - started:.1f}s at {self.url}")

    def _stop(self) -> None:
        pid = self.pid
        if pid is None:
            return
        say(f"stopping private PostgreSQL (pid {pid}, fast shutdown)...")
        # SIGINT is what `pg_ctl stop -m fast` sends; signalling directly needs no user switch.
        self._terminate(pid, signal.SIGINT, STOP_TIMEOUT)

    def _sigkill(self, pid: int) -> None:
        # pg_ctl puts the postmaster in its own session: kill its whole process group so no
        # orphaned backend keeps the shared memory (and the next start) hostage.
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)


class PrivateValkey(_PrivateService):
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
        pid = _read_int_line(self.pid_file)
        if pid is None or not pid_alive(pid):
            return None
        cmdline = _proc_cmdline(pid)
        if cmdline is None:
            return pid if not Path("/proc/self").exists() else None
        port = self._saved_port()
        ours = ("redis" in cmdline or "valkey" in cmdline) and f":{port}" in cmdline
        return pid if ours else None

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
        _make_dirs(self.root)
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


# --------------------------------------------------------------------------- discovery


@dataclass(frozen=True)
class PgBinaries:
    bindir: Path
    major: int

    @property
    def initdb(self) -> Path:
        return self.bindir / "initdb"

    @property
    def pg_ctl(self) -> Path:
        return self.bindir / "pg_ctl"

    @property
    def postgres(self) -> Path:
        return self.bindir / "postgres"

    @property
    def complete(self) -> bool:
        return all(os.access(p, os.X_OK) for p in (self.initdb, self.pg_ctl, self.postgres))


def _version_key(path: Path) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", path.name)
    return tuple(int(n) for n in numbers) or (0,)


def _pg_major(bindir: Path) -> int | None:
    code, out = run([bindir / "pg_ctl", "--version"], what="pg_ctl --version", check=False)
    match = re.search(r"(\d+)(?:\.\d+)?", out)
    return int(match.group(1)) if code == 0 and match else None


def find_pg_binaries(prefer_major: int | None = None) -> PgBinaries | None:
    """PostgreSQL server binaries: /usr/lib/postgresql/<newest>/bin, then PATH.

    When ``prefer_major`` is given (an existing data directory's version) and binaries of
    that major version exist, those win.
    """
    found: list[PgBinaries] = []
    for pattern_root, glob in ((Path("/usr/lib/postgresql"), "*"), (Path("/usr"), "pgsql-*")):
        if not pattern_root.is_dir():
            continue
        versioned = [d for d in pattern_root.glob(glob) if (d / "bin").is_dir()]
        for directory in sorted(versioned, key=_version_key, reverse=True):
            major = _version_key(directory)[0]
            bins = PgBinaries(directory / "bin", major)
            if bins.complete:
                found.append(bins)
    on_path = _which("pg_ctl")
    if on_path is not None:
        bindir = on_path.resolve().parent
        if all(b.bindir != bindir for b in found):
            major = _pg_major(bindir)
            if major is not None:
                bins = PgBinaries(bindir, major)
                if bins.complete:
                    found.append(bins)
    if not found:
        return None
    if prefer_major is not None:
        for bins in found:
            if bins.major == prefer_major:
                return bins
    return found[0]


def find_valkey_binary() -> Path | None:
    for name in ("valkey-server", "redis-server"):
        found = _which(name, ("/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"))
        if found is not None:
            return found
    return None


def require_valkey_binary() -> Path:
    """valkey-server or redis-server, installed with apt-get when missing and allowed."""
    found = find_valkey_binary()
    if found is None:
        if not _is_debian_root():
            raise LocalServicesError(
                "neither valkey-server nor redis-server found on PATH. Install one "
                "(Debian/Ubuntu: `sudo apt-get install redis-server`; macOS: `brew "
                "install valkey`; Fedora: `sudo dnf install valkey`), or set "
                "VALKEY_URL to a server that answers."
            )
        apt_install(["redis-server"])
        found = find_valkey_binary()
        if found is None:
            raise LocalServicesError("installed redis-server but still no binary found")
    return found


def ensure_system_user(name: str) -> RunAs:
    """The system user `name`, created (no login, no home) when missing."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        say(f"creating system user {name!r} (PostgreSQL refuses to run as root)...")
        useradd = _which("useradd")
        adduser = _which("adduser")
        if useradd:
            cmd = [
                str(useradd),
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/var/lib/postgresql",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ]
        elif adduser:
            cmd = [str(adduser), "--system", "--group", "--no-create-home", name]
        else:
            raise LocalServicesError(
                f"PostgreSQL cannot run as root and there is no user {name!r}; "
                "create one (useradd --system postgres) or run as a normal user"
            ) from None
        run(cmd, what=f"create user {name}")
        entry = pwd.getpwnam(name)
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _check_reachable(path: Path, user: RunAs) -> None:
    """Fail clearly when `user` cannot traverse every directory above `path`."""
    groups = set(os.getgrouplist(user.name, user.gid))
    for directory in reversed((path, *path.parents)):
        info = directory.stat()
        if info.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif info.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            raise LocalServicesError(
                f"PostgreSQL runs as user {user.name!r} (we are root), and that user cannot "
                f"enter {directory} (mode {stat.filemode(info.st_mode)}). Use a state dir "
                f"whose parents are searchable (e.g. under /tmp with mode 755), or run "
                f"`chmod o+x {directory}`."
            )


def _chown_tree(root: Path, user: RunAs) -> None:
    user.chown(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            os.chown(Path(dirpath) / name, user.uid, user.gid, follow_symlinks=False)


# --------------------------------------------------------------------------- the stack


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

    def _private(self) -> list[_PrivateService]:
        return [s for s in (self.postgres, self.valkey) if isinstance(s, _PrivateService)]

    def env(self) -> dict[str, str]:
        """``DATABASE_URL`` and ``VALKEY_URL`` for child processes (and
        ``VALKEY_CLUSTER=true`` when Valkey is a cluster)."""
        env = {"DATABASE_URL": self.postgres.url, "VALKEY_URL": self.valkey.url}
        if self.valkey.cluster:
            env["VALKEY_CLUSTER"] = "true"
        return env

    def keep_running(self) -> None:
        """Leave the private servers running after this process (until `devstack down`)."""
        for service in self._private():
            service.keep_marker.write_text("started or adopted by `tierq.local.services up`\n")
        self._release()

    def stop(self) -> None:
        """Stop private servers unless kept by `up` or still used by another process."""
        private = self._private()
        if not private:
            return
        with _state_lock(self.state_dir):
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


def _start_or_reuse(service: _PrivateService) -> _PrivateService:
    pid = service.pid
    if pid is not None and service.is_up():
        say(f"reusing private {service.kind} (pid {pid}) at {service.url}")
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
    from tierq.local.services.valkey_cluster import cluster_enabled

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
    with _state_lock(state):
        if pg is None:
            pg = _start_or_reuse(PrivatePostgres(state))
        if kv is None:
            if valkey_cluster:
                from tierq.local.services.valkey_cluster import PrivateValkeyCluster

                kv = _start_or_reuse(PrivateValkeyCluster(state))
            else:
                kv = _start_or_reuse(PrivateValkey(state))
        services = LocalServices(pg, kv, state)
    elapsed = time.monotonic() - started
    if elapsed > 1:
        say(f"services ready in {elapsed:.1f}s")
    return services


def stop_private_services(state_dir: Path | None = None) -> list[str]:
    """Stop every private server found in `state_dir` (for `devstack down`).

    Returns a description of what was stopped."""
    state = (Path(state_dir) if state_dir is not None else default_state_dir()).absolute()
    if not state.is_dir():
        return []
    from tierq.local.services.valkey_cluster import PrivateValkeyCluster

    stopped: list[str] = []
    with _state_lock(state):
        for service in (PrivatePostgres(state), PrivateValkey(state),
                        PrivateValkeyCluster(state)):
            pid = service.pid
            if pid is not None:
                service._stop()
                stopped.append(f"{service.kind} (pid {pid}, {service.url})")
            service.keep_marker.unlink(missing_ok=True)
    return stopped
