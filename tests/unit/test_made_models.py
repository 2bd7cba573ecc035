"""models/base.made: models made from values tierq made itself are the models validation
would build from them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import TypeAdapter

from tierq.models.base import Model, Replayable, made
from tierq.models.leases import CLAIMED_TASKS, ClaimedTask
from tierq.models.tasks import EnqueueOutcome


def _claimed(i: int) -> dict[str, Any]:
    at = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    return {"id": uuid.uuid4(), "queue": "q", "tenant": "t", "key": None if i else "k",
            "priority": i % 10, "payload": {"i": i, "s": "\"x\""}, "attempt": 1 + i,
            "max_attempts": 3, "lease_token": f"t~abc~{1 + i}~{i}", "lease_expires_at": at,
            "redelivered": i > 0, "enqueued_at": at, "parents": None, "group": None,
            "timeout_seconds": None if i else 30, "seq": None, "trace": None}


def test_claimed_tasks_made_as_validated() -> None:
    rows = [_claimed(i) for i in range(3)]
    validated = CLAIMED_TASKS.validate_python([dict(row) for row in rows])
    out = made(ClaimedTask, rows)
    assert out == validated
    for a, b in zip(out, validated, strict=True):
        assert type(a) is ClaimedTask
        assert a.model_fields_set == b.model_fields_set
        assert a.model_dump_json() == b.model_dump_json()
        assert list(a.__dict__) == list(b.__dict__)
        assert a.__pydantic_extra__ is None and a.__pydantic_private__ is None
    out[0].key = "changed"  # (each model has its own fields set)
    assert out[0].key == "changed" and out[1].model_fields_set == set(ClaimedTask.model_fields)


def test_enqueue_outcomes_made_as_validated() -> None:
    rows = [{"id": uuid.uuid4(), "outcome": "created", "state": "warm", "tenant": "t",
             "key": None}]
    assert made(EnqueueOutcome, [dict(row) for row in rows]) == \
        TypeAdapter(list[EnqueueOutcome]).validate_python(rows)
    assert made(EnqueueOutcome, []) == []


def test_rows_not_naming_every_field_in_order_refused() -> None:
    row = _claimed(0)
    del row["trace"]
    with pytest.raises(TypeError, match="ClaimedTask has fields"):
        made(ClaimedTask, [row])
    swapped = {"outcome": "created", "id": uuid.uuid4(), "state": "warm", "tenant": "t",
               "key": None}
    with pytest.raises(TypeError, match="EnqueueOutcome has fields"):
        made(EnqueueOutcome, [swapped])


def test_a_class_with_private_attributes_refused() -> None:
    class Answer(Replayable):
        n: int

    with pytest.raises(TypeError, match="private attributes"):
        made(Answer, [{"n": 1}])


def test_a_class_that_would_change_its_values_is_refused() -> None:
    """A validator or a ``model_post_init`` would be skipped: ``made`` refuses the class."""
    from pydantic import field_validator, model_validator

    class Checked(Model):
        value: int

        @field_validator("value")
        @classmethod
        def positive(cls, value: int) -> int:
            return abs(value)

    class Whole(Model):
        value: int

        @model_validator(mode="after")
        def whole(self) -> Whole:
            return self

    class Posted(Model):
        value: int

        def model_post_init(self, context: object, /) -> None:
            self.__dict__["value"] += 1

    for cls in (Checked, Whole, Posted):
        with pytest.raises(TypeError, match="validators or a model_post_init"):
            made(cls, [{"value": -1}])
