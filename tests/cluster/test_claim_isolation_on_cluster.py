"""A master of the cluster down fails only its own tenants' part of a claim over several
tenants (logic/claim_isolation.py): the tenants on the masters that answer get their tasks,
and this process's later claims pass the down master's tenants over for a while. (The
master of the queue's ready-tenant index down: test_claims_with_the_index_down.py.)"""

from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Any

from tests.cluster.test_maintenance_with_master_down import _hung_master
from tests.support.cluster import node_of, serve_own_slots, tenants_on_every_node
from tests.support.polling import eventually
from tierq.config import Settings
from tierq.dal.warm_tier import PairKeys, QueueKeys, WarmTier, reservation_of
from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.local.services.process import wait_pid_gone
from tierq.logic import claim as claim_logic
from tierq.logic.context import OffsetClock
from tierq.models import ClaimRequest

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
        # a master other than the one of the queue's ready-tenant index (that one down:
        # test_claims_with_the_index_down.py)
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
        # every lease on the masters that answered is one a claim answered with
        assert sum(client.zcard(PairKeys.of(QUEUE, t).leased) for t in live) == len(got)
        # the down master is passed over: none of its tenants is asked meanwhile
        assert master in tq.ctx.claim_masters_down
        assert tq.claim(QUEUE, max=len(tenants)) == []
        # a claim pinned to one of its tenants still answers with the outage
        assert _refused(tq, sorted(on_down)[-1])


def test_one_claim_asks_a_hung_master_once(partial_cluster, app_database_url,
                                           clean_stores) -> None:
    """A master that accepts and never answers (SIGSTOP) holds three tenants at the head of
    a claim's rotation: the claim waits for the first one's pop alone, then passes over
    the master's other pairs and takes a live tenant's task."""
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, settings_cache_seconds=0)
    short = f"{partial_cluster.url}?socket_timeout=0.3&socket_connect_timeout=0.3"
    with Tierq(settings=settings, clock=OffsetClock(),
               warm=WarmTier.from_url(short, cluster=True)) as tq:
        client: Any = tq.warm.client
        tenants = tenants_on_every_node(client, QUEUE, per_node=3)
        index = client.get_node_from_key(QueueKeys.ready_tenants(QUEUE))
        master = next(node_of(client, QUEUE, t) for t in tenants
                      if node_of(client, QUEUE, t) != f"{index.host}:{index.port}")
        on_hung = [t for t in tenants if node_of(client, QUEUE, t) == master]
        live = [t for t in tenants if t not in on_hung]
        tq.enqueue(QUEUE, [{"payload": i, "tenant": t} for t in tenants for i in range(2)])
        tried: list[tuple[str, bool]] = []
        pop = tq.ctx.warm.claim_limited

        def counted(queue: str, tenant: str, **kw: Any) -> Any:
            try:
                out = pop(queue, tenant, **kw)
            except Exception:
                tried.append((tenant, False))
                raise
            tried.append((tenant, True))
            return out

        tq.ctx.warm.claim_limited = counted  # type: ignore[method-assign]
        with _hung_master(partial_cluster, int(master.split(":")[1])):
            tq.ctx.rotation[QUEUE] = 0
            got = claim_logic.claim(tq.ctx, QUEUE, ClaimRequest(max=1), on_hung + live)
        assert [t for t, answered in tried if not answered] == on_hung[:1]
        assert [t.tenant for t in got] == live[:1]


def test_a_failed_pop_under_max_leased_leaves_no_unit_held_twice(make_tq, valkey) -> None:
    """A pop under the queue-wide limit fails after its script wrote leases (its lease_of
    key of the wrong type): the claim's later pops number their leases past its units,
    so no two leases hold one unit of max_leased (logic/claim_limits.py)."""
    queue = "gatefail"
    tq = make_tq()
    tq.put_queue(queue, {"max_leased": 9, "lease_seconds": 60})
    a, b, c = tenants_on_every_node(valkey, queue)
    tq.enqueue(queue, [{"payload": i, "tenant": t} for t in (a, b, c) for i in range(3)])
    lease_of = PairKeys.of(queue, b).lease_of
    valkey.delete(lease_of)
    valkey.set(lease_of, "not a hash")
    for _ in range(3):
        tq.claim(queue, max=9)
    units: Counter[str] = Counter()
    for tenant in (a, b, c):
        for member in valkey.zrange(PairKeys.of(queue, tenant).leased, 0, -1):
            units[reservation_of(member.decode().split("|", 1)[1])] += 1
    assert units and max(units.values()) == 1, units
