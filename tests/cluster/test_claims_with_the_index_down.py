"""The master of a queue's ready-tenant index down stops no claim of the tenants whose
masters answer (logic/ready_tenants.py, its second table): a claim naming no tenant reads
its windows from the queue's registered tenants, one after another, and the index's master
is remembered down, so a hung one costs one socket timeout per period, not one per claim or
enqueue; the entries made meanwhile are written once it answers."""

from __future__ import annotations

import os
import signal
from typing import Any

from tests.cluster.test_maintenance_with_master_down import _hung_master
from tests.support.cluster import node_of, serve_own_slots, tenants_on_every_node
from tests.support.polling import eventually
from tierq.config import Settings
from tierq.dal.warm_tier import QueueKeys, WarmTier
from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.local.services.process import wait_pid_gone
from tierq.logic import ready_tenants
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


def _kill(cluster: Any, master: str) -> None:
    serve_own_slots(cluster)
    pid = cluster.node_pids()[cluster.ports.index(int(master.split(":")[1]))]
    os.kill(pid, signal.SIGKILL)
    assert wait_pid_gone(pid, 10)


def _counted(calls: list[str], name: str, call: Any) -> Any:
    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(name)
        return call(*args, **kw)
    return counted


def _settings(cluster: Any, app_database_url: str) -> Settings:
    return Settings(database_url=app_database_url, valkey_url=cluster.url,
                    valkey_cluster=True, settings_cache_seconds=0)


def test_claims_go_on_with_the_index_master_killed(partial_cluster, app_database_url,
                                                   clean_stores) -> None:
    with Tierq(settings=_settings(partial_cluster, app_database_url),
               clock=OffsetClock()) as tq:
        client: Any = tq.warm.client
        tenants = tenants_on_every_node(client, QUEUE, per_node=2)
        master = _index_master(client)
        live = [t for t in tenants if node_of(client, QUEUE, t) != master]
        fresh = live[0]  # no task before the outage: its first push enters it (kept)
        tq.enqueue(QUEUE, [{"payload": [t, i], "tenant": t}
                           for t in tenants if t != fresh for i in range(3)])
        _kill(partial_cluster, master)
        eventually(lambda: _index_refused(tq), timeout=20, what="the index still answers")
        tq.enqueue(QUEUE, [{"payload": [fresh, i], "tenant": fresh} for i in range(3)])
        got: list[Any] = []
        for _ in range(len(tenants)):  # a full turn of the rotation
            got.extend(tq.claim(QUEUE, max=len(tenants)))
        assert sorted((t.tenant, t.payload[1]) for t in got) == sorted(
            (t, i) for t in live for i in range(3))
        assert master in tq.ctx.ready_index_down and master in tq.ctx.claim_masters_down
        assert tq.ctx.ready_index_pending == {QUEUE: {fresh}}
        assert len(tq.ack(QUEUE, got).acked) == len(got)


def test_windows_of_registered_tenants_go_round_in_few_claims(
        partial_cluster, app_database_url, clean_stores) -> None:
    """100 registered tenants, one with work, far from the turn: the windows follow one
    another, so a claim reaches it within the 100 names (two windows of 64), not one name
    further per claim."""
    with Tierq(settings=_settings(partial_cluster, app_database_url),
               clock=OffsetClock()) as tq:
        client: Any = tq.warm.client
        master = _index_master(client)
        names = [f"w{i:03d}" for i in range(100)]
        tq.enqueue(QUEUE, [{"payload": t, "tenant": t} for t in names])
        idle: list[Any] = []
        while len(idle) < len(names):
            idle.extend(tq.claim(QUEUE, max=100))
        tq.ack(QUEUE, idle)
        busy = next(t for t in names[40:] if node_of(client, QUEUE, t) != master)
        tq.enqueue(QUEUE, [{"payload": i, "tenant": busy} for i in range(3)])
        _kill(partial_cluster, master)
        eventually(lambda: _index_refused(tq), timeout=20, what="the index still answers")
        tq.ctx.claim_turns[QUEUE] = names[names.index(busy) + 1]  # busy: last in turn
        claims = 0
        got: list[Any] = []
        while not got and claims < 10:
            got = tq.claim(QUEUE, max=3)
            claims += 1
        assert sorted(t.payload for t in got) == [0, 1, 2]
        assert claims <= 3


def test_a_hung_index_master_is_asked_once_a_period(partial_cluster, app_database_url,
                                                    clean_stores) -> None:
    """SIGSTOP: every call to the index's master waits the socket timeout. The first claim
    waits it once; later claims and enqueues make no call to the index, nor pop a pair of
    that master; the entry of a tenant first pushed meanwhile is written once it answers."""
    short = f"{partial_cluster.url}?socket_timeout=0.3&socket_connect_timeout=0.3"
    with Tierq(settings=_settings(partial_cluster, app_database_url), clock=OffsetClock(),
               warm=WarmTier.from_url(short, cluster=True)) as tq:
        client: Any = tq.warm.client
        tenants = tenants_on_every_node(client, QUEUE, per_node=2)
        master = _index_master(client)
        on_hung = [t for t in tenants if node_of(client, QUEUE, t) == master]
        live = [t for t in tenants if t not in on_hung]
        fresh = live[0]
        tq.enqueue(QUEUE, [{"payload": i, "tenant": t}
                           for t in tenants if t != fresh for i in range(2)])
        calls: list[str] = []
        warm: Any = tq.ctx.warm
        for name in ("ready_tenants_after", "note_ready_tenants", "forget_ready_tenants"):
            setattr(warm, name, _counted(calls, name, getattr(warm, name)))
        popped: list[str] = []
        pop = warm.claim_limited
        warm.claim_limited = lambda queue, tenant, **kw: (popped.append(tenant),
                                                          pop(queue, tenant, **kw))[1]
        with _hung_master(partial_cluster, int(master.split(":")[1])):
            got = tq.claim(QUEUE, max=len(tenants) * 2)
            for _ in range(3):
                got += tq.claim(QUEUE, max=len(tenants) * 2)
                tq.enqueue(QUEUE, [{"payload": 9, "tenant": fresh}])
            assert calls == ["ready_tenants_after"], calls
            assert not set(popped) & set(on_hung)
        assert sorted(t.tenant for t in got if t.payload != 9) == \
            sorted(t for t in live if t != fresh for _ in range(2))
        assert fresh in {t.tenant for t in got}
        # the period ends (as after SET_ASIDE_SECONDS): the next entry of the queue writes
        # the kept one with it
        assert tq.ctx.ready_index_pending == {QUEUE: {fresh}}
        tq.ctx.ready_index_down.clear()
        tq.ctx.claim_masters_down.clear()
        tq.ack(QUEUE, got)
        newcomer = next(t for t in live if t != fresh)
        tq.claim(QUEUE, max=100, tenant=newcomer)  # (its line emptied: its push enters it)
        tq.enqueue(QUEUE, [{"payload": 1, "tenant": newcomer}])
        index = {t.decode() for t in client.zrange(QueueKeys.ready_tenants(QUEUE), 0, -1)}
        assert {fresh, newcomer} <= index
        assert not tq.ctx.ready_index_pending


def test_a_registered_window_wraps_round_in_the_database_order(
        partial_cluster, app_database_url, clean_stores) -> None:
    with Tierq(settings=_settings(partial_cluster, app_database_url),
               clock=OffsetClock()) as tq:
        names = ["C", "a", "b", "d", "e"]
        tq.enqueue(QUEUE, [{"payload": 1, "tenant": t} for t in names])
        order = [t for _, t in tq.ctx.store.pairs_page((QUEUE, ""), 10, tenant=None,
                                                       queue=QUEUE)]
        after = order[2]
        window = ready_tenants._registered_after(tq.ctx, QUEUE, after, 10)
        assert window == order[3:] + order[:3]
        assert ready_tenants._registered_after(tq.ctx, QUEUE, after, 4) == order[3:] + order[:2]
        assert ready_tenants._registered_after(tq.ctx, QUEUE, None, 2) == order[:2]
