"""What the hot path's shortcuts hand out is what validation builds: a claim's tasks, whether
their blobs hold only the fields every task has or also a key, a group, a time limit or a
trace; an enqueue's outcomes; an ack of claimed tasks, items and mappings together. Errors
still name the task they are about."""

from __future__ import annotations

from uuid import UUID

import pytest

from tierq import InvalidInput, PayloadTooLarge
from tierq.core.pointers import POINTER_CLASS
from tierq.models import AckItem, ClaimedTask
from tierq.models.tasks import EnqueueOutcome

TRACEPARENT = f"00-{'a' * 32}-{'b' * 16}-01"


def revalidated(task: ClaimedTask) -> ClaimedTask:
    """The task as validation builds it from its fields."""
    return ClaimedTask.model_validate({name: getattr(task, name)
                                       for name in ClaimedTask.model_fields})


def test_claimed_tasks_are_the_models_validation_builds(tq):
    tq.enqueue("q", [
        {"payload": {"i": 1}},
        {"payload": 'k"1', "key": 'k"1', "priority": 9},
        {"payload": ["g"], "group": "g"},
        {"payload": 2, "timeout_seconds": 60},
        {"payload": {"traced": True}, "trace": {"traceparent": TRACEPARENT}},
    ])
    got = tq.claim("q", max=10, lease_seconds=120)
    assert len(got) == 5
    for task in got:
        assert type(task) is ClaimedTask and type(task.id) is UUID
        assert task.model_fields_set == set(ClaimedTask.model_fields)
        assert revalidated(task) == task
        assert revalidated(task).model_dump_json() == task.model_dump_json()
        assert task.attempt == 1 and not task.redelivered and task.queue == "q"
    first, *rest = got
    assert (first.key, first.priority, first.payload) == ('k"1', 9, 'k"1')  # (priority 9)
    by_payload = {str(t.payload): t for t in rest}
    plain = by_payload[str({"i": 1})]
    assert (plain.key, plain.group, plain.timeout_seconds, plain.trace, plain.parents,
            plain.seq) == (None, None, None, None, None, None)
    assert by_payload[str(["g"])].group == "g" and by_payload[str(["g"])].seq is not None
    limited = by_payload["2"]
    assert limited.timeout_seconds == 60
    assert limited.lease_expires_at <= plain.lease_expires_at  # (its limit cut its lease)
    traced = by_payload[str({"traced": True})].trace
    assert traced is not None and traced.traceparent == TRACEPARENT
    # acked together: a claimed task, an item and a mapping
    items = [got[0], AckItem(id=got[1].id, lease_token=got[1].lease_token),
             {"id": str(got[2].id), "lease_token": got[2].lease_token}, *got[3:]]
    result = tq.ack("q", items)
    assert result.acked == [t.id for t in got] and result.rejected == []


def test_enqueue_outcomes_are_the_models_validation_builds(tq):
    out = tq.enqueue("q", [{"payload": i, "tenant": "t1" if i % 2 else None,
                            "key": f"k{i}" if i % 3 == 0 else None} for i in range(7)])
    for o in out:
        assert type(o) is EnqueueOutcome and type(o.id) is UUID
        assert o == EnqueueOutcome.model_validate(o.model_dump())
        assert o.model_fields_set == {"id", "outcome", "state", "tenant", "key"}
    assert [(o.outcome, o.state, o.tenant, o.key) for o in out] == [
        ("created", "warm", "t1" if i % 2 else "_", f"k{i}" if i % 3 == 0 else None)
        for i in range(7)]


@pytest.mark.parametrize(("tasks", "error", "field"), [
    ([{"payload": 1}, {"payload": [POINTER_CLASS, {"s3BucketName": "b", "s3Key": "k"}]}],
     InvalidInput, "tasks[1].payload"),
    ([{"payload": [POINTER_CLASS, "not a pointer"]}], InvalidInput, "task.payload"),
    ([{"payload": 1}, {"payload": 2}, {"payload": "a\x00b"}], InvalidInput,
     "tasks[2].payload"),
    ([{"payload": "x" * 300_000}], PayloadTooLarge, "task.payload"),
    ([{"payload": 0}, {"payload": 1, "run_at": "2100-01-01T00:00:00Z"}], InvalidInput,
     "tasks[1].run_at"),
    ([{"payload": 0, "wait_timeout_seconds": 5}], InvalidInput, "task.wait_timeout_seconds"),
])
def test_errors_name_the_task_they_are_about(tq, tasks, error, field):
    with pytest.raises(error) as raised:
        tq.enqueue("q", tasks)
    assert raised.value.details[0]["field"] == field
    assert raised.value.message.startswith(field)
    assert tq.claim("q", max=10) == []  # (nothing written)
