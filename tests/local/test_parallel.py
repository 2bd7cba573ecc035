"""The suite under pytest-xdist (tests/support/parallel.py, stores.py): on a shared Valkey
each worker takes a db of its own, and the Spark files make one work unit."""

from __future__ import annotations

import os

import pytest

from tests.support.parallel import in_spark_unit, worker_index
from tests.support.stores import worker_environ, worker_valkey_url


def test_a_worker_takes_the_db_of_the_url_plus_its_number(valkey_url: str,
                                                          valkey_private: bool) -> None:
    if not valkey_private:
        pytest.skip("a shared VALKEY_URL: its db count is not ours to know")
    base = valkey_url.rsplit("/", 1)[0]
    assert worker_valkey_url(f"{base}/0", 0) == f"{base}/0"
    assert worker_valkey_url(f"{base}/2", 3) == f"{base}/5"
    assert worker_valkey_url(base, 1) == f"{base}/1"
    assert worker_valkey_url(f"{base}/0", 16) is None  # past the server's 16 dbs: private


def test_the_worker_environ_names_its_db_and_gives_the_url_back(
        monkeypatch: pytest.MonkeyPatch, valkey_url: str, valkey_private: bool) -> None:
    if not valkey_private:
        pytest.skip("a shared VALKEY_URL: its db count is not ours to know")
    base = valkey_url.rsplit("/", 1)[0]
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setenv("VALKEY_URL", f"{base}/0")
    assert worker_index() == 3
    with worker_environ():
        assert os.environ["VALKEY_URL"] == f"{base}/3"
    assert os.environ["VALKEY_URL"] == f"{base}/0"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw16")
    with worker_environ():
        assert "VALKEY_URL" not in os.environ  # no db 16: a private server instead
    assert os.environ["VALKEY_URL"] == f"{base}/0"


def test_the_spark_unit_is_told_by_path() -> None:
    assert in_spark_unit("tests/spark/test_feed_job.py::test_x")
    assert in_spark_unit("tests/shards/test_feeder_spark.py::test_x[a]")
    assert not in_spark_unit("tests/shards/test_http_routes.py::test_x[spark]")
