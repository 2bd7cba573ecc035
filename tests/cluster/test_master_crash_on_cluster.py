"""A master of the cluster crashes: calls for the pairs it served answer Unavailable (a 503,
never a 500), and so does every call once the other masters declare the cluster down. Nothing
committed is lost: when the cache comes back empty, the reaper's reconciler dispatches every
task again, in order."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import count_rows, drain
from tests.support.cluster import node_of, tenants_on_every_node
from tests.support.polling import eventually
from tierq.config import Settings
from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.local.services import PrivateValkeyCluster
from tierq.local.services.process import wait_pid_gone
from tierq.logic.context import OffsetClock
from tierq.logic.idempotency import claim_in_valkey

QUEUE = "crash"
PER_TENANT = 30


@pytest.fixture
def crashing_cluster(session_dir: Path) -> Iterator[PrivateValkeyCluster]:
    """A cluster of its own (the session's stays whole) whose masters call a silent one
    failed after a second."""
    nodes = PrivateValkeyCluster(session_dir / "crash", node_timeout_ms=1000)
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


def _cluster_down(nodes: PrivateValkeyCluster, port: int) -> bool:
    client = nodes.admin_client(port)
    try:
        return b"cluster_state:fail" in client.execute_command("CLUSTER", "INFO")
    finally:
        client.close()


def _claim_refused(tq: Tierq, tenant: str) -> bool:
    try:
        tq.claim(QUEUE, tenant=tenant, max=1)
    except Unavailable as exc:
        assert "127.0.0.1" not in str(exc)  # where the cache lives goes to the log only
        return True
    return False


def test_a_crashed_master_answers_unavailable_and_loses_nothing(crashing_cluster, database_url,
                                                                 clean_stores, pg):
    settings = Settings(database_url=database_url, valkey_url=crashing_cluster.url,
                        valkey_cluster=True, warm_max=20, reconcile_grace_seconds=30,
                        settings_cache_seconds=0)
    with Tierq(settings=settings, clock=OffsetClock()) as tq:
        tenants = tenants_on_every_node(tq.warm.client, QUEUE)  # type: ignore[arg-type]
        tq.enqueue(QUEUE, [{"payload": [t, i], "tenant": t}
                           for i in range(PER_TENANT) for t in tenants])
        expected = {(t, i) for t in tenants for i in range(PER_TENANT)}
        crashed = tenants[0]
        port = int(node_of(tq.warm.client, QUEUE, crashed).split(":")[1])  # type: ignore[arg-type]
        pid = crashing_cluster.node_pids()[crashing_cluster.ports.index(port)]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert wait_pid_gone(pid, 10)

        assert _claim_refused(tq, crashed)
        try:  # refused before any write, or accepted: then it must be delivered like the rest
            tq.enqueue(QUEUE, [{"payload": [crashed, PER_TENANT], "tenant": crashed}])
            expected.add((crashed, PER_TENANT))
        except Unavailable:
            pass
        assert count_rows(pg, QUEUE) == len(expected)
        survivors = [p for p in crashing_cluster.ports if p != port]
        nodes = crashing_cluster
        eventually(lambda: all(_cluster_down(nodes, p) for p in survivors),  # CLUSTERDOWN
                   timeout=20, what="the other masters never noticed")
        for tenant in tenants[:2]:  # the crashed master's, and another's
            assert _claim_refused(tq, tenant), tenant
        with pytest.raises(Unavailable):  # an ack's Idempotency-Key record: 503, not a 500
            claim_in_valkey(tq.ctx, b"ack|admin|crash|key", b"fingerprint")

        crashing_cluster.restart()  # every master back, empty, on the same ports
        assert crashing_cluster.url == settings.valkey_url
        tq.ctx.clock.advance(31)  # past the reconcile grace period
        tq.run_reaper()
        delivered = [tuple(t.payload) for t in drain(tq, QUEUE, batch=7)]
        assert sorted(delivered) == sorted(expected)  # each once
        for tenant in tenants:
            order = [i for t, i in delivered if t == tenant]
            assert order == sorted(order), tenant
        assert count_rows(pg, QUEUE) == 0
