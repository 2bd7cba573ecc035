"""A keyed claim on the deployed shape: its record is one key (one slot) of a three-master
cluster, and its tasks' leases lie in the slots of tenants on every master; a repeat rebuilds
the tasks still leased from each of them and leases nothing more."""

from __future__ import annotations

from redis.cluster import RedisCluster

from tests.support.cluster import node_of, tenants_on_every_node
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.logic import claim_replay, idempotency
from tierq.logic.idempotency import Kept, ValkeyClaim
from tierq.models import ClaimRequest

QUEUE = "keyed-claims"


def leased(valkey: RedisCluster, tenants: list[str]) -> set[str]:
    return {m.decode() for t in tenants
            for m in valkey.zrange(PairKeys.of(QUEUE, t).leased, 0, -1)}


def test_a_claim_across_masters_replays_what_is_still_leased(
        tq: Tierq, valkey: RedisCluster) -> None:
    tenants = tenants_on_every_node(valkey, QUEUE)
    assert len({node_of(valkey, QUEUE, t) for t in tenants}) == 3
    tq.enqueue(QUEUE, [{"payload": [t, i], "tenant": t} for t in tenants for i in range(3)])
    scope = idempotency.scope_key("admin", "claim", QUEUE, "once")
    body = idempotency.fingerprint({"max": 6})
    record = idempotency.claim_in_valkey(tq.ctx, scope, body)
    assert isinstance(record, ValkeyClaim)
    first = tq.claim(QUEUE, ClaimRequest(max=6))
    assert {t.tenant for t in first} == set(tenants)
    record.finish(claim_replay.record_of(first), ttl_seconds=60)
    held = leased(valkey, tenants)

    kept = idempotency.claim_in_valkey(tq.ctx, scope, body)
    assert isinstance(kept, Kept)
    assert claim_replay.replay(tq.ctx, QUEUE, kept.body) == first
    assert leased(valkey, tenants) == held

    done = first[0]
    tq.ack(QUEUE, [{"id": done.id, "lease_token": done.lease_token}])
    assert claim_replay.replay(tq.ctx, QUEUE, kept.body) == first[1:]
