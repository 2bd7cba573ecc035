"""On a cluster: a claim naming no tenant sends its first pass's pops in one pipeline, one
round trip per master (tests/integration/test_claim_round_trips.py has the single-server
cases), with the same fair shares as a pop at a time; a pop one master refuses fails the
claim only once every other master's pops are given back."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.enqueue_round_trips import Wire
from tests.support.cluster import node_of, tenants_on_every_node
from tierq.dal.warm_tier import PairKeys

QUEUE = "pipe"


def counted_claim(tq, valkey, tenants: list[str], **claim: int
                  ) -> tuple[dict[str, str], Wire, list]:
    """A claim of ``QUEUE`` naming no tenant with its sends counted, after one task of
    each master's first tenant was claimed (not counted: the script loaded on every
    master). Returns (that tenant by master, the wire, the claimed tasks)."""
    loaded = {node_of(valkey, QUEUE, t): t for t in reversed(tenants)}
    for tenant in loaded.values():
        assert len(tq.claim(QUEUE, max=1, tenant=tenant)) == 1
    wire = Wire()
    wire.names = {s.sha.encode(): name for name, s in tq.ctx.warm.scripts.items()}
    with wire.installed():
        wire.on = True
        got = tq.claim(QUEUE, **claim)
        wire.on = False
    return loaded, wire, got


def test_a_claim_over_tenants_on_every_master_pops_each_master_once(make_tq, valkey):
    tq = make_tq()
    tenants = tenants_on_every_node(valkey, QUEUE, per_node=4)
    masters = {node_of(valkey, QUEUE, t) for t in tenants}
    assert len(masters) == 3 and len(tenants) == 12
    tq.enqueue(QUEUE, [{"payload": i, "tenant": t} for t in tenants for i in range(20)])
    loaded, wire, got = counted_claim(tq, valkey, tenants, max=120)
    assert len(got) == 120
    assert Counter(t.tenant for t in got) == dict.fromkeys(tenants, 10)  # a share each
    assert wire.commands["claim"] == 12
    # the index's window on the queue's master, then one send per master
    assert wire.sends == 1 + len(masters), (wire.sends, dict(wire.commands))
    for tenant in tenants:  # (each tenant's next ten, in its order)
        first = 1 if tenant in loaded.values() else 0
        assert [t.payload for t in got if t.tenant == tenant] == list(range(first, first + 10))


def test_time_limits_ride_in_each_masters_pops(make_tq, valkey):
    """Tasks with a time limit (their queue's, or their own) get it in their pair's claim
    script: still one send per master, and each lease is limited on its pair's slot."""
    tq = make_tq()
    tq.put_queue(QUEUE, {"timeout_seconds": 30})
    tenants = tenants_on_every_node(valkey, QUEUE, per_node=2)
    masters = {node_of(valkey, QUEUE, t) for t in tenants}
    tq.enqueue(QUEUE, [{"payload": i, "tenant": t, "timeout_seconds": 5 if i % 2 else None}
                       for t in tenants for i in range(20)])
    _, wire, got = counted_claim(tq, valkey, tenants, max=60, lease_seconds=600)
    assert len(got) == 60 and wire.commands["claim"] == 6
    assert wire.sends == 1 + len(masters), (wire.sends, dict(wire.commands))
    for task in got:
        k = PairKeys.of(QUEUE, task.tenant)
        limit = valkey.zscore(k.limits, f"{task.id}|{task.lease_token}")
        assert limit == valkey.zscore(k.leased, f"{task.id}|{task.lease_token}")
        assert task.lease_expires_at.timestamp() * 1000 == pytest.approx(limit, abs=1)
        assert task.timeout_seconds == (5 if task.payload % 2 else 30)


def test_a_pop_one_master_refuses_fails_that_pair_alone(make_tq, valkey):
    """The other masters' pairs answer in the same pipeline: their tasks come, each leased
    once (logic/claim_isolation.py)."""
    tq = make_tq()
    tenants = tenants_on_every_node(valkey, QUEUE)
    tq.enqueue(QUEUE, [{"payload": i, "tenant": t} for t in tenants for i in range(5)])
    bad = tenants[-1]
    ready = PairKeys.of(QUEUE, bad).ready
    valkey.delete(ready)
    valkey.set(ready, "not a sorted set")  # (its pop: WRONGTYPE)
    got = tq.claim(QUEUE, max=15)
    assert sorted((t.tenant, t.payload) for t in got) == \
        sorted((t, i) for t in tenants[:-1] for i in range(5))
    for tenant in tenants[:-1]:
        assert valkey.zcard(PairKeys.of(QUEUE, tenant).leased) == 5
        assert valkey.zcard(PairKeys.of(QUEUE, tenant).ready) == 0
    assert {t.attempt for t in got} == {1}
