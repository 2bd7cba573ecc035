"""tierq.local.services: private PostgreSQL/Redis servers, and reuse of DATABASE_URL/VALKEY_URL."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis

from tierq.local.services import (
    LocalServicesError,
    PrivatePostgres,
    PrivateValkey,
    ensure_services,
    stop_private_services,
)
from tierq.local.services.process import probe

ENV_VARS = ("DATABASE_URL", "VALKEY_URL")
# Servers that answer on the team's machines; overridden by the environment when set.
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_VALKEY_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state dir under /tmp that the `postgres` user can traverse when we run as root
    (pytest's tmp_path sits below a 0700 directory)."""
    base = Path(tempfile.mkdtemp(prefix="tierq-devstack-", dir="/tmp"))
    base.chmod(0o755)
    state = base / "services"
    try:
        yield state
    finally:
        stop_private_services(state)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


@pytest.mark.slow
@pytest.mark.usefixtures("no_env")
def test_private_servers_start_restart_reuse_and_stop(state_dir: Path) -> None:
    started = time.monotonic()
    services = ensure_services(state_dir)
    first_start = time.monotonic() - started
    pg, kv = services.postgres, services.valkey
    assert isinstance(pg, PrivatePostgres)
    assert isinstance(kv, PrivateValkey)
    assert pg.private and kv.private
    assert pg.url.startswith("postgresql://postgres@127.0.0.1:") and pg.url.endswith("/tierq")
    assert kv.url.startswith("redis://127.0.0.1:") and kv.url.endswith("/0")
    pg_port, kv_port = _port(pg.url), _port(kv.url)
    assert {pg_port, kv_port}.isdisjoint({5432, 6379})
    assert services.env() == {"DATABASE_URL": pg.url, "VALKEY_URL": kv.url}

    with psycopg.connect(pg.url, autocommit=True) as conn:
        settings = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("fsync", "max_connections", "shared_buffers", "listen_addresses")
        }
        assert settings == {
            "fsync": "on",
            "max_connections": "200",
            "shared_buffers": "256MB",
            "listen_addresses": "127.0.0.1",
        }
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
        conn.execute("CREATE TABLE survives (id int PRIMARY KEY)")
        conn.execute("INSERT INTO survives VALUES (1)")
    client = redis.Redis.from_url(kv.url)
    assert client.ping()
    client.set("ephemeral", "yes")
    client.close()

    if os.geteuid() == 0:  # PostgreSQL refuses root: it runs as the postgres user
        assert pg.data_dir.stat().st_uid != 0

    # A second caller reuses the running servers: same ports, nothing started, fast.
    started = time.monotonic()
    again = ensure_services(state_dir)
    reuse = time.monotonic() - started
    assert (again.postgres.url, again.valkey.url) == (pg.url, kv.url)
    assert isinstance(again.postgres, PrivatePostgres) and again.postgres.pid == pg.pid
    again.stop()  # another user (services) still holds them: they keep running
    assert pg.is_up() and kv.is_up()

    # PostgreSQL restart: same port, same data.
    old_pid = pg.pid
    pg.restart()
    assert pg.is_up() and pg.pid != old_pid and _port(pg.url) == pg_port
    with psycopg.connect(pg.url) as conn:
        assert conn.execute("SELECT id FROM survives").fetchall() == [(1,)]

    # Crash (SIGKILL) and start again: crash recovery keeps committed data.
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("INSERT INTO survives VALUES (2)")
    pg.kill()
    assert not pg.is_up()
    pg.start()
    assert _port(pg.url) == pg_port
    with psycopg.connect(pg.url) as conn:
        assert conn.execute("SELECT id FROM survives ORDER BY id").fetchall() == [(1,), (2,)]

    # Redis restart: same port, empty.
    kv.restart()
    assert _port(kv.url) == kv_port
    client = redis.Redis.from_url(kv.url)
    assert client.ping()
    assert client.get("ephemeral") is None
    client.set("ephemeral", "again")
    client.close()
    kv.kill()
    assert not kv.is_up()
    kv.start()
    assert kv.is_up() and _port(kv.url) == kv_port

    services.stop()
    assert not pg.is_up() and not kv.is_up()
    assert pg.pid is None and kv.pid is None
    assert (state_dir / "postgres" / "data" / "PG_VERSION").is_file()  # kept for next time
    print(f"first start {first_start:.2f}s, reuse {reuse:.3f}s")


@pytest.mark.slow
@pytest.mark.usefixtures("no_env")
def test_cli_up_status_down(state_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    cmd = [sys.executable, "-m", "tierq.local.services"]
    up = subprocess.run(
        [*cmd, "up", "--state-dir", str(state_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    exports = dict(
        shlex.split(line.removeprefix("export "))[0].split("=", 1)
        for line in up.stdout.splitlines()
    )
    assert all(line.startswith("export ") for line in up.stdout.splitlines())
    assert set(exports) == set(ENV_VARS)
    assert probe("postgres", exports["DATABASE_URL"]) is None
    assert probe("valkey", exports["VALKEY_URL"]) is None

    status = subprocess.run(
        [*cmd, "status", "--state-dir", str(state_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    assert "kept by `up`" in status.stdout

    # `up` owns the servers: a library user's stop() leaves them running.
    with ensure_services(state_dir) as services:
        assert services.postgres.url == exports["DATABASE_URL"]
    assert probe("postgres", exports["DATABASE_URL"]) is None

    subprocess.run([*cmd, "down", "--state-dir", str(state_dir)], env=env, timeout=60, check=True)
    assert probe("postgres", exports["DATABASE_URL"], timeout=1) is not None
    assert probe("valkey", exports["VALKEY_URL"], timeout=1) is not None


def test_answering_env_servers_are_reused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    database_url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    valkey_url = os.environ.get("VALKEY_URL") or DEFAULT_VALKEY_URL
    for kind, url in (("postgres", database_url), ("valkey", valkey_url)):
        reason = probe(kind, url)  # type: ignore[arg-type]
        if reason is not None:
            pytest.skip(f"no {kind} answering at {url}: {reason}")
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("VALKEY_URL", valkey_url)
    state = tmp_path / "services"

    with ensure_services(state) as services:
        assert services.postgres.url == database_url
        assert services.valkey.url == valkey_url
        assert not services.postgres.private and not services.valkey.private
        assert services.postgres.is_up() and services.valkey.is_up()
        with pytest.raises(LocalServicesError):
            services.postgres.restart()
        with pytest.raises(LocalServicesError):
            services.valkey.kill()
        services.postgres.stop()  # not ours: does nothing
        services.valkey.stop()
    assert not state.exists()  # nothing was started, not even a state dir
    assert probe("postgres", database_url) is None
    assert probe("valkey", valkey_url) is None


def test_want_private_false_requires_answering_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://postgres@127.0.0.1:1/nothing")
    monkeypatch.setenv("VALKEY_URL", "redis://127.0.0.1:1/0")
    with pytest.raises(LocalServicesError, match="DATABASE_URL"):
        ensure_services(tmp_path / "services", want_private=False)
    monkeypatch.delenv("DATABASE_URL")
    with pytest.raises(LocalServicesError, match="not set"):
        ensure_services(tmp_path / "services", want_private=False)
    assert not (tmp_path / "services").exists()
