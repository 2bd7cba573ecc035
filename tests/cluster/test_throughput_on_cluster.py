"""Throughput counts on a cluster: the tests of tests/integration/test_throughput.py run here
as they are, and tenants on every master count in their own pair's slot while the queue's
view sums them from the queue's index (a slot of its own)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from tests.integration.test_throughput import (  # noqa: F401  (run here on the cluster)
    test_a_count_valkey_refuses_never_fails_the_ack,
    test_a_delayed_task_counts_when_it_is_enqueued,
    test_buckets_older_than_15_minutes_are_dropped,
    test_counts_right_after_enqueue_and_ack_bursts,
    test_only_created_tasks_and_accepted_acks_count,
    test_scripts_the_server_forgot_are_loaded_again,
    test_the_first_count_of_a_second_renews_the_key_s_life,
    test_the_tenant_index_names_the_tenants_counted,
)
from tests.support.cluster import node_of, serve_own_slots, tenants_on_every_node
from tests.support.stores import TierqFactory
from tierq.config import Settings
from tierq.dal.throughput import rate_key, tenants_key
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.local.services.process import wait_pid_gone
from tierq.logic.context import OffsetClock

QUEUE = "tput"


def test_tenants_on_every_master_count_in_their_own_slot(make_tq: TierqFactory,
                                                       valkey: Any) -> None:
    tq = make_tq()
    tenants = tenants_on_every_node(valkey, QUEUE, per_node=2)
    assert len({node_of(valkey, QUEUE, t) for t in tenants}) == 3
    for i, tenant in enumerate(tenants):
        tq.enqueue(QUEUE, [{"payload": n, "tenant": tenant} for n in range(10 + i)])
    # one ack across every tenant: each pair's lease drop carries its own count
    tasks = [t for tenant in tenants for t in tq.claim(QUEUE, max=3 + tenants.index(tenant),
                                                      tenant=tenant)]
    assert len(tq.ack(QUEUE, tasks).acked) == len(tasks)

    for i, tenant in enumerate(tenants):
        # the counts live in the pair's slot, on the pair's master
        assert valkey.keyslot(rate_key(QUEUE, tenant)) == \
            valkey.keyslot(PairKeys.of(QUEUE, tenant).ready)
        one = tq.throughput(QUEUE, tenant)
        assert (one.enqueued_total, one.acked_total) == (10 + i, 3 + i)
    whole = tq.throughput(QUEUE)
    n = len(tenants)
    assert whole.tenants == n
    assert whole.enqueued_total == sum(10 + i for i in range(n))
    assert whole.acked_total == sum(3 + i for i in range(n))
    assert sum(whole.enqueued[-30:]) == whole.enqueued_total
    assert valkey.keyslot(tenants_key(QUEUE)) not in {
        valkey.keyslot(rate_key(QUEUE, t)) for t in tenants}
    assert sorted(tq.ctx.warm.throughput.noted_tenants(QUEUE)) == sorted(tenants)


def test_the_queue_index_master_down_fails_no_enqueue_or_ack(partial_cluster: Any,
                                                             app_database_url: str,
                                                             clean_stores: None) -> None:
    """The queue's index of tenants lives in the queue's own slot: with its master stopped,
    enqueues and acks of a pair on another master go on and are counted; only the queue's
    summed view (which reads the index) is unavailable."""
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, settings_cache_seconds=0)
    with Tierq(settings=settings, clock=OffsetClock()) as tq:
        client = tq.warm.client
        index_node = client.get_node_from_key(tenants_key(QUEUE))
        index_at = f"{index_node.host}:{index_node.port}"
        tenant = next(t for t in (f"t{i}" for i in range(1000))
                      if node_of(client, QUEUE, t) != index_at)  # type: ignore[arg-type]
        tq.enqueue(QUEUE, [{"payload": i, "tenant": tenant} for i in range(5)])
        claimed = tq.claim(QUEUE, tenant=tenant, max=3)
        assert len(claimed) == 3

        serve_own_slots(partial_cluster)
        pid = partial_cluster.node_pids()[partial_cluster.ports.index(index_node.port)]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert wait_pid_gone(pid, 10)

    # a process that has not noted the tenant yet: its first count comes with a note
    with Tierq(settings=settings, clock=OffsetClock()) as fresh:
        assert len(fresh.ack(QUEUE, claimed).acked) == 3
        assert fresh.enqueue(QUEUE, [{"payload": 9, "tenant": tenant}])[0].outcome == "created"
        for _ in range(5):  # the clock too is read from the pair's own master
            mine = fresh.throughput(QUEUE, tenant)
            assert (mine.enqueued_total, mine.acked_total) == (6, 3)
        with pytest.raises(Unavailable):
            fresh.throughput(QUEUE)


def test_a_large_tenant_index_is_read_in_pages(make_tq: TierqFactory) -> None:
    """3,000 tenants noted (the index a hash table, not one listpack reply): every one is
    read back through the cluster client's ZSCAN pages, each once."""
    tq = make_tq()
    names = [f"t{i:04d}" for i in range(3000)]
    tq.ctx.warm.throughput.record(QUEUE, {t: (1, 0) for t in names})
    assert tq.ctx.warm.throughput.noted_tenants(QUEUE) == names
