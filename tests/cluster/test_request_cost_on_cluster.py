"""On a cluster: a pair's running leases are paged from its own slot (``started``, one
script per page read), and the queue's ready-tenant index lives on the queue's slot, kept
from Python beside pairs on every master (tests/integration/test_request_cost.py has the
single-server cases)."""

from __future__ import annotations

from typing import Any

from tests.integration import ack_pairs_scenarios
from tests.integration.test_request_cost import (  # noqa: F401  (run here on the cluster)
    test_a_claims_removal_never_loses_an_admission_that_raced_it,
)
from tests.support.cluster import node_of, tenants_on_every_node
from tierq.dal.warm_tier import PairKeys, QueueKeys
from tierq.logic import queues as queue_logic

QUEUE = "costs"


def index(valkey: Any) -> list[str]:
    return sorted(t.decode() for t in valkey.zrange(QueueKeys.ready_tenants(QUEUE), 0, -1))


def test_running_pages_and_views_on_every_master(make_tq, valkey):
    tq = make_tq()
    tenants = tenants_on_every_node(valkey, QUEUE)
    assert len({node_of(valkey, QUEUE, t) for t in tenants}) > 1
    tq.enqueue(QUEUE, [{"payload": i, "tenant": t} for i in range(150) for t in tenants[:2]])
    held = []
    for tenant in tenants[:2]:
        for _ in range(3):
            held += tq.claim(QUEUE, max=50, tenant=tenant, lease_seconds=600)
            tq.ctx.clock.advance(0.01)
    for tenant in tenants[:2]:
        seen = [queue_logic.lease_key(x)
                for x in queue_logic.pair_leases(tq.ctx, (QUEUE, tenant), window=7)]
        assert len(seen) == len(set(seen)) == 150 and seen == sorted(seen)
    assert len(tq.running(QUEUE)) == 300
    view = tq.get_queue(QUEUE)
    assert view.counts.leased == 300
    own = tq.tenant_queue(QUEUE, tenants[0])
    assert own.counts.leased == 150
    tq.ack(QUEUE, held)
    for tenant in tenants[:2]:
        assert valkey.zcard(PairKeys.of(QUEUE, tenant).started) == 0


def test_the_ready_tenant_index_beside_pairs_on_every_master(make_tq, valkey):
    tq = make_tq()
    tenants = tenants_on_every_node(valkey, QUEUE, per_node=2)
    tq.enqueue(QUEUE, [{"payload": 1, "tenant": t} for t in tenants])
    assert index(valkey) == sorted(tenants)
    got = tq.claim(QUEUE, max=len(tenants))
    assert sorted(t.tenant for t in got) == sorted(tenants)  # one each: fair
    assert tq.claim(QUEUE, max=5) == []
    assert index(valkey) == []  # every pair found empty, each on its own master
    # the index lost a tenant with work: the reaper's pass enters it again
    tq.enqueue(QUEUE, [{"payload": 2, "tenant": tenants[-1]}])
    valkey.zrem(QueueKeys.ready_tenants(QUEUE), tenants[-1])
    assert tq.claim(QUEUE, max=5) == []
    tq.run_reaper()
    assert index(valkey) == [tenants[-1]]
    assert [t.tenant for t in tq.claim(QUEUE, max=5)] == [tenants[-1]]


def test_the_reaper_removes_ended_entries_of_started_on_every_master(make_tq, valkey):
    """Ended leases' entries in the ``started`` index of pairs on every master: the
    reaper's passes remove them a slice a visit, the live leases' entries stay."""
    tq = make_tq()
    tenants = tenants_on_every_node(valkey, QUEUE)
    tq.enqueue(QUEUE, [{"payload": i, "tenant": t} for i in range(5) for t in tenants])
    for tenant in tenants:
        assert len(tq.claim(QUEUE, max=5, tenant=tenant, lease_seconds=600)) == 5
        valkey.zadd(PairKeys.of(QUEUE, tenant).started,
                    {f"gone-{i:04d}": 2**40 + i for i in range(600)})
    for _ in range(4):
        tq.run_reaper()
    for tenant in tenants:
        assert valkey.zcard(PairKeys.of(QUEUE, tenant).started) == 5


def test_only_a_push_into_an_empty_line_enters_its_tenant(make_tq, valkey, monkeypatch):
    """The index is in another slot: a push enters its tenant after itself (a call of its
    own) only when it found the pair's ready set empty; a line with work has it entered."""
    tq = make_tq()
    notes: list[Any] = []
    note = tq.ctx.warm.note_ready_tenants

    def counted(*args: Any) -> None:
        notes.append(args)
        note(*args)

    monkeypatch.setattr(tq.ctx.warm, "note_ready_tenants", counted)
    tq.enqueue(QUEUE, [{"payload": 1, "tenant": "a"}])
    assert len(notes) == 1 and index(valkey) == ["a"]
    tq.enqueue(QUEUE, [{"payload": 2, "tenant": "a"}])  # into a line with work
    assert len(notes) == 1 and index(valkey) == ["a"]
    assert tq.ack(QUEUE, tq.claim(QUEUE, max=5, tenant="a")).acked
    assert tq.claim(QUEUE, max=5) == [] and index(valkey) == []  # found empty: out
    tq.enqueue(QUEUE, [{"payload": 3, "tenant": "a"}])  # into the empty line again
    assert len(notes) == 2 and index(valkey) == ["a"]
    assert [t.payload for t in tq.claim(QUEUE, max=5)] == [3]


def test_an_ack_of_tenants_on_every_master_checks_each_lease(tq, valkey):
    """The ack's token checks go in one pipeline, split by master: every tenant's tasks are
    acked, and a lease that ended already is refused whichever master holds it."""
    tenants = tenants_on_every_node(valkey, QUEUE, per_node=2)
    tq.enqueue(QUEUE, [{"payload": i, "tenant": t} for t in tenants for i in range(2)])
    got = tq.claim(QUEUE, max=4 * len(tenants))
    assert {t.tenant for t in got} == set(tenants) and len(got) == 2 * len(tenants)
    first = [next(t for t in got if t.tenant == tenant) for tenant in tenants]
    assert len(tq.ack(QUEUE, first).acked) == len(tenants)
    result = tq.ack(QUEUE, got)  # the rest, and again the ones acked already
    assert len(result.acked) == len(tenants)
    assert sorted(str(r.id) for r in result.rejected) == sorted(str(t.id) for t in first)
    assert {r.reason for r in result.rejected} == {"not_owner"}


def test_an_ack_of_tenants_on_every_master_drops_every_lease(tq, valkey):
    """The drops of every pair go in one pipeline, split by master: every lease is dropped,
    each pair's acks counted, the max_leased reservations given back once the drops
    answered, a waiter of each tenant woken and each group's next task pushed."""
    tenants = tenants_on_every_node(valkey, ack_pairs_scenarios.QUEUE, per_node=2)
    assert len({node_of(valkey, ack_pairs_scenarios.QUEUE, t) for t in tenants}) == \
        len(valkey.get_primaries())
    ack_pairs_scenarios.an_ack_of_tenants_drops_every_lease(tq, valkey, tenants)


def test_an_ack_of_tenants_on_every_master_after_the_scripts_were_lost(tq, valkey):
    tenants = tenants_on_every_node(valkey, ack_pairs_scenarios.QUEUE)
    ack_pairs_scenarios.an_ack_of_tenants_drops_every_lease(tq, valkey, tenants,
                                                            scripts_lost=True)
