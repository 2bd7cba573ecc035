"""A replace of a task that stays ready wins over a push that read the task before it: the
push (an enqueue's own, a promotion's, a release's, a restore's) reaches Valkey after the
replace, which found the task not waiting and left its replacement in the pair's `newer`
entries (lua/update_ready.lua); the push writes that instead of the blob it read
(lua/push_ready.lua), so a worker gets the new payload. Each race is made deterministic by
running the replace inside the engine's own push step, after the push's rows were read and
before its script runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import redis

from tests.integration.test_warm_bytes import assert_exact
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.logic.context import OffsetClock

Q = "race"


def replace_before_push(tq: Tierq, monkeypatch: pytest.MonkeyPatch, kind: str,
                        replacement: dict[str, Any]) -> list[str]:
    """The next push of ``kind`` first enqueues ``replacement`` (same key, replace) and
    checks it updated the task in place, still ready; answers the ids that push carried."""
    real = tq.ctx.warm.push
    carried: list[str] = []

    def push(queue: str, tenant: str, **kw: Any) -> Any:
        if kw["kind"] == kind and not carried:
            carried.extend(str(task_id) for task_id, _, _ in kw["items"])
            [outcome] = tq.enqueue(queue, [{**replacement, "on_conflict": "replace"}])
            assert (outcome.outcome, outcome.state) == ("updated", "warm")
        return real(queue, tenant, **kw)

    monkeypatch.setattr(tq.ctx.warm, "push", push)
    return carried


def claims_the_new_payload(tq: Tierq, valkey: redis.Redis, task_id: str, payload: Any,
                           priority: int = 0) -> None:
    """One claim hands out the task with ``payload``; nothing else waits; the pair's byte
    count is exact and its `newer` entries are gone."""
    k = PairKeys.of(Q, "_")
    assert assert_exact(tq, valkey, Q) > 0  # (the count matches the data: this task's)
    [task] = tq.claim(Q, max=5)
    assert (str(task.id), task.payload, task.priority) == (task_id, payload, priority)
    assert tq.claim(Q, max=5) == []
    tq.ack(Q, [task])
    assert assert_exact(tq, valkey, Q) == 0
    assert not valkey.exists(k.newer) and not valkey.exists(k.newer_at)


@pytest.mark.parametrize("priority", [0, 5])
def test_an_enqueues_own_push_after_a_replace_writes_the_new_payload(
        tq: Tierq, valkey: redis.Redis, monkeypatch: pytest.MonkeyPatch,
        priority: int) -> None:
    carried = replace_before_push(tq, monkeypatch, "new",
                                  {"payload": "new", "key": "k", "priority": priority})
    [made] = tq.enqueue(Q, [{"payload": "old", "key": "k"}])
    assert carried == [str(made.id)]
    claims_the_new_payload(tq, valkey, str(made.id), "new", priority)


def test_a_releases_push_after_a_replace_writes_the_new_payload(
        tq: Tierq, valkey: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    made = tq.enqueue_one(Q, "old", key="k")
    [held] = tq.claim(Q, max=1)
    carried = replace_before_push(tq, monkeypatch, "restore", {"payload": "new", "key": "k"})
    assert tq.release(Q, [held]).released == [held.id]
    assert carried == [str(made.id)]
    claims_the_new_payload(tq, valkey, str(made.id), "new")


def test_a_promotions_push_after_a_replace_writes_the_new_payload(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    tq = make_tq(warm_max=1)
    _, second = tq.enqueue(Q, [{"payload": "first"}, {"payload": "old", "key": "k"}])
    assert second.state == "cold"
    [task] = tq.claim(Q, max=1)
    tq.ack(Q, [task])
    carried = replace_before_push(tq, monkeypatch, "promote", {"payload": "new", "key": "k"})
    tq.run_cold_to_warm()
    assert carried == [str(second.id)]
    claims_the_new_payload(tq, valkey, str(second.id), "new")


def test_a_restores_push_after_a_replace_writes_the_new_payload(
        make_tq: Callable[..., Tierq], valkey: redis.Redis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = OffsetClock()
    tq = make_tq(clock=clock)
    made = tq.enqueue_one(Q, "old", key="k")
    k = PairKeys.of(Q, "_")
    valkey.delete(k.ready, k.data)  # Valkey lost the task
    clock.advance(tq.ctx.settings.reconcile_grace_seconds + 1)
    carried = replace_before_push(tq, monkeypatch, "restore", {"payload": "new", "key": "k"})
    tq.run_reaper()
    assert carried == [str(made.id)]
    claims_the_new_payload(tq, valkey, str(made.id), "new")


def test_a_push_that_read_a_later_readiness_keeps_its_own_blob(
        tq: Tierq, valkey: redis.Redis) -> None:
    """An entry older than a push's read (a smaller seq: the task was made ready again
    since) is not used, and goes: a nack's retry carries its own attempt count."""
    made = tq.enqueue_one(Q, "v1", key="k")
    [held] = tq.claim(Q, max=1)
    # the replace finds the task leased (not waiting): its entry stays for a push
    [out] = tq.enqueue(Q, [{"payload": "v2", "key": "k", "on_conflict": "replace"}])
    assert out.outcome == "updated"
    k = PairKeys.of(Q, "_")
    assert valkey.hexists(k.newer, str(made.id))
    tq.nack(Q, [{"id": held.id, "lease_token": held.lease_token, "retry_in_seconds": 0}])
    [again] = tq.claim(Q, max=1)
    assert (again.payload, again.attempt) == ("v2", 2)
    tq.ack(Q, [again])
    assert not valkey.exists(k.newer)
