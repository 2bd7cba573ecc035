"""The master of a queue's ready-tenant index down stops no claim of the tenants whose
masters answer (logic/ready_tenants.py, its second table): a claim naming no tenant reads
its window from the queue's registered tenants, and the index's master is set aside, so a
hung one costs one socket timeout per period, not one per claim or enqueue."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from tests.cluster.test_maintenance_with_master_down import _hung_master
from tests.support.cluster import node_of, serve_own_slots, tenants_on_every_node
from tests.support.polling import eventually
from tierq.config import Settings
from tierq.dal.warm_tier import QueueKeys, WarmTier
from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.local.services.process import wait_pid_gone
from tierq.logic.context import OffsetClock

QUEUE = "qindexdown"


def _index_master(client: Any) -> str:
    node = client.get_node_from_key(QueueKeys.ready_tenants(QUEUE))
    return f"{node.host}:{node.port}"


def _index_refused(tq: Tierq) -> bool:
    try:
        tq.warm.ready_tenants_after(QUEUE, None, 1)
    except Unavailable:
        return True
    return False


def _counted(calls: list[str], name: str, call: Any) -> Any:
    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(name)
        return call(*args, **kw)
    return counted


def test_claims_go_on_with_the_index_master_killed(partial_cluster, app_database_url,
                                                   clean_stores) -> None:
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, settings_cache_seconds=0)
    with Tierq(settings=settings, clock=OffsetClock()) as tq:
        client: Any = tq.warm.client
        tenants = tenants_on_every_node(client, QUEUE, per_node=2)
        master = _index_master(client)
        live = [t for t in tenants if node_of(client, QUEUE, t) != master]
        tq.enqueue(QUEUE, [{"payload": [t, i], "tenant": t} for t in tenants for i in range(3)])
        serve_own_slots(partial_cluster)
        port = int(master.split(":")[1])
        pid = partial_cluster.node_pids()[partial_cluster.ports.index(port)]
        os.kill(pid, signal.SIGKILL)
        assert wait_pid_gone(pid, 10)
        eventually(lambda: _index_refused(tq), timeout=20, what="the index still answers")
        # an enqueue of a live tenant during the outage is claimed too
        late = live[0]
        tq.enqueue(QUEUE, [{"payload": [late, 3], "tenant": late}])
        got: list[Any] = []
        for _ in range(len(tenants)):  # a full turn of the rotation
            got.extend(tq.claim(QUEUE, max=len(tenants)))
        assert sorted((t.tenant, t.payload[1]) for t in got) == sorted(
            [(t, i) for t in live for i in range(3)] + [(late, 3)])
        assert master in tq.ctx.claim_masters_down
        assert len(tq.ack(QUEUE, got).acked) == len(got)


def test_a_hung_index_master_is_asked_once_a_period(partial_cluster, app_database_url,
                                                    clean_stores) -> None:
    """SIGSTOP: every call to the index's master waits the socket timeout. The first claim
    waits it once; later claims and enqueues make no call to that master meanwhile."""
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, settings_cache_seconds=0)
    short = f"{partial_cluster.url}?socket_timeout=0.3&socket_connect_timeout=0.3"
    with Tierq(settings=settings, clock=OffsetClock(),
               warm=WarmTier.from_url(short, cluster=True)) as tq:
        client: Any = tq.warm.client
        tenants = tenants_on_every_node(client, QUEUE, per_node=2)
        master = _index_master(client)
        live = [t for t in tenants if node_of(client, QUEUE, t) != master]
        tq.enqueue(QUEUE, [{"payload": i, "tenant": t} for t in live for i in range(2)])
        calls: list[str] = []
        warm: Any = tq.ctx.warm
        for name in ("ready_tenants_after", "note_ready_tenants", "forget_ready_tenants"):
            setattr(warm, name, _counted(calls, name, getattr(warm, name)))
        with _hung_master(partial_cluster, int(master.split(":")[1])):
            started = time.monotonic()
            got = tq.claim(QUEUE, max=len(live) * 2)
            first = time.monotonic() - started
            assert calls == ["ready_tenants_after"]
            for _ in range(3):
                got += tq.claim(QUEUE, max=len(live) * 2)
                # an enqueue into an emptied pair would enter its tenant in the index
                tq.enqueue(QUEUE, [{"payload": 9, "tenant": live[0]}])
            assert calls == ["ready_tenants_after"], calls
        assert sorted(t.tenant for t in got if t.payload != 9) == \
            sorted(t for t in live for _ in range(2))
        assert first < 5.0  # (one socket timeout, not one per tenant or per retry)
