"""Batch rows on a sharded deployment (``batch_rows`` on whatever the environment): an
enqueue over tenants homed on two shards writes, on each home, one batch row of that
home's tenants' members (no task row anywhere); claims and acks serve them there, and each
shard's reaper sweeps its own once every member has ended."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.shards.conftest import ShardedFactory
from tests.support.every_task import EVERY_TASK
from tierq.core.batch_ids import batch_of
from tierq.dal.shards import ShardSpec, rendezvous_order, tag_of
from tierq.maintenance.reaper import ReaperSummary
from tierq.sharded import ShardedTierq

QUEUE = "batched"
PER_TENANT = 3


def tenants_on_two_homes(tq: ShardedTierq) -> dict[str, str]:
    """Two tenants of QUEUE whose pairs are born on different shards: tenant → home."""
    names = list(tq.engines)
    picked: dict[str, str] = {}
    for n in range(1000):
        tenant = f"t{n}"
        home = rendezvous_order(names, QUEUE, tenant)[0]
        if home not in picked.values():
            picked[tenant] = home
        if len(picked) == 2:
            return picked
    raise AssertionError("no two homes found")


def stored(spec: ShardSpec) -> tuple[int, list[tuple[list[str], int]], int]:
    """On one shard: QUEUE's task rows, its batch rows (their tenants and members) and
    every task of QUEUE whichever way it is stored."""
    with psycopg.connect(spec.url) as conn:
        rows: Any = conn.execute("SELECT count(*) FROM tierq_tasks WHERE queue = %s",
                                 (QUEUE,)).fetchone()
        batches = conn.execute("SELECT tenant_names, tasks FROM tierq_batches"
                               " WHERE queue = %s ORDER BY id", (QUEUE,)).fetchall()
        every: Any = conn.execute(f"SELECT count(*) FROM {EVERY_TASK} WHERE queue = %s",
                                  (QUEUE,)).fetchone()
    return int(rows[0]), [(list(names), int(n)) for names, n in batches], int(every[0])


def test_an_enqueue_over_two_homes_is_a_batch_row_on_each_served_there(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec]) -> None:
    tq = make_sharded(batch_rows=True)
    homes = tenants_on_two_homes(tq)
    specs = {spec.name: spec for spec in shard_specs[:3]}
    enqueued = tq.enqueue(QUEUE, [{"payload": {"n": n, "t": t}, "tenant": t}
                                  for t in homes for n in range(PER_TENANT)])
    for task in enqueued:  # members, each id naming its pair's home
        assert batch_of(task.id) is not None
        assert tq.by_tag[tag_of(str(task.id))] == homes[task.tenant]
    for name, spec in specs.items():
        here = [t for t, home in homes.items() if home == name]
        assert stored(spec) == (0, [(here, PER_TENANT)] if here else [],
                                PER_TENANT * len(here)), name

    claimed = tq.claim(QUEUE, max=50)
    assert sorted(str(t.id) for t in claimed) == sorted(str(t.id) for t in enqueued)
    for tenant in homes:  # in line per pair
        assert [t.payload["n"] for t in claimed if t.tenant == tenant] == list(
            range(PER_TENANT))
    acked = tq.ack(QUEUE, claimed)
    assert not acked.rejected and len(acked.acked) == len(claimed)
    for name, spec in specs.items():  # ended: no task left, the batch rows until the sweep
        assert stored(spec)[::2] == (0, 0), name
    results = tq.run_job("reaper")
    assert not results.down, results
    swept = {}
    for name, summary in results.by_shard.items():
        assert isinstance(summary, ReaperSummary)
        swept[name] = summary.batches_swept
    assert swept == {name: int(name in homes.values()) for name in specs}
    assert all(stored(spec) == (0, [], 0) for spec in specs.values())
    assert tq.get_queue(QUEUE).counts.model_dump() == {
        "warm": 0, "waiting": 0, "held": 0, "cold": 0, "delayed": 0, "leased": 0, "dead": 0}


def test_unpack_batches_moves_the_members_of_every_shard(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec]) -> None:
    """``tierq unpack-batches`` with TIERQ_SHARD_URLS: each home's members become rows
    there, each shard's batch rows swept, and the claims and acks that follow find them."""
    from typer.testing import CliRunner

    from tierq.cli import app

    tq = make_sharded(batch_rows=True)
    homes = tenants_on_two_homes(tq)
    enqueued = tq.enqueue(QUEUE, [{"payload": {"n": n, "t": t}, "tenant": t}
                                  for t in homes for n in range(PER_TENANT)])
    specs = shard_specs[:3]
    env = {"TIERQ_SHARD_URLS": ",".join(f"{s.name}={s.url}" for s in specs)}
    result = CliRunner().invoke(app, ["unpack-batches"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for spec in specs:
        moved = PER_TENANT * sum(home == spec.name for home in homes.values())
        assert f"{spec.name}: {moved} task(s) moved out of batch rows" in result.output
        assert stored(spec) == (moved, [], moved), spec.name
    claimed = tq.claim(QUEUE, max=50)
    assert sorted(str(t.id) for t in claimed) == sorted(str(t.id) for t in enqueued)
    acked = tq.ack(QUEUE, claimed)
    assert not acked.rejected and len(acked.acked) == len(claimed)
    assert all(stored(spec) == (0, [], 0) for spec in specs)
