"""Nothing is stranded when the cache is full, on a cluster: each master's free memory is
read from that master (``tiering.memory_room``), so a pair's cold line larger than its
master's free memory drains through claims as acks free it, while a pair on another master
is promoted as usual."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.helpers import count_state
from tests.support.cluster import node_of, tenants_on_every_node
from tierq.logic import claim as claim_logic
from tierq.logic import tiering

MB = 1_000_000
ROOM = 5_500_000  # the full master's free memory: room for about 27 of the 60 tasks below
PAYLOAD = "x" * 200_000  # 200 KB tasks
QUEUE = "big"


@pytest.fixture
def full_master(valkey: Any, cluster: Any) -> Iterator[tuple[str, str]]:
    """(the tenant whose pair sits on the master left 5.5 MB of room, a tenant on another
    master); the master's settings are restored afterwards (CONFIG: the admin user's). The
    room is counted from what the master uses now: scripts and allocator pages of the
    session's earlier cluster tests stay after their flush."""
    tenants = tenants_on_every_node(valkey, QUEUE)
    small, other = tenants[0], tenants[1]
    port = node_of(valkey, QUEUE, small).rsplit(":", 1)[1]
    with cluster.admin_client(int(port)) as admin:
        before = admin.config_get("maxmemory*")
        used = int(admin.info("memory")["used_memory"])
        assert used < 20 * MB  # (an empty master: flushed between tests)
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", used + ROOM)
        try:
            yield small, other
        finally:
            admin.config_set("maxmemory", before["maxmemory"])
            admin.config_set("maxmemory-policy", before["maxmemory-policy"])


def test_a_masters_cold_line_drains_as_claims_free_it(make_tq: Any, pg: Any,
                                                      full_master: tuple[str, str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    tenant, other = full_master
    monkeypatch.setattr(claim_logic, "LOW_WATER_EVERY", 0.0)
    monkeypatch.setitem(tiering._last_blob_sizes, (QUEUE, tenant), 100)
    tq = make_tq(tenant_warm_max_bytes=0)
    tq.ctx.warm.forget_memory()
    for start in range(0, 60, 10):
        tq.enqueue(QUEUE, [{"payload": [start + i, PAYLOAD], "tenant": tenant}
                           for i in range(10)])
    # the other master has room: the other tenant's tasks are all warm
    out = tq.enqueue(QUEUE, [{"payload": [i, PAYLOAD], "tenant": other} for i in range(10)])
    assert {o.state for o in out} == {"warm"}
    cold = count_state(pg, QUEUE, "cold")
    assert 20 < cold < 60
    seen: list[int] = []
    for _ in range(200):
        got = tq.claim(QUEUE, max=10, tenant=tenant)  # raises WarmTierFull were it stranded
        if not got:
            break
        seen += [t.payload[0] for t in got]
        assert len(tq.ack(QUEUE, got).acked) == len(got)
    assert seen == list(range(60))
    assert count_state(pg, QUEUE, "cold") == 0
