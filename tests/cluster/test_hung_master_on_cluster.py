"""A hung master (SIGSTOP: its connections accept and never answer) costs a call one socket
timeout, not one per retry: the cluster client does not send a timed-out call again
(dal/warm_tier.py ``ClusterClient``). Once the master goes on it runs what it was sent
while stopped: the call once, and no handshake of connections made to send it again."""

from __future__ import annotations

import time

import pytest
import redis

from tests.cluster.test_maintenance_with_master_down import _hung_master
from tests.support.cluster import node_of, tenants_on_every_node
from tests.support.polling import eventually
from tierq.dal.warm_tier import PairKeys, WarmTier

TIMEOUT = 0.2


def _runs(admin: redis.Redis) -> tuple[int, int]:
    """(GETs, connection handshakes) the node has run; ``admin``'s connection is made."""
    stats = admin.info("commandstats")
    return (int(stats.get("cmdstat_get", {}).get("calls", 0)),
            int(stats.get("cmdstat_hello", {}).get("calls", 0)))


def test_a_call_to_a_hung_master_is_sent_once(partial_cluster) -> None:
    url = f"{partial_cluster.url}?socket_timeout={TIMEOUT}&socket_connect_timeout={TIMEOUT}"
    warm = WarmTier.from_url(url, cluster=True)
    try:
        client = warm.client
        tenant = tenants_on_every_node(client, "hung")[0]  # type: ignore[arg-type]
        port = int(node_of(client, "hung", tenant).split(":")[1])  # type: ignore[arg-type]
        key = PairKeys.of("hung", tenant).meta
        client.get(key)  # (its connection made before: the call, not a handshake, waits)
        admin = partial_cluster.admin_client(port, timeout=5.0)
        gets, handshakes = _runs(admin)
        with _hung_master(partial_cluster, port), \
                pytest.raises(redis.exceptions.TimeoutError):
            client.get(key)
        eventually(lambda: _runs(admin)[0] > gets, timeout=5,
                   what="the GET sent while the master was stopped")
        time.sleep(0.5)  # (anything more it was sent comes with it)
        now_gets, now_handshakes = _runs(admin)
        assert now_gets == gets + 1
        # at most the slot map's refresh after the timeout may have asked this node; each
        # retry would have been a handshake more (eleven in all by redis-py's default)
        assert now_handshakes - handshakes <= 1
    finally:
        warm.close()
