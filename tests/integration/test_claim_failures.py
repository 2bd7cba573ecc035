"""A claim that fails after it popped tasks gives them back through the release path (their
places in line, no attempt counted) before its error goes up; nothing stays leased. The
failures are real ones of the stores: a PostgreSQL error raised by the database itself in
the inline refill, a Valkey error on a later tenant's pop, a closed connection pool."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import redis

from tests.integration.helpers import count_state, drain
from tests.support.stores import TierqFactory
from tierq.core.ordering import task_of
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.logic import claim as claim_logic
from tierq.models import ClaimRequest


def ready_ids(valkey: redis.Redis, queue: str, tenant: str = "_") -> list[str]:
    return [task_of(m.decode()) for m in valkey.zrange(PairKeys.of(queue, tenant).ready, 0, -1)]


def leases(valkey: redis.Redis, queue: str, tenant: str = "_") -> list[bytes]:
    return valkey.zrange(PairKeys.of(queue, tenant).leased, 0, -1)


def attempts(pg: psycopg.Connection[Any], queue: str) -> set[int]:
    return {r[0] for r in pg.execute("SELECT attempts FROM tierq_tasks WHERE queue = %s",
                                     (queue,)).fetchall()}


@contextmanager
def promotion_refused(pg: psycopg.Connection[Any]) -> Iterator[None]:
    """PostgreSQL refuses to turn a cold row warm (the cold -> warm promotion): a trigger
    raises, as a broken constraint or a failing statement would."""
    pg.execute("""
        CREATE FUNCTION tierq_test_no_promotion() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'promotion refused by the test'; END $$;
        CREATE TRIGGER tierq_test_no_promotion BEFORE UPDATE ON tierq_tasks FOR EACH ROW
        WHEN (OLD.state = 'cold' AND NEW.state = 'warm')
        EXECUTE FUNCTION tierq_test_no_promotion();
    """)
    try:
        yield
    finally:
        pg.execute("DROP TRIGGER tierq_test_no_promotion ON tierq_tasks;"
                   "DROP FUNCTION tierq_test_no_promotion();")


@pytest.fixture
def promotion_fails(pg: psycopg.Connection[Any]) -> Iterator[None]:
    with promotion_refused(pg):
        yield


def test_a_refill_that_fails_after_the_pop_gives_the_popped_tasks_back(
        make_tq: TierqFactory, valkey: redis.Redis, pg: psycopg.Connection[Any],
        promotion_fails: None):
    tq = make_tq(warm_max=2)
    ids = [str(o.id) for o in tq.enqueue("q", [{"payload": i} for i in range(5)])]
    assert ready_ids(valkey, "q") == ids[:2] and count_state(pg, "q", "cold") == 3
    # pops the 2 warm tasks, finds the warm set dry, refills inline: PostgreSQL fails
    with pytest.raises(psycopg.Error, match="promotion refused by the test"):
        tq.claim("q", max=5)
    assert leases(valkey, "q") == []
    assert ready_ids(valkey, "q") == ids[:2]  # back at the front, in their order
    assert attempts(pg, "q") == {0}  # no attempt counted
    assert count_state(pg, "q", "cold") == 3


def test_after_the_failure_every_task_comes_once_in_order_at_its_first_attempt(
        make_tq: TierqFactory, valkey: redis.Redis, pg: psycopg.Connection[Any]):
    tq = make_tq(warm_max=2)
    ids = [str(o.id) for o in tq.enqueue("q", [{"payload": i} for i in range(5)])]
    with promotion_refused(pg), pytest.raises(psycopg.Error):
        tq.claim("q", max=5)
    got = drain(tq, "q", batch=5)
    assert [str(t.id) for t in got] == ids
    assert [t.attempt for t in got] == [1] * 5
    assert not any(t.redelivered for t in got)


def test_a_later_tenants_failing_pop_fails_its_own_part_alone(
        tq: Tierq, valkey: redis.Redis, pg: psycopg.Connection[Any]):
    """Not the claim: tenant a's tasks come, leased once (tests/integration/
    test_claim_isolation.py has the rest)."""
    a_ids = [str(o.id) for o in tq.enqueue("q", [{"payload": i, "tenant": "a"}
                                                 for i in range(3)])]
    tq.enqueue("q", [{"payload": i, "tenant": "b"} for i in range(3)])
    # tenant b's ready set is no sorted set any more: Valkey refuses its pop (WRONGTYPE)
    b_ready = PairKeys.of("q", "b").ready
    valkey.delete(b_ready)
    valkey.set(b_ready, "not a sorted set")
    tq.ctx.rotation["q"] = 0  # tenant a first
    got = claim_logic.claim(tq.ctx, "q", ClaimRequest(max=6), ["a", "b"])
    assert [str(t.id) for t in got] == a_ids and {t.attempt for t in got} == {1}
    assert len(leases(valkey, "q", "a")) == 3


def test_with_postgresql_gone_the_leases_are_given_back_and_the_reconciler_restores_them(
        make_tq: TierqFactory, valkey: redis.Redis, pg: psycopg.Connection[Any],
        caplog: pytest.LogCaptureFixture):
    """The refill, then the release's own write, fail on a closed pool: the leases are
    taken back all the same (Valkey first); the rows, still warm in PostgreSQL, are put
    back in line by the reconciler without an attempt."""
    tq = make_tq(warm_max=2, settings_cache_seconds=3600.0)
    ids = [str(o.id) for o in tq.enqueue("q", [{"payload": i} for i in range(5)])]
    tq.ctx.queue_settings.get("q")  # cached: the claim needs no PostgreSQL before its pop
    tq.db.close()
    with caplog.at_level(logging.ERROR, logger="tierq.logic.claim"), \
            pytest.raises(Unavailable):
        tq.claim("q", max=5, tenant="_")  # (one tenant named: no tenant list to read)
    assert "giving back 2 tasks of a failed claim" in caplog.text
    assert leases(valkey, "q") == []  # not stranded: no lease outlives the claim
    assert ready_ids(valkey, "q") == []
    assert count_state(pg, "q", "warm") == 2 and attempts(pg, "q") == {0}

    other = make_tq(warm_max=2, reconcile_grace_seconds=0)
    assert other.run_reaper().restored == 2
    assert ready_ids(valkey, "q") == ids[:2]  # their places again
    got = drain(other, "q", batch=5)
    assert [str(t.id) for t in got] == ids
    assert [t.attempt for t in got] == [1] * 5
