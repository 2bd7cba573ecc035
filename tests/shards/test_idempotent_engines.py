"""Idempotency keys on the engines in Python, no HTTP: one database (``Tierq``) and three
shards (``ShardedTierq``) give the outcomes the HTTP routes give. The same key and request
answer the first call again and write nothing; another request under the key is
``IdempotencyKeyReused`` (the 409 ``idempotency_key_reused`` of the API); concurrent
duplicates create each task once; keys are kept per caller; the lease operations, claims
and dead-letter replays are keyed the same way."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.shards.conftest import ShardedFactory
from tests.support.stores import TierqFactory
from tierq.contract import Deployment
from tierq.errors import InvalidInput
from tierq.logic import idempotency
from tierq.logic.idempotency import Caller, IdempotencyInProgress, IdempotencyKeyReused
from tierq.models import EnqueueOutcome, TaskIn

TENANTS = [f"t{i}" for i in range(12)]


@pytest.fixture(params=["one database", "three shards"])
def deployment(request: pytest.FixtureRequest) -> Deployment:
    if request.param == "one database":
        make_tq: TierqFactory = request.getfixturevalue("make_tq")
        return make_tq()
    make_sharded: ShardedFactory = request.getfixturevalue("make_sharded")
    return make_sharded()


def spread(n: int = len(TENANTS)) -> list[TaskIn]:
    """A batch whose tasks' pairs have homes on every shard (over three shards)."""
    return [TaskIn(payload={"n": i}, tenant=TENANTS[i % len(TENANTS)]) for i in range(n)]


def stored(tq: Deployment, queue: str) -> int:
    counts = tq.get_queue(queue).counts
    return counts.warm + counts.cold


def ids(outcomes: list[EnqueueOutcome]) -> list[str]:
    return [str(o.id) for o in outcomes]


def test_the_same_key_and_tasks_answer_the_first_enqueue_and_write_nothing(
        deployment: Deployment) -> None:
    key = str(uuid.uuid4())
    first = deployment.enqueue("once", spread(), idempotency_key=key)
    assert [o.outcome for o in first] == ["created"] * len(TENANTS)
    assert not first.idempotent_replay
    again = deployment.enqueue("once", spread(), idempotency_key=key)
    assert again.idempotent_replay
    assert again == first
    assert stored(deployment, "once") == len(TENANTS)
    # as mappings, the same request
    as_dicts = [t.model_dump() for t in spread()]
    assert ids(deployment.enqueue("once", as_dicts, idempotency_key=key)) == ids(first)
    if len(deployment.engines) > 1:  # the batch spanned every shard
        assert len({deployment.engine_of("once", t, create=False) for t in TENANTS}) == 3


def test_the_same_key_with_another_request_is_reused_and_writes_nothing(
        deployment: Deployment) -> None:
    key = str(uuid.uuid4())
    deployment.enqueue("reuse", spread(3), idempotency_key=key)
    # other tasks whose pairs live on shards the first never wrote to, too
    others = [TaskIn(payload="other", tenant=t) for t in TENANTS[3:]]
    with pytest.raises(IdempotencyKeyReused) as reused:
        deployment.enqueue("reuse", others, idempotency_key=key)
    assert (reused.value.status, reused.value.code) == (409, "idempotency_key_reused")
    # the same tasks with another default tenant are another request
    with pytest.raises(IdempotencyKeyReused):
        deployment.enqueue("reuse", spread(3), tenant="t5", idempotency_key=key)
    assert stored(deployment, "reuse") == 3
    # a fresh key is a fresh request; no key, no record
    assert not deployment.enqueue("reuse", others, idempotency_key=str(uuid.uuid4())
                                  ).idempotent_replay
    deployment.enqueue("reuse", spread(3))
    assert stored(deployment, "reuse") == 3 + len(others) + 3


def test_concurrent_duplicates_enqueue_each_task_once(deployment: Deployment) -> None:
    key = str(uuid.uuid4())
    answers: list[list[str]] = []
    busy: list[BaseException] = []
    start = threading.Barrier(8)

    def send() -> None:
        start.wait()
        try:
            answers.append(ids(deployment.enqueue("race", spread(), idempotency_key=key)))
        except IdempotencyInProgress as exc:  # 409 idempotency_in_progress over HTTP
            busy.append(exc)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers and len(answers) + len(busy) == 8
    assert all(answer == answers[0] for answer in answers)
    assert stored(deployment, "race") == len(TENANTS)
    # once the first has answered, every retry gets its answer
    assert ids(deployment.enqueue("race", spread(), idempotency_key=key)) == answers[0]


def test_keys_belong_to_their_caller(deployment: Deployment) -> None:
    key = str(uuid.uuid4())
    tasks = [TaskIn(payload="same", tenant="t0")]
    callers = [Caller.of_tenant("t0", "sub:svc-1"), Caller.of_tenant("t0", "sub:svc-2"),
               Caller.of_tenant("t0", "client_id:svc-1"), Caller.of_tenant("t0"), Caller()]
    first = [deployment.enqueue("mine", tasks, idempotency_key=key, caller=c) for c in callers]
    assert len({o[0].id for o in first}) == len(callers)  # none answered another's
    again = [deployment.enqueue("mine", tasks, idempotency_key=key, caller=c) for c in callers]
    assert [ids(a) for a in again] == [ids(f) for f in first]
    assert all(a.idempotent_replay for a in again)
    # the default caller is the admin without a subject
    assert ids(deployment.enqueue("mine", tasks, idempotency_key=key)) == ids(first[-1])
    assert stored(deployment, "mine") == len(callers)


def test_the_http_fingerprint_binds_the_key_as_the_route_does(deployment: Deployment) -> None:
    """A caller that frames its request itself (the HTTP route: the body's fingerprint)
    gets the route's outcomes: the same body replays, another is reused."""
    key = str(uuid.uuid4())
    body = {"tasks": [{"payload": 1, "tenant": "t1"}]}
    fingerprint = idempotency.fingerprint(body)
    tasks = [TaskIn.model_validate(t) for t in body["tasks"]]
    first = deployment.enqueue("framed", tasks, idempotency_key=key,
                               body_fingerprint=fingerprint)
    # the same body written otherwise (key order) is the same request
    same = idempotency.fingerprint({"tasks": [{"tenant": "t1", "payload": 1}]})
    assert ids(deployment.enqueue("framed", tasks, idempotency_key=key,
                                  body_fingerprint=same)) == ids(first)
    with pytest.raises(IdempotencyKeyReused):
        deployment.enqueue("framed", tasks, idempotency_key=key,
                           body_fingerprint=idempotency.fingerprint({"tasks": []}))


@pytest.mark.parametrize("bad", ["", "with space", "é", "x" * 256])
def test_a_bad_key_is_refused_and_writes_nothing(deployment: Deployment, bad: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        deployment.enqueue("bad", spread(2), idempotency_key=bad)
    assert refused.value.details[0]["field"] == "idempotency_key"
    assert stored(deployment, "bad") == 0


def test_a_bad_caller_is_refused() -> None:
    with pytest.raises(InvalidInput, match="caller"):
        Caller("tenant:")
    with pytest.raises(InvalidInput, match="caller"):
        Caller("root")


def test_lease_operations_and_claims_are_keyed(deployment: Deployment) -> None:
    deployment.enqueue("work", spread())
    claim_key = str(uuid.uuid4())
    claimed = deployment.claim_outcome("work", max=5, idempotency_key=claim_key)
    assert len(claimed.tasks) == 5 and not claimed.idempotent_replay
    repeat = deployment.claim_outcome("work", max=5, idempotency_key=claim_key)
    assert repeat.idempotent_replay
    assert [(t.id, t.lease_token) for t in repeat.tasks] == \
        [(t.id, t.lease_token) for t in claimed.tasks]
    with pytest.raises(IdempotencyKeyReused):
        deployment.claim_outcome("work", max=6, idempotency_key=claim_key)

    operations: list[tuple[Callable[..., Any], list[Any], str]] = [
        (deployment.heartbeat, [{"id": t.id, "lease_token": t.lease_token}
                                for t in claimed.tasks[:1]], "extended"),
        (deployment.release, claimed.tasks[1:2], "released"),
        (deployment.nack, [{"id": t.id, "lease_token": t.lease_token, "error": "x"}
                           for t in claimed.tasks[2:3]], "retried"),
        (deployment.ack, claimed.tasks[3:], "acked"),
    ]
    for operation, items, field in operations:
        key = str(uuid.uuid4())
        first = operation("work", items, idempotency_key=key)
        assert len(getattr(first, field)) == len(items) and not first.rejected
        if field != "extended":  # settled now: unkeyed, a repeat is rejected
            assert operation("work", items).rejected
        again = operation("work", items, idempotency_key=key)
        assert again.idempotent_replay and again == first
    # the replayed claim now holds only the leases still held with its tokens
    assert [t.id for t in deployment.claim("work", max=5, idempotency_key=claim_key)] == \
        [claimed.tasks[0].id]


def test_dead_letter_replays_are_keyed(deployment: Deployment) -> None:
    deployment.enqueue("dead", [TaskIn(payload=i, tenant=t, max_attempts=1)
                                for i, t in enumerate(TENANTS)])
    dead = []
    while batch := deployment.claim("dead", max=100):
        deployment.nack("dead", [{"id": t.id, "lease_token": t.lease_token, "error": "x"}
                                 for t in batch])
        dead.extend(t.id for t in batch)
    assert len(dead) == len(TENANTS)
    key = str(uuid.uuid4())
    first = deployment.dlq_replay_slice("dead", ids=dead[:5], idempotency_key=key)
    assert sorted(first.replayed) == sorted(dead[:5]) and not first.idempotent_replay
    again = deployment.dlq_replay_slice("dead", ids=dead[:5], idempotency_key=key)
    assert again.idempotent_replay and sorted(again.replayed) == sorted(first.replayed)
    with pytest.raises(IdempotencyKeyReused):
        deployment.dlq_replay_slice("dead", ids=dead[5:], idempotency_key=key)
    replayed, skipped = deployment.dlq_replay("dead", all_dead=True,
                                              idempotency_key=str(uuid.uuid4()))
    assert sorted(replayed) == sorted(dead[5:]) and not skipped
    # a pinned tenant's purge touches only its own dead letters
    assert deployment.dlq_purge_slice("dead", all_dead=True, tenant="t0").purged == []
