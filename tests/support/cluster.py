"""Helpers for tests on a Redis Cluster (the fixtures that start one and put it in place of
the session's Valkey are tests/cluster/conftest.py)."""

from __future__ import annotations

from redis.cluster import RedisCluster

from tierq.dal.warm_tier import PairKeys
from tierq.local.services import PrivateValkeyCluster


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


def keys_per_master(client: RedisCluster, *, with_chart: bool = False) -> dict[str, int]:
    """How many keys each master holds; without the throughput chart's counts (``*:rate``,
    ``*:rate_tenants``: metrics that expire on their own, kept by a purge) unless asked."""
    sizes: dict[str, int] = {}
    for node in client.get_primaries():
        direct = node.redis_connection  # (the cluster client's, logged in as its user)
        if with_chart:
            sizes[f"{node.host}:{node.port}"] = int(direct.dbsize())
            continue
        sizes[f"{node.host}:{node.port}"] = sum(
            1 for key in direct.scan_iter(count=1000)
            if not key.endswith((b":rate", b":rate_tenants")))
    return sizes


def serve_own_slots(cluster: PrivateValkeyCluster) -> None:
    """Let each master answer for its own slots while another master is down
    (``cluster-require-full-coverage no``; CONFIG takes the cluster's admin user)."""
    for port in cluster.ports:
        client = cluster.admin_client(port)
        try:
            client.config_set("cluster-require-full-coverage", "no")
        finally:
            client.close()
