"""Running commands and servers' processes: ports, pids, logs, and whether a server answers.

Shared by every private server of :mod:`tierq.local.services` and by the local tools that start
a child process of their own (``tierq demo``, the tests' ``tierq dev``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis

Kind = Literal["postgres", "valkey"]

RESERVED_PORTS = frozenset({5432, 6379})
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
LOG_TAIL_LINES = 25


class LocalServicesError(RuntimeError):
    """A local server could not be found, installed, started or stopped."""


def say(message: str) -> None:
    """One short progress line on stderr (stdout is reserved for `up`'s export lines)."""
    print(f"[local services] {message}", file=sys.stderr, flush=True)


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


def read_int_line(path: Path, line: int = 0) -> int | None:
    try:
        lines = path.read_text().splitlines()
        return int(lines[line].strip())
    except (OSError, ValueError, IndexError):
        return None


def proc_cmdline(pid: int) -> str | None:
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


def which(name: str, extra_dirs: Sequence[str] = ()) -> Path | None:
    found = shutil.which(name)
    if found:
        return Path(found)
    for directory in (*extra_dirs, "/usr/local/sbin", "/usr/sbin", "/sbin"):
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None



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


def make_dirs(path: Path, mode: int = 0o755) -> None:
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
