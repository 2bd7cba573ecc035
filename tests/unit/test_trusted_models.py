"""Models built without validation (tierq.models.trusted) behave like validated ones."""

from __future__ import annotations

import copy
import pickle
import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, PrivateAttr

from tierq.models import ClaimedTask, EnqueueOutcome
from tierq.models.trusted import check_trusted, trusted, uuid_of

NOW = datetime(2026, 11, 22, 12, 0, 0, 123000, tzinfo=UTC)


def claimed_values(task_id: uuid.UUID) -> dict:
    return {
        "id": task_id, "queue": "emails", "tenant": "acme", "key": "k-1", "priority": 7,
        "payload": {"to": "a@b.c", "n": [1, 2.5, None]}, "attempt": 2, "max_attempts": 5,
        "lease_token": "acme~abc~3", "lease_expires_at": NOW, "redelivered": True,
        "enqueued_at": NOW,
    }


def test_a_trusted_claimed_task_equals_dumps_and_serialises_like_a_validated_one():
    values = claimed_values(uuid.uuid4())
    validated = ClaimedTask(**values)
    built = trusted(ClaimedTask, dict(values))
    assert built == validated
    assert built.model_dump() == validated.model_dump()
    assert built.model_dump_json() == validated.model_dump_json()
    assert repr(built) == repr(validated)
    assert built.model_fields_set == validated.model_fields_set
    assert pickle.loads(pickle.dumps(built)) == validated
    assert copy.deepcopy(built) == validated
    assert built.model_copy(update={"attempt": 3}).attempt == 3
    built.attempt = 4  # assignment works as on any model
    assert built.attempt == 4 and validated.attempt == 2


def test_a_trusted_enqueue_outcome_equals_a_validated_one():
    task_id = uuid.uuid4()
    validated = EnqueueOutcome(id=str(task_id), outcome="created", state="warm", tenant="_")
    built = trusted(EnqueueOutcome, {"id": task_id, "outcome": "created", "state": "warm",
                                     "tenant": "_", "key": None})
    assert built == validated
    assert built.model_dump_json() == validated.model_dump_json()


def test_models_with_private_state_are_refused():
    class WithPrivate(BaseModel):
        a: int
        _secret: int = PrivateAttr(default=0)

    with pytest.raises(TypeError, match="WithPrivate"):
        check_trusted(WithPrivate)


@given(st.uuids())
def test_uuid_of_matches_uuid_for_every_canonical_text(value: uuid.UUID):
    text = str(value)
    built = uuid_of(text)
    assert built == value
    assert hash(built) == hash(value)
    assert str(built) == text
    assert built.version == value.version
    assert pickle.loads(pickle.dumps(built)) == value
