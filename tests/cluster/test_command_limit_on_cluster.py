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


def test_calls_of_many_items_are_sent_in_parts_within_the_limit(make_tq):
    scenarios.large_calls_stay_under_the_limit(make_tq)
