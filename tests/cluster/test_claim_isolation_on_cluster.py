"""A master of the cluster down fails only its own tenants' part of a claim over several
tenants (logic/claim_isolation.py): the tenants on the masters that answer get their tasks,
and this process's later claims pass the down master's tenants over for a while. (The
master of the queue's ready-tenant index is another: down, it fails every such claim.)"""

from __future__ import annotations

import os
import signal
from typing import Any

from tests.support.cluster import node_of, serve_own_slots, tenants_on_every_node
from tests.support.polling import eventually
from tierq.config import Settings
from tierq.dal.warm_tier import QueueKeys
from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.local.services.process import wait_pid_gone
from tierq.logic.context import OffsetClock

QUEUE = "qwdown"


def _refused(tq: Tierq, tenant: str) -> bool:
    try:
        tq.claim(QUEUE, tenant=tenant, max=1)
    except Unavailable:
        return True
    return False


def test_a_queue_wide_claim_goes_on_past_a_stopped_master(partial_cluster, app_database_url,
                                                          clean_stores) -> None:
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, settings_cache_seconds=0)
    with Tierq(settings=settings, clock=OffsetClock()) as tq:
        client: Any = tq.warm.client
        tenants = tenants_on_every_node(client, QUEUE, per_node=2)
        # a master other than the one of the queue's ready-tenant index (without it no
        # claim over the queue's tenants can start: logic/ready_tenants.py)
        index = client.get_node_from_key(QueueKeys.ready_tenants(QUEUE))
        down = next(t for t in tenants
                    if node_of(client, QUEUE, t) != f"{index.host}:{index.port}")
        master = node_of(client, QUEUE, down)
        on_down = {t for t in tenants if node_of(client, QUEUE, t) == master}
        live = [t for t in tenants if t not in on_down]
        tq.enqueue(QUEUE, [{"payload": [t, i], "tenant": t} for t in tenants for i in range(5)])
        serve_own_slots(partial_cluster)
        port = int(master.split(":")[1])
        pid = partial_cluster.node_pids()[partial_cluster.ports.index(port)]
        os.kill(pid, signal.SIGKILL)
        assert wait_pid_gone(pid, 10)
        eventually(lambda: _refused(tq, down), timeout=20, what="the master still answers")
        tq.ctx.claim_set_aside.clear()  # (the pinned claims above set the pair aside)
        tq.ctx.claim_masters_down.clear()
        got: list[Any] = []
        for _ in range(len(tenants)):  # a full turn of the rotation
            got.extend(tq.claim(QUEUE, max=len(tenants)))
        assert sorted((t.tenant, t.payload[1]) for t in got) == \
            sorted((t, i) for t in live for i in range(5))
        # the down master is passed over: none of its tenants is asked meanwhile
        assert master in tq.ctx.claim_masters_down
        assert tq.claim(QUEUE, max=len(tenants)) == []
        # a claim pinned to one of its tenants still answers with the outage
        assert _refused(tq, sorted(on_down)[-1])
