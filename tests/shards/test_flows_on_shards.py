"""Flows on a sharded deployment: a flow is one transaction on one shard, so tasks whose
pairs live on different shards, or an `after` naming a task on another shard, are 422
naming the field and write nothing; a flow whose pairs share a shard runs there."""

from __future__ import annotations

import pytest

from tests.shards.conftest import ShardedFactory
from tests.support.every_task import EVERY_TASK
from tierq.errors import InvalidInput
from tierq.sharded import ShardedTierq

TENANT = "acme"


def queues_by_shard(tq: ShardedTierq) -> dict[str, list[str]]:
    """Queue names whose pair with TENANT is at home on each shard (two per shard)."""
    found: dict[str, list[str]] = {name: [] for name in tq.engines}
    for i in range(1000):
        queue = f"f{i}"
        home = tq.homes.home_of(queue, TENANT)
        assert home is not None
        if len(found[home]) < 2:
            found[home].append(queue)
        if all(len(v) == 2 for v in found.values()):
            return found
    raise AssertionError("no queues found on every shard")


def test_a_flow_across_shards_is_refused_naming_the_field(make_sharded: ShardedFactory) -> None:
    tq = make_sharded()
    shards = queues_by_shard(tq)
    red, green = (shards[name] for name in list(shards)[:2])
    [other] = tq.enqueue(green[0], [{"payload": 0, "tenant": TENANT}])
    with pytest.raises(InvalidInput) as caught:
        tq.flow({"tenant": TENANT, "tasks": [
            {"ref": "a", "queue": red[0], "payload": 1},
            {"ref": "b", "queue": green[0], "payload": 2, "after": ["a"]}]})
    assert caught.value.details[0]["field"] == "tasks[1].queue"
    with pytest.raises(InvalidInput) as caught:
        tq.flow({"tenant": TENANT, "tasks": [
            {"ref": "a", "queue": red[0], "payload": 1, "after": [str(other.id)]}]})
    assert caught.value.details[0]["field"] == "tasks[0].after[0]"
    # an enqueue's `after` is held to the same rule (the id's tag names its shard)
    with pytest.raises(InvalidInput) as caught:
        tq.enqueue(red[0], [{"payload": 1, "tenant": TENANT, "after": [other.id]}])
    assert caught.value.details[0]["field"] == "task.after[0]"
    counts = {}
    for name, engine in tq.engines.items():  # nothing written but the one task
        with engine.ctx.db.connection() as conn:
            row = conn.execute(f"SELECT count(*) AS n FROM {EVERY_TASK}").fetchone()
            assert row is not None
            counts[name] = row["n"]
    assert counts == {name: int(name == tq.homes.home_of(green[0], TENANT))
                      for name in tq.engines}


def test_a_flow_on_one_shard_releases_its_child(make_sharded: ShardedFactory) -> None:
    tq = make_sharded()
    queues = next(iter(queues_by_shard(tq).values()))
    result = tq.flow({"tenant": TENANT, "tasks": [
        {"ref": "a", "queue": queues[0], "payload": 1},
        {"ref": "b", "queue": queues[1], "payload": 2, "after": ["a"]}]})
    [a] = tq.claim(queues[0], tenant=TENANT)
    tq.ack(queues[0], [{"id": a.id, "lease_token": a.lease_token, "result": 7}])
    [b] = tq.claim(queues[1], tenant=TENANT)
    assert b.id == result.tasks["b"].id
    assert [(p.id, p.result) for p in b.parents or []] == [(a.id, 7)]
