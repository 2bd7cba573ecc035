"""Idempotency records on the engine over real PostgreSQL and Valkey: recorded in the tasks'
transaction, resumed after a dead owner, never duplicated after a takeover, purged by the
reaper; dead-letter replay and purge in bounded slices."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.integration.helpers import count_rows, count_state
from tierq.engine import Tierq
from tierq.logic import dlq, idempotency
from tierq.logic.idempotency import (
    IN_PROGRESS_LEASE_SECONDS,
    IdempotencyInProgress,
    IdempotencyKeyReused,
    Kept,
    PgClaim,
)
from tierq.logic.shard_ops import enqueue_once
from tierq.models import TaskIn

BODY = {"tasks": [{"payload": i} for i in range(5)]}
TASKS = [TaskIn(payload=i) for i in range(5)]


def claim(tq: Tierq, key: str = "k1", body: Any = BODY, caller: str = "admin") -> PgClaim | Kept:
    return idempotency.claim_in_postgres(
        tq.ctx, idempotency.scope_key(caller, "enqueue", "q", key), idempotency.fingerprint(body))


def owned(result: PgClaim | Kept) -> PgClaim:
    assert isinstance(result, PgClaim), result
    return result


def record_row(pg: psycopg.Connection[Any]) -> tuple[Any, ...]:
    row = pg.execute("SELECT done, status, response IS NOT NULL FROM tierq_idempotency"
                     ).fetchone()
    assert row is not None
    return tuple(row)


def test_the_record_commits_with_the_tasks_and_a_dead_owner_is_resumed(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    first = owned(claim(tq))
    outcomes = enqueue_once(tq.ctx, "q", TASKS, None, first)
    # the owner dies here: tasks and their outcomes committed together, no final answer
    assert count_rows(pg, "q") == 5
    assert record_row(pg) == (False, None, True)
    with pytest.raises(IdempotencyInProgress):
        claim(tq)  # its lease still runs
    tq.ctx.clock.advance(IN_PROGRESS_LEASE_SECONDS + 1)  # type: ignore[attr-defined]
    second = owned(claim(tq))
    assert second.committed is not None
    resumed = enqueue_once(tq.ctx, "q", TASKS, None, second)
    assert [o.id for o in resumed] == [o.id for o in outcomes]
    assert count_rows(pg, "q") == 5  # nothing enqueued twice
    second.finish({"tasks": [o.model_dump(mode="json") for o in resumed]})
    kept = claim(tq)
    assert isinstance(kept, Kept) and kept.status == 200
    assert [t["id"] for t in kept.body["tasks"]] == [str(o.id) for o in outcomes]


def test_an_owner_that_lost_its_key_writes_nothing(tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    slow = owned(claim(tq))
    tq.ctx.clock.advance(IN_PROGRESS_LEASE_SECONDS + 1)  # type: ignore[attr-defined]
    retry = owned(claim(tq))  # the retry takes the key over from the silent owner
    with pytest.raises(IdempotencyInProgress):
        enqueue_once(tq.ctx, "q", TASKS, None, slow)  # its insert rolls back
    assert count_rows(pg, "q") == 0
    enqueue_once(tq.ctx, "q", TASKS, None, retry)
    assert count_rows(pg, "q") == 5


def test_an_abandoned_claim_lets_the_retry_run_again(tq: Tierq,
                                                     pg: psycopg.Connection[Any]) -> None:
    failed = owned(claim(tq))
    failed.abandon()  # the request answered 503 before it wrote anything
    assert pg.execute("SELECT count(*) FROM tierq_idempotency").fetchone() == (0,)
    retry = owned(claim(tq))
    assert retry.committed is None
    enqueue_once(tq.ctx, "q", TASKS, None, retry)
    assert count_rows(pg, "q") == 5


def test_another_body_is_refused_even_while_in_progress(tq: Tierq) -> None:
    owned(claim(tq))
    with pytest.raises(IdempotencyKeyReused):
        claim(tq, body={"tasks": [{"payload": "other"}]})


def test_keys_are_scoped_by_caller(tq: Tierq) -> None:
    a = owned(claim(tq, caller="tenant:a"))
    a.finish({"id": "x"})
    assert isinstance(claim(tq, caller="tenant:a"), Kept)
    assert isinstance(claim(tq, caller="tenant:b"), PgClaim)  # not a's answer


def test_the_reaper_purges_expired_keys(make_tq: Any, pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(idempotency_ttl_seconds=3600)
    old = owned(claim(tq, "old"))
    enqueue_once(tq.ctx, "q", TASKS, None, old)
    old.finish({"tasks": []})
    tq.ctx.clock.advance(1800)
    young = owned(claim(tq, "young"))
    young.finish({"tasks": []})
    tq.ctx.clock.advance(1801)  # "old" is past its hour, "young" is not
    tq.run_reaper()
    keys = pg.execute("SELECT count(*) FROM tierq_idempotency").fetchone()
    assert keys == (1,)
    assert isinstance(claim(tq, "young"), Kept)
    # the expired key is free again: a new request with it runs
    assert isinstance(claim(tq, "old"), PgClaim)
    assert count_rows(pg, "q") == 5


# ----------------------------------------------------------------------- dead letters


def make_dead(tq: Tierq, queue: str, n: int, tenant: str | None = None) -> list[str]:
    tq.enqueue(queue, [{"payload": i, "max_attempts": 1} for i in range(n)], tenant=tenant)
    ids: list[str] = []
    while True:
        got = tq.claim(queue, max=100, tenant=tenant)
        if not got:
            return ids
        tq.nack(queue, [{"id": t.id, "lease_token": t.lease_token, "error": "x"} for t in got])
        ids.extend(str(t.id) for t in got)


def test_replay_all_works_in_slices_with_more(tq: Tierq, pg: psycopg.Connection[Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dlq, "REPLAY_BATCH", 4)
    dead = make_dead(tq, "d", 23)
    assert count_state(pg, "d", "dead") == 23
    slices = []
    while True:
        part = dlq.replay_slice(tq.ctx, "d", all_dead=True, max_items=10, seconds=None)
        slices.append(part)
        if not part.more:
            break
    assert [len(p.done) for p in slices] == [10, 10, 3]
    assert sorted(str(i) for p in slices for i in p.done) == sorted(dead)
    assert count_state(pg, "d", "dead") == 0
    # a time budget already spent: one transaction's batch per slice
    make_dead(tq, "e", 9)
    part = dlq.replay_slice(tq.ctx, "e", all_dead=True, max_items=None, seconds=0)
    assert len(part.done) == 4 and part.more


def test_purge_all_works_in_slices_for_one_tenant(tq: Tierq, pg: psycopg.Connection[Any],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dlq, "PURGE_BATCH", 5)
    mine = make_dead(tq, "d", 12, tenant="a")
    theirs = make_dead(tq, "d", 3, tenant="b")
    first = dlq.purge_slice(tq.ctx, "d", all_dead=True, tenant="a", max_items=7, seconds=None)
    assert len(first.done) == 7 and first.more
    second = dlq.purge_slice(tq.ctx, "d", all_dead=True, tenant="a", max_items=7, seconds=None)
    assert len(second.done) == 5 and not second.more
    assert sorted(str(i) for i in first.done + second.done) == sorted(mine)
    # another tenant's ids are neither purged nor replayed for "a"
    refused = dlq.purge_slice(tq.ctx, "d", ids=[theirs[0]], tenant="a")  # type: ignore[list-item]
    assert refused.done == [] and [str(i) for i in refused.skipped] == [theirs[0]]
    replay = dlq.replay_slice(tq.ctx, "d", ids=[theirs[1]], tenant="a")  # type: ignore[list-item]
    assert replay.done == []
    assert count_state(pg, "d", "dead") == 3


def test_a_replay_is_recorded_in_its_transaction(tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    dead = make_dead(tq, "d", 3)
    body = {"all": True}
    scope = idempotency.scope_key("admin", "dlq_replay", "d", "r1")
    first = idempotency.claim_in_postgres(tq.ctx, scope, idempotency.fingerprint(body))
    assert isinstance(first, PgClaim)

    def record(conn: psycopg.Connection[Any], part: dlq.Slice) -> None:
        first.record(conn, {"replayed": [str(i) for i in part.done], "skipped": [],
                            "more": part.more})

    dlq.replay_slice(tq.ctx, "d", all_dead=True, record=record)
    # the owner dies before it answers: a retry after its lease gets what it committed
    tq.ctx.clock.advance(IN_PROGRESS_LEASE_SECONDS + 1)  # type: ignore[attr-defined]
    retry = idempotency.claim_in_postgres(tq.ctx, scope, idempotency.fingerprint(body))
    assert isinstance(retry, PgClaim)
    assert sorted(retry.committed["replayed"]) == sorted(dead)
    assert count_state(pg, "d", "dead") == 0
