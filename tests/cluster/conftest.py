"""The warm tier as deployed: ElastiCache Serverless is always a cluster, so the core
guarantees run again on a private three-master Redis Cluster.

One cluster per test session, started under the session's folder when the first test here
needs it and stopped at the end. It replaces the session's Valkey for the tests of this
folder (``valkey_url``, ``valkey_cluster`` and ``valkey``); PostgreSQL stays the session's.
Between tests every master is flushed (``clean_stores``). Helpers to place tenants on
masters: tests/support/cluster.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.dispatch.journal import JOURNAL
from tierq.local.consumers import LocalFunctions
from tierq.local.services import PrivateValkeyCluster


@contextmanager
def running(nodes: PrivateValkeyCluster) -> Iterator[PrivateValkeyCluster]:
    """The cluster started, and stopped afterwards."""
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture
def partial_cluster(session_dir: Path) -> Iterator[PrivateValkeyCluster]:
    """A cluster of the test's own, for tests that stop one of its masters (the session's
    stays whole); a master is declared failed after one second."""
    with running(PrivateValkeyCluster(session_dir / f"partial-{uuid.uuid4().hex[:8]}",
                                      node_timeout_ms=1000)) as nodes:
        yield nodes


@pytest.fixture(scope="session")
def cluster(session_dir: Path) -> Iterator[PrivateValkeyCluster]:
    with running(PrivateValkeyCluster(session_dir / "cluster")) as nodes:
        yield nodes


@pytest.fixture(scope="session")
def valkey_url(cluster: PrivateValkeyCluster) -> str:
    return cluster.url


@pytest.fixture(scope="session")
def valkey_private() -> bool:
    return True


@pytest.fixture(scope="session")
def valkey_cluster() -> bool:
    return True


@pytest.fixture
def functions() -> Iterator[LocalFunctions]:
    """The local stack's consumer functions, with the dispatch tests' journal emptied around
    each test (tests/dispatch/journal.py)."""
    local = LocalFunctions()
    JOURNAL.reset()
    yield local
    JOURNAL.reset()
