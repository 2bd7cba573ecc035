"""The warm tier as deployed: ElastiCache Serverless is always a cluster, so the core
guarantees run again on a private three-master Redis Cluster.

One cluster per test session, started under the session's folder when the first test here
needs it and stopped at the end. It replaces the session's Valkey for the tests of this
folder (``valkey_url``, ``valkey_cluster`` and ``valkey``); PostgreSQL stays the session's.
Between tests every master is flushed (``clean_stores``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from tierq.dal.warm_tier import PairKeys
from tierq.devstack import PrivateValkeyCluster


@pytest.fixture(scope="session")
def cluster(session_dir: Path) -> Iterator[PrivateValkeyCluster]:
    nodes = PrivateValkeyCluster(session_dir / "cluster")
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture(scope="session")
def valkey_url(cluster: PrivateValkeyCluster) -> str:
    return cluster.url


@pytest.fixture(scope="session")
def valkey_private() -> bool:
    return True


@pytest.fixture(scope="session")
def valkey_cluster() -> bool:
    return True


def node_of(client: RedisCluster, queue: str, tenant: str) -> str:
    """``host:port`` of the master holding the keys of (queue, tenant)."""
    node = client.get_node_from_key(PairKeys.of(queue, tenant).ready)
    return f"{node.host}:{node.port}"


def tenants_on_every_node(client: RedisCluster, queue: str, per_node: int = 1) -> list[str]:
    """Tenant names whose keys in ``queue`` lie on every master, ``per_node`` on each, in
    name order (each pair has its own slot: its hash tag is ``{queue|tenant}``)."""
    wanted = {f"{node.host}:{node.port}": per_node for node in client.get_primaries()}
    chosen: list[str] = []
    for i in range(10_000):
        tenant = f"t{i}"
        node = node_of(client, queue, tenant)
        if wanted[node] > 0:
            wanted[node] -= 1
            chosen.append(tenant)
            if not any(wanted.values()):
                return chosen
    raise AssertionError(f"no tenants found on every master for queue {queue!r}")


def keys_per_master(client: RedisCluster) -> dict[str, int]:
    """How many keys each master holds (DBSIZE of each)."""
    sizes: dict[str, int] = {}
    for node in client.get_primaries():
        direct = redis.Redis(host=node.host, port=node.port)
        try:
            sizes[f"{node.host}:{node.port}"] = int(direct.dbsize())
        finally:
            direct.close()
    return sizes
