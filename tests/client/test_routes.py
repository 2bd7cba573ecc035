"""Every typed method of the client against the local API (real HTTP, real PostgreSQL and
Redis behind it)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.local_api import QueueNames
from tests.support.polling import eventually
from tierq.client import Client, InvalidInputError, NotFoundError
from tierq.models import TaskView


def test_queue_settings_and_counts(api: Client, names: QueueNames) -> None:
    emails = names["emails"]
    nothing_here = names["nothing-here"]
    queue = api.put_queue(emails, {"warm_max": 3, "max_attempts": 2,
                                     "backoff": {"kind": "fixed", "base_seconds": 0,
                                                 "cap_seconds": 0, "jitter": 0}})
    assert (queue.settings.warm_max, queue.settings.max_attempts) == (3, 2)
    outcomes = api.enqueue(emails, [{"payload": i} for i in range(5)])
    assert [o.outcome for o in outcomes] == ["created"] * 5
    assert [o.state for o in outcomes] == ["warm"] * 3 + ["cold"] * 2
    view = api.get_queue(emails)
    assert (view.counts.warm, view.counts.cold, view.mode) == (3, 2, "cold")
    assert [q.queue for q in api.list_queues()] == [emails]
    with pytest.raises(NotFoundError) as missing:
        api.get_queue(nothing_here)
    assert missing.value.code == "not_found"


def test_enqueue_keys_and_task_status(api: Client, names: QueueNames) -> None:
    emails = names["emails"]
    first = api.enqueue_one(emails, {"to": "a@example.com"}, key="welcome-1", priority=5)
    again = api.enqueue_one(emails, {"to": "b@example.com"}, key="welcome-1")
    replaced = api.enqueue_one(emails, {"to": "c@example.com"}, key="welcome-1",
                               on_conflict="replace")
    assert (first.outcome, again.outcome, replaced.outcome) == ("created", "ignored", "updated")
    assert first.id == again.id == replaced.id
    task = api.get_task(emails, first.id)
    assert isinstance(task, TaskView)
    # replace takes the new task as given (priority back to the default 0), in place
    assert (task.payload, task.priority, task.key) == ({"to": "c@example.com"}, 0, "welcome-1")
    delayed = api.enqueue_one(emails, "later", delay_seconds=3600, tenant="acme")
    assert (delayed.state, delayed.tenant) == ("delayed", "acme")
    deleted = api.delete_task(emails, delayed.id)
    assert deleted.id == delayed.id
    with pytest.raises(NotFoundError):
        api.get_task(emails, delayed.id)


def test_claim_heartbeat_ack_with_result(api: Client, names: QueueNames) -> None:
    other = names["other"]
    work = names["work"]
    made = api.enqueue_one(work, {"n": 1})
    [task] = api.claim(work, max=5, lease_seconds=30, worker="test-worker")
    assert (task.id, task.payload, task.attempt) == (made.id, {"n": 1}, 1)
    running = api.running()
    assert [(r.id, r.worker, r.queue) for r in running] == [(task.id, "test-worker", work)]
    assert api.running(queue=other) == []
    beat = api.heartbeat(work, [{"id": task.id, "lease_token": task.lease_token,
                                   "extend_seconds": 120}])
    assert [e.id for e in beat.extended] == [task.id]
    assert beat.extended[0].lease_expires_at > task.lease_expires_at
    wrong = api.ack(work, [{"id": task.id, "lease_token": "_~0000~1"}])
    assert [(r.id, r.reason) for r in wrong.rejected] == [(task.id, "not_owner")]
    done = api.ack(work, [{"id": task.id, "lease_token": task.lease_token,
                             "result": {"sent": True}}])
    assert done.acked == [task.id]
    stored = api.get_task(work, task.id)
    assert (stored.state, stored.result) == ("done", {"sent": True})
    assert api.claim(work, max=1) == []


def test_ack_and_claim_in_one_request(api: Client, names: QueueNames) -> None:
    work = names["work"]
    api.enqueue(work, [{"payload": i} for i in range(4)])
    first = api.claim(work, max=2)
    answer = api.ack_and_claim(work, first, max=2, worker="w")
    assert sorted(answer.acked) == sorted(t.id for t in first) and answer.rejected == []
    assert [t.payload for t in answer.tasks] == [2, 3] and answer.claim_error is None
    assert [r.worker for r in api.running(queue=work)] == ["w", "w"]
    last = api.ack_and_claim(work, [{"id": t.id, "lease_token": t.lease_token,
                                     "result": {"n": t.payload}} for t in answer.tasks])
    assert len(last.acked) == 2 and last.tasks == []
    assert api.get_task(work, answer.tasks[0].id).result == {"n": 2}
    with pytest.raises(InvalidInputError):
        api.ack_and_claim(work, first, max=0)  # (refused before sending)


def test_ack_and_claim_of_more_than_500_acks_the_first_apart(api: Client,
                                                             names: QueueNames) -> None:
    work = names["work"]
    api.enqueue(work, [{"payload": i} for i in range(503)])
    got = api.claim(work, max=500) + api.claim(work, max=3)
    api.enqueue(work, [{"payload": "next"}])
    answer = api.ack_and_claim(work, got, max=5)
    assert len(answer.acked) == 503 and answer.rejected == []
    assert [t.payload for t in answer.tasks] == ["next"]


def test_release_puts_tasks_back_in_their_places(api: Client, names: QueueNames) -> None:
    work = names["work"]
    api.put_queue(work, {"max_attempts": 1})
    made = api.enqueue(work, [{"payload": i} for i in range(3)])
    claimed = api.claim(work, max=2)
    result = api.release(work, claimed)  # the claimed tasks, or {"id", "lease_token"}
    assert result.released == [t.id for t in claimed] and result.rejected == []
    again = api.claim(work, max=3)
    assert [(t.id, t.attempt) for t in again] == [(o.id, 1) for o in made]
    assert api.release(work, claimed).rejected[0].reason == "not_owner"


def test_nack_retry_dead_letters_replay_and_purge(api: Client, names: QueueNames) -> None:
    jobs = names["jobs"]
    api.put_queue(jobs, {"max_attempts": 1})
    ids = [o.id for o in api.enqueue(jobs, [{"payload": i} for i in range(3)])]
    claimed = api.claim(jobs, max=3)
    result = api.nack(jobs, [{"id": t.id, "lease_token": t.lease_token, "error": "boom"}
                               for t in claimed])
    assert sorted(result.dead) == sorted(ids) and result.retried == []
    page = api.dlq_list(jobs, limit=2)
    assert len(page.tasks) == 2 and page.next_cursor
    rest = api.dlq_list(jobs, limit=2, after=page.next_cursor)
    assert {t.id for t in page.tasks + rest.tasks} == set(ids)
    assert all(t.last_error == "boom" for t in page.tasks)
    assert {t.id for t in api.dlq_iter(jobs, page_size=1)} == set(ids)
    replayed = api.dlq_replay(jobs, [ids[0]])
    assert replayed.replayed == [ids[0]]
    assert api.get_task(jobs, ids[0]).state in ("warm", "cold")
    purged = api.dlq_purge(jobs, [ids[1]])
    assert purged.purged == [ids[1]]
    everything = api.dlq_replay(jobs, all=True)
    assert everything.replayed == [ids[2]]
    with pytest.raises(ValueError):
        api.dlq_replay(jobs)


def test_detailed_metrics(api: Client, names: QueueNames) -> None:
    emails = names["emails"]
    api.enqueue(emails, [{"payload": 1, "tenant": "acme"}, {"payload": 2, "tenant": "acme"},
                           {"payload": 3, "tenant": "globex", "delay_seconds": 600}])
    rows = {(r.queue, r.tenant): r for r in api.metrics_detailed()}
    assert (rows[emails, "acme"].warm, rows[emails, "acme"].delayed) == (2, 0)
    assert (rows[emails, "globex"].warm, rows[emails, "globex"].delayed) == (0, 1)
    assert rows[emails, "acme"].oldest_ready_at is not None
    assert api.metrics_detailed_page().timestamp is not None


def test_schedules(api: Client, names: QueueNames) -> None:
    cron = names["cron"]
    view = api.put_schedule("tick", {"queue": cron, "payload": {"kind": "tick"},
                                     "every_seconds": 1, "horizon": 2})
    assert view.name == "tick" and view.every_seconds == 1
    assert [s.name for s in api.list_schedules()] == ["tick"]
    assert api.get_schedule("tick").queue == cron
    eventually(lambda: any(t.payload == {"kind": "tick"}
                           for t in api.claim(cron, max=5, wait_seconds=1)))
    removed = api.delete_schedule("tick")
    assert removed.name == "tick"
    with pytest.raises(NotFoundError):
        api.get_schedule("tick")


def test_openapi_and_server_side_validation(api: Client, names: QueueNames) -> None:
    emails = names["emails"]
    spec = api.openapi()
    assert "/v1/queues/{queue}/tasks" in spec["paths"]
    # bypass the client's own checks: the API names the field too
    with pytest.raises(InvalidInputError) as caught:
        api.request("POST", f"/v1/queues/{emails}/tasks",
                    body={"tasks": [{"payload": 1}, {"payload": 2, "priority": 10}]})
    assert caught.value.details[0]["field"] == "tasks[1].priority"
    assert caught.value.url is not None
    with pytest.raises(NotFoundError):
        api.get_task(emails, uuid.uuid4())


def test_cancel_task_is_a_deprecated_name_of_delete_task(api: Any, names: QueueNames) -> None:
    """``cancel_task`` deletes (DELETE), as ``delete_task`` does, and warns at the caller's
    line: ``cancel`` is the method that cancels and keeps the task."""
    queue = names["deleted"]
    made = api.enqueue_one(queue, "x")
    with pytest.warns(DeprecationWarning, match="call delete_task") as warned:
        gone = api.cancel_task(queue, made.id)
    assert gone.id == made.id
    if type(api) is Client:  # (the facade over AsyncClient is the caller otherwise)
        assert [w.filename for w in warned] == [__file__]
    with pytest.raises(NotFoundError):
        api.get_task(queue, made.id)
