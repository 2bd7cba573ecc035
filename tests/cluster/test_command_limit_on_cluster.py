"""No command over ElastiCache Serverless's 3,999 arguments through the cluster client
either: each node's connections check it (tests/integration/command_limit_scenarios.py)."""

from __future__ import annotations

from tests.integration import command_limit_scenarios as scenarios
from tierq.dal.command_limit import LimitedConnection, LimitedSSLConnection


def test_the_cluster_clients_nodes_refuse_a_command_over_the_limit(tq, valkey):
    nodes = tq.ctx.warm.client.get_nodes()
    assert len(nodes) == 3
    for node in nodes:
        pool = node.redis_connection.connection_pool
        assert issubclass(pool.connection_class, LimitedConnection | LimitedSSLConnection)
    scenarios.client_refuses_long_commands(tq, valkey)


def test_calls_of_many_items_are_sent_in_parts_within_the_limit(make_tq, pg):
    scenarios.large_calls_stay_under_the_limit(make_tq, pg)


def getkeys_calls(valkey, cluster) -> int:
    """COMMAND GETKEYS calls served so far, over the masters (INFO: the admin user's)."""
    calls = 0
    for node in valkey.get_primaries():
        admin = cluster.admin_client(node.port)
        try:
            calls += sum(int(stats["calls"]) for name, stats
                         in admin.info("commandstats").items() if "getkeys" in name.lower())
        finally:
            admin.close()
    return calls


def test_a_pipelines_scripts_are_routed_by_their_keys(tq, valkey, cluster):
    """redis-py's cluster pipeline asks a node for a script's keys (COMMAND GETKEYS: a
    round trip, and two arguments more than the script's call); the warm tier routes each
    script by its first key instead. An ack's pipeline (the lease drop and its count)
    sends none."""
    tq.enqueue("q", [{"payload": i} for i in range(3)])
    held = tq.claim("q", max=3)
    before = getkeys_calls(valkey, cluster)
    assert len(tq.ack("q", held).acked) == 3
    assert getkeys_calls(valkey, cluster) == before
    assert tq.claim("q") == []
