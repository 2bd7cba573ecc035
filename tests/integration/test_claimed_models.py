"""A claim makes its plain tasks' models from the warm tier's blobs without validating them
(``models.base.made``, logic/claim.py): for every writer of a blob (an enqueue, plain or
keyed; a promotion from cold; a retry; a release; the reconciler's restore) the models are
what validation builds, field by field, in their types and as JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from pydantic import TypeAdapter

from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.logic import claim as claim_logic
from tierq.logic.context import OffsetClock
from tierq.maintenance import cold_to_warm

Q = "made"


@pytest.fixture
def made_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each claim's ``made`` call checked against validation; how many rows each made."""
    original = claim_logic.made
    seen: list[int] = []

    def compared(cls: Any, rows: list[dict[str, Any]]) -> list[Any]:
        copies = [dict(row) for row in rows]
        out = original(cls, rows)
        validated = TypeAdapter(list[cls]).validate_python(copies)
        for built, checked in zip(out, validated, strict=True):
            assert built == checked
            assert built.model_dump_json() == checked.model_dump_json()
            assert built.model_dump(mode="json", by_alias=True) == \
                checked.model_dump(mode="json", by_alias=True)
            assert built.model_fields_set == checked.model_fields_set
            for name in cls.model_fields:
                mine, theirs = built.__dict__[name], checked.__dict__[name]
                assert type(mine) is type(theirs), name
                assert getattr(mine, "tzinfo", None) == getattr(theirs, "tzinfo", None), name
        seen.append(len(rows))
        return out

    monkeypatch.setattr(claim_logic, "made", compared)
    return seen


def test_tasks_an_enqueue_wrote_plain_and_keyed(tq: Tierq, made_rows: list[int]) -> None:
    tq.enqueue(Q, [{"payload": {"a": [1, "é"]}, "priority": 7, "max_attempts": 3},
                   {"payload": None, "key": "k\"1"}, {"payload": "x", "tenant": "t2"},
                   {"payload": 12.5, "key": "ключ", "tenant": "t2", "priority": 0}])
    got = tq.claim(Q, max=10)
    assert len(got) == 4 and sum(made_rows) == 4


def test_tasks_promoted_from_cold(make_tq: Callable[..., Tierq], made_rows: list[int]) -> None:
    tq = make_tq(warm_max=2)
    tq.enqueue(Q, [{"payload": n, "key": f"k{n}" if n % 2 else None, "priority": n % 10}
                   for n in range(6)])
    first = tq.claim(Q, max=2)
    tq.ack(Q, first)
    assert cold_to_warm.run(tq.ctx).promoted > 0
    assert len(tq.claim(Q, max=10)) >= 2
    assert sum(made_rows) >= 4


def test_tasks_retried_and_released(tq: Tierq, made_rows: list[int]) -> None:
    tq.enqueue(Q, [{"payload": "retried", "key": "r"}, {"payload": "released"}])
    one, two = sorted(tq.claim(Q, max=2), key=lambda task: str(task.payload))
    tq.release(Q, [one])
    tq.nack(Q, [{"id": two.id, "lease_token": two.lease_token, "error": "no",
                 "retry_in_seconds": 0}])
    again = tq.claim(Q, max=2)
    assert sorted(task.attempt for task in again) == [1, 2]
    assert sum(made_rows) == 4


def test_tasks_the_reconciler_restored(make_tq: Callable[..., Tierq], valkey: redis.Redis,
                                      made_rows: list[int]) -> None:
    clock = OffsetClock()
    tq = make_tq(clock=clock)
    tq.enqueue(Q, [{"payload": {"lost": True}, "key": "lost"}, {"payload": "lost too"}])
    keys = PairKeys.of(Q, "_")
    valkey.delete(keys.ready, keys.data, keys.meta)  # Valkey lost the pair
    clock.advance(tq.ctx.settings.reconcile_grace_seconds + 1)
    tq.run_reaper()
    assert len(tq.claim(Q, max=10)) == 2
    assert sum(made_rows) == 2
