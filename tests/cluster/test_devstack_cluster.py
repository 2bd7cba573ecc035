"""``python -m tierq.local.services up --valkey-cluster``: a private three-master cluster next to
a private PostgreSQL, exported with VALKEY_CLUSTER=true, shown by ``status`` and stopped by
``down``."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tierq.local.services import stop_private_services
from tierq.local.services.process import probe, redact
from tierq.local.services.valkey_cluster import MAX_NODE_PORT, cluster_nodes

ENV_VARS = ("DATABASE_URL", "VALKEY_URL", "VALKEY_CLUSTER")


@pytest.fixture
def state_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="tierq-devstack-cluster-", dir="/tmp"))
    base.chmod(0o755)  # PostgreSQL runs as the postgres user when we are root
    state = base / "services"
    try:
        yield state
    finally:
        stop_private_services(state)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_up_valkey_cluster_status_down(state_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    cmd = [sys.executable, "-m", "tierq.local.services"]
    up = subprocess.run([*cmd, "up", "--valkey-cluster", "--state-dir", str(state_dir)],
                        env=env, capture_output=True, text=True, timeout=180, check=True)
    exports = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1)
                   for line in up.stdout.splitlines())
    assert set(exports) == set(ENV_VARS) and exports["VALKEY_CLUSTER"] == "true"
    masters = cluster_nodes(exports["VALKEY_URL"])
    assert len(masters) == 3
    assert all(int(m.rsplit(":", 1)[1]) <= MAX_NODE_PORT for m in masters)

    status = subprocess.run([*cmd, "status", "--state-dir", str(state_dir)], env=env,
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "valkey-cluster private  up" in status.stdout
    # the URL as tierq uses it: its user and password, which status never prints
    password = urlsplit(exports["VALKEY_URL"]).password
    assert password and password not in status.stdout + status.stderr
    assert redact(exports["VALKEY_URL"]) in status.stdout

    subprocess.run([*cmd, "down", "--state-dir", str(state_dir)], env=env, timeout=60,
                   check=True)
    for master in masters:
        assert probe("valkey", f"redis://{master}/0", timeout=1) is not None
    assert probe("postgres", exports["DATABASE_URL"], timeout=1) is not None
