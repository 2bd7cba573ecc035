"""Waiting for a task's end over three shards: the wait runs on the shard its id names,
for longer than a shard call's own deadline (the wait is what it waits for by design), is
woken by the ack, and a task on another shard or of another tenant is 404 at once."""

from __future__ import annotations

import time

import pytest

from tests.integration.task_wait_scenarios import Waiter
from tests.shards.conftest import ShardedFactory
from tierq.errors import NotFound


def test_a_wait_on_shards_outlasts_a_calls_deadline_and_wakes_at_the_ack(
        make_sharded: ShardedFactory) -> None:
    tq = make_sharded()
    tq.call_seconds = 0.5  # a shard call's deadline, below the wait
    made = tq.enqueue("q", [{"payload": i} for i in range(6)],
                      tenant="t1") + tq.enqueue("q", [{"payload": 1}], tenant="t2")
    as_it_stands = Waiter(tq, "q", made[0].id, 1.5, tenant="t1")
    assert as_it_stands.result().state == "warm"
    assert as_it_stands.ended - as_it_stands.started >= 1.4
    claimed = tq.claim("q", tenant="t1", max=1)
    [task] = claimed
    waiter = Waiter(tq, "q", task.id, 10, tenant="t1")
    time.sleep(0.7)  # past the call's own deadline: the wait's length is added to it
    acked = time.monotonic()
    tq.ack("q", [task])
    assert waiter.result().state == "done"
    assert waiter.ended - acked < 2
    started = time.monotonic()
    with pytest.raises(NotFound):
        tq.get_task("q", made[-1].id, wait_seconds=10, tenant="t1")  # t2's task
    assert time.monotonic() - started < 2
