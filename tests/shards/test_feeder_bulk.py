"""The feeder's bulk path over three shards (ShardedTierq.bulk_load/bulk_writer/
bulk_warm_up, what the Glue feeder drives): each row lands on its pair's home shard, FIFO
and first-occurrence-wins dedup hold per pair across chunks written in any order, ids end
with their shard's tag and resolve there, and a home shard that is down fails the load."""

from __future__ import annotations

import time
from collections import defaultdict

import psycopg
import pytest

from tests.shards.conftest import ShardedFactory
from tierq.dal.shards import ShardSpec, tag_of
from tierq.logic.bulk import ShardedBulkLoad, load_id
from tierq.logic.homes import ShardDown

QUEUE = "feedq"
TENANTS = [f"t{i}" for i in range(9)]
ROWS = 180  # 20 a tenant: five keys, each four times (tenants t6.. have no keys)


def key_of(ord_: int) -> str | None:
    tenant = ord_ % len(TENANTS)
    return None if tenant >= 6 else f"k{(ord_ // len(TENANTS)) % 5}"


def chunk(load: ShardedBulkLoad, ords: range) -> bytes:
    """COPY text of rows ``ords`` as the feeder stages them (ids from load_id)."""
    lines = []
    null = "\\N"
    for o in ords:
        key = key_of(o) or null
        lines.append(f"{load_id(load.id_ms, o, load.id_tail)}\t{o}\t{TENANTS[o % len(TENANTS)]}"
                     f"\t{key}\t5\t{{\"ord\": {o}}}\t{null}\n")
    return "".join(lines).encode()


def test_bulk_rows_go_to_their_pairs_home_with_fifo_and_dedup_per_pair(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec]) -> None:
    tq = make_sharded()
    with tq.bulk_load(QUEUE, rows=ROWS, tenants=TENANTS) as load:
        assert isinstance(load, ShardedBulkLoad)
        assert len(load.loads) >= 2  # nine pairs spread over more than one shard
        # the later chunk commits first: the earlier one's rows take its repeated keys over
        with tq.bulk_writer(load) as later, tq.bulk_writer(load) as earlier:
            created = later.write(chunk(load, range(ROWS // 2, ROWS)), tenants=TENANTS)
            created += earlier.write(chunk(load, range(ROWS // 2)), tenants=TENANTS)
            assert earlier.settled > 0
    unkeyed = sum(1 for o in range(ROWS) if key_of(o) is None)
    assert created == unkeyed + 6 * 5  # a row that took a task over created none

    homes = {t: tq.homes.home_of(QUEUE, t, create=False) for t in TENANTS}
    tags = {spec.name: spec.tag for spec in shard_specs}
    for spec in shard_specs[:3]:
        with psycopg.connect(spec.url) as conn:
            found = conn.execute("SELECT DISTINCT tenant FROM tierq_tasks WHERE queue = %s",
                                 (QUEUE,)).fetchall()
        assert {t for (t,) in found} == {t for t, h in homes.items() if h == spec.name}

    assert tq.bulk_warm_up(QUEUE, TENANTS) > 0
    claimed: dict[str, list[int]] = defaultdict(list)
    while batch := tq.claim(QUEUE, max=25):
        for task in batch:
            claimed[task.tenant].append(task.payload["ord"])
            assert tag_of(str(task.id)) == tags[homes[task.tenant]]
        assert not tq.ack(QUEUE, batch).rejected
    for index, tenant in enumerate(TENANTS):
        ords = [o for o in range(ROWS) if o % len(TENANTS) == index]
        if index < 6:  # first occurrence of each key wins
            firsts: dict[str | None, int] = {}
            for o in ords:
                firsts.setdefault(key_of(o), o)
            ords = sorted(firsts.values())
        assert claimed[tenant] == ords  # FIFO by the load's order, nothing lost


def test_a_home_shard_down_fails_the_load(make_sharded: ShardedFactory) -> None:
    tq = make_sharded()
    home = tq.homes.home_of(QUEUE, "t0")
    assert home is not None
    tq._suspect_until[home] = time.monotonic() + 60  # as after a hang
    with pytest.raises(ShardDown), tq.bulk_load(QUEUE, rows=10, tenants=["t0"]):
        pass
