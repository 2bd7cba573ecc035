"""A task's trace context on both engines, the same way: kept at enqueue (a task's own or
none), handed back by claims, again after a retry and a dead letter's replay (its blob made
again from its row), by the task view, and by a flow's tasks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.shards.conftest import ShardedFactory
from tests.support.stores import TierqFactory
from tierq.contract import Deployment

TENANTS = [f"t{i}" for i in range(12)]
TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
         "tracestate": "rojo=00f067aa0ba902b7",
         "aws_trace_header": "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"}
Make = Callable[..., Deployment]


@pytest.fixture(params=["one database", "three shards"])
def make(request: pytest.FixtureRequest) -> Make:
    if request.param == "one database":
        make_tq: TierqFactory = request.getfixturevalue("make_tq")
        return make_tq
    make_sharded: ShardedFactory = request.getfixturevalue("make_sharded")
    return make_sharded


def test_traces_survive_claims_retries_replays_and_flows(make: Make) -> None:
    tq = make()
    outcomes = tq.enqueue("q", [{"payload": t, "tenant": t,
                                 **({"trace": TRACE} if i % 2 == 0 else {})}
                                for i, t in enumerate(TENANTS)])
    traced = {str(o.id) for i, o in enumerate(outcomes) if i % 2 == 0}
    claimed = tq.claim("q", max=len(TENANTS))
    assert len(claimed) == len(TENANTS)
    for task in claimed:
        expected = TRACE if str(task.id) in traced else None
        assert (task.trace.model_dump() if task.trace else None) == expected
    # a retry at once, then dead: its blob is made again from its row each time
    tq.nack("q", [{"id": c.id, "lease_token": c.lease_token, "retry_in_seconds": 0}
                  for c in claimed])
    again = tq.claim("q", max=len(TENANTS))
    assert len(again) == len(TENANTS)
    assert {str(t.id) for t in again if t.trace is not None} == traced
    tq.nack("q", [{"id": c.id, "lease_token": c.lease_token, "dead": True} for c in again])
    tq.dlq_replay("q", all_dead=True)
    replayed = tq.claim("q", max=len(TENANTS))
    assert {str(t.id) for t in replayed if t.trace is not None} == traced
    view = tq.get_task("q", next(iter(traced)))
    assert view.trace is not None and view.trace.model_dump() == TRACE

    flow = tq.flow({"tenant": "t0", "tasks": [
        {"ref": "a", "queue": "f", "payload": 1, "trace": TRACE},
        {"ref": "b", "queue": "f", "payload": 2, "after": ["a"]}]})
    [first] = tq.claim("f", max=2)
    assert first.trace is not None and first.trace.model_dump() == TRACE
    tq.ack("f", [{"id": first.id, "lease_token": first.lease_token}])
    [second] = tq.claim("f", max=2)
    assert second.id == flow.tasks["b"].id and second.trace is None
