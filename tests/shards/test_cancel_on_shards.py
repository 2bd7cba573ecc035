"""Cancel and time limits over three shards: a task is cancelled on the shard its id
names (another tenant's is not found on any), its worker's heartbeat on its home shard names
it cancelled, and an attempt's time limit holds there as on one database."""

from __future__ import annotations

import pytest

from tests.shards.conftest import ShardedFactory
from tierq.errors import NotFound, TaskFinished
from tierq.logic.context import OffsetClock


def test_cancel_and_time_limits_on_shards(make_sharded: ShardedFactory) -> None:
    clock = OffsetClock()
    tq = make_sharded(clock=clock)
    made = {tenant: tq.enqueue("q", [{"payload": 1}, {"payload": 2, "timeout_seconds": 2}],
                               tenant=tenant) for tenant in ("t1", "t2", "t3")}
    for tenant, (first, _) in made.items():
        [task] = tq.claim("q", tenant=tenant, max=1)
        assert task.id == first.id
        with pytest.raises(NotFound):
            tq.cancel("q", first.id, tenant="nobody")
        assert tq.cancel("q", first.id, tenant=tenant).state == "cancelled"
        beat = tq.heartbeat("q", [{"id": task.id, "lease_token": task.lease_token}])
        assert beat.cancelled == [task.id]
        assert tq.get_task("q", first.id).state == "cancelled"
    # the limit: capped at claim, failed as timeout by the reaper of its home shard
    limited = [task for tenant in made for task in tq.claim("q", tenant=tenant, max=1)]
    assert {t.timeout_seconds for t in limited} == {2}
    clock.advance(2.5)
    assert tq.run_reaper().timed_out == 3
    for task in limited:
        view = tq.get_task("q", task.id)
        assert (view.state, view.attempts) == ("delayed", 1)
        assert (view.last_error or "").startswith("timeout")
    done = tq.enqueue("q", [{"payload": 3}], tenant="t1")[0]
    [task] = tq.claim("q", tenant="t1")
    tq.ack("q", [{"id": task.id, "lease_token": task.lease_token, "result": 1}])
    with pytest.raises(TaskFinished):
        tq.cancel("q", done.id)
