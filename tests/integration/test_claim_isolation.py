"""One tenant's failing pair fails only its own part of a claim over several tenants
(logic/claim_isolation.py): the others' tasks come, the pair is passed over for a while,
and a claim all of whose pairs fail still answers with the error. The failures are real
ones of Valkey: keys of the wrong type (WRONGTYPE), as a slip or a bug would leave them."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
import redis

from tests.integration.test_claim_failures import attempts, leases, promotion_refused, ready_ids
from tests.support.stores import TierqFactory
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.logic import claim_isolation


def break_key(valkey: redis.Redis, key: str) -> None:
    """Make ``key`` a string, which every script of the pair refuses (WRONGTYPE)."""
    valkey.delete(key)
    valkey.set(key, "not what the scripts expect")


@pytest.fixture(autouse=True)
def fresh_set_aside(tq: Tierq) -> None:
    tq.ctx.claim_set_aside.clear()
    tq.ctx.claim_masters_down.clear()


def test_a_queue_wide_claim_goes_on_past_one_broken_pair(tq: Tierq, valkey: redis.Redis):
    tq.enqueue("q", [{"payload": [t, i], "tenant": t} for t in "abcd" for i in range(3)])
    break_key(valkey, PairKeys.of("q", "b").ready)
    got: list[Any] = []
    for _ in range(4):  # every turn of the rotation (b first once)
        got.extend(tq.claim("q", max=8))
    assert sorted((t.tenant, t.payload[1]) for t in got) == \
        [(t, i) for t in "acd" for i in range(3)]
    assert ("q", "b") in tq.ctx.claim_set_aside


def test_claims_of_one_go_on_past_a_broken_pair(tq: Tierq, valkey: redis.Redis):
    """Claims of one pop a pair at a time (no pipeline): the same."""
    tq.enqueue("q", [{"payload": i, "tenant": t} for t in "ab" for i in range(3)])
    break_key(valkey, PairKeys.of("q", "a").data)
    got = [task for _ in range(4) for task in tq.claim("q", max=1)]
    assert [t.tenant for t in got] == ["b"] * 3


def test_a_claim_whose_every_pair_fails_raises(tq: Tierq, valkey: redis.Redis,
                                              monkeypatch: pytest.MonkeyPatch):
    """Then, its pairs set aside, claims answer empty until their time is up (a long poll
    waits for other work), and the error comes again."""
    monkeypatch.setattr(claim_isolation, "SET_ASIDE_SECONDS", 0.3)
    tq.enqueue("q", [{"payload": i, "tenant": t} for t in "ab" for i in range(2)])
    for tenant in "ab":
        break_key(valkey, PairKeys.of("q", tenant).ready)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        tq.claim("q", max=4)
    assert tq.claim("q", max=4) == []
    time.sleep(0.35)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        tq.claim("q", max=4)
    # another tenant's work comes meanwhile, and its pair answering, the claims go on
    tq.enqueue("q", [{"payload": "new", "tenant": "c"}])
    assert [t.tenant for t in tq.claim("q", max=4, wait_seconds=1)] == ["c"]
    time.sleep(0.35)
    assert tq.claim("q", max=4) == []  # (a and b failed again: logged)


def test_a_claim_of_one_tenant_raises_its_pairs_error(tq: Tierq, valkey: redis.Redis):
    tq.enqueue("q", [{"payload": 1, "tenant": "a"}])
    break_key(valkey, PairKeys.of("q", "a").ready)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        tq.claim("q", max=1, tenant="a")


def test_a_pair_set_aside_comes_back_after_its_time(tq: Tierq, valkey: redis.Redis,
                                                    monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(claim_isolation, "SET_ASIDE_SECONDS", 0.3)
    tq.enqueue("q", [{"payload": i, "tenant": t} for t in "ab" for i in range(2)])
    ready = PairKeys.of("q", "b").ready
    members = valkey.zrange(ready, 0, -1, withscores=True)
    break_key(valkey, ready)
    assert {t.tenant for t in tq.claim("q", max=4)} == {"a"}
    valkey.delete(ready)  # repaired
    valkey.zadd(ready, dict(members))
    assert tq.claim("q", max=4) == []  # (b passed over meanwhile: not even asked)
    time.sleep(0.35)
    assert {t.tenant for t in tq.claim("q", max=4)} == {"b"}


def test_a_failing_inline_refill_keeps_what_the_pairs_pop_leased(
        make_tq: TierqFactory, valkey: redis.Redis, pg: psycopg.Connection[Any]):
    """Tenant b's in-flight promotions key is broken: its pop works, its inline refill
    (which registers there first) does not.
    The claim answers with b's warm tasks and a's, holds no lease it did not answer with,
    and b's cold work waits for a refill that works."""
    tq = make_tq(warm_max=2)
    tq.enqueue("q", [{"payload": i, "tenant": t} for t in "ab" for i in range(4)])
    break_key(valkey, PairKeys.of("q", "b").inflight)
    got = tq.claim("q", max=8)
    by_tenant = {t: sorted(x.payload for x in got if x.tenant == t) for t in "ab"}
    assert by_tenant["b"] == [0, 1]
    assert by_tenant["a"][:2] == [0, 1]
    assert len(leases(valkey, "q", "a")) + len(leases(valkey, "q", "b")) == len(got)


def test_a_database_error_in_a_refill_still_gives_back_every_pop(
        tq: Tierq, make_tq: TierqFactory, valkey: redis.Redis, pg: psycopg.Connection[Any]):
    """Not a pair's own failure (PostgreSQL refuses the promotion itself): the claim fails
    and gives back what every pair's pop leased, no attempt counted."""
    tq = make_tq(warm_max=2)
    tq.enqueue("q", [{"payload": i, "tenant": t} for t in "ab" for i in range(3)])
    before = {t: ready_ids(valkey, "q", t) for t in "ab"}
    with promotion_refused(pg), pytest.raises(psycopg.Error, match="promotion refused"):
        tq.claim("q", max=6)
    assert {t: ready_ids(valkey, "q", t) for t in "ab"} == before
    assert leases(valkey, "q", "a") == leases(valkey, "q", "b") == []
    assert attempts(pg, "q") == {0}
