"""The suite under pytest-xdist (tests/support/parallel.py, stores.py): each worker runs
without a shared VALKEY_URL (a private Valkey), apt-get runs one process at a time, and the
Spark files make one work unit."""

from __future__ import annotations

import fcntl
import os
import time

import pytest

from tests.support.parallel import in_spark_unit, worker_index
from tests.support.stores import worker_environ
from tierq.local.services import install


def test_a_worker_runs_without_the_shared_valkey_url_and_gives_it_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VALKEY_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    with worker_environ():  # not a worker: the URL as given
        assert os.environ["VALKEY_URL"] == "redis://127.0.0.1:6379/0"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert worker_index() == 3
    with worker_environ():
        assert "VALKEY_URL" not in os.environ
    assert os.environ["VALKEY_URL"] == "redis://127.0.0.1:6379/0"


def test_apt_install_waits_for_another_process_holding_its_lock(
        monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> None:
    lock_path = os.path.join(tmp_path, "apt.lock")
    monkeypatch.setattr(install, "APT_LOCK", install.Path(lock_path))
    ran: list[list[str]] = []
    monkeypatch.setattr(install, "_apt_install", lambda packages: ran.append(list(packages)))
    with open(lock_path, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        pid = os.fork()
        if pid == 0:  # the other process: waits for the lock, then installs
            held.close()  # (the lock stays with the parent's copy of the open file)
            install.apt_install(["redis-server"])
            os._exit(0 if ran == [["redis-server"]] else 1)
        time.sleep(0.3)  # (time for the other process to reach the lock)
        done, _ = os.waitpid(pid, os.WNOHANG)
        assert done == 0 and not ran  # still waiting while the lock is held
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def test_the_spark_unit_is_told_by_path() -> None:
    assert in_spark_unit("tests/spark/test_feed_job.py::test_x")
    assert in_spark_unit("tests/shards/test_feeder_spark.py::test_x[a]")
    assert not in_spark_unit("tests/shards/test_http_routes.py::test_x[spark]")
