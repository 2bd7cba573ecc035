"""WarmTier.ping on a single server asks on the connection its calls use
(dal/direct_calls.py): a worker that pings before its loop has that connection made."""

from __future__ import annotations

import pytest

from tierq.engine import Tierq


def test_a_ping_opens_the_connection_the_calls_use(tq: Tierq, valkey_cluster: bool) -> None:
    if valkey_cluster:
        pytest.skip("a cluster's calls go through its client's per-node pools")
    calls = tq.warm.calls
    assert calls is not None and calls._open == []
    assert tq.warm.ping() is True
    opened = list(calls._open)
    assert len(opened) == 1
    tq.enqueue("p", [{"payload": 1}])
    got = tq.claim("p", max=1)
    assert len(tq.ack("p", got).acked) == 1
    assert calls._open == opened  # (the calls used the ping's connection)
