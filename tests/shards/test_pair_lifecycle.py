"""A pair's life over three shards: the per-tenant queue cap is one answer whatever shard a
new queue would live on (the default shard counts the tenant's homes), and the reaper that
forgets an idle pair drops its home on every shard, while a pair with any row keeps it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from tests.shards.conftest import SHARD_NAMES, ShardedFactory
from tierq.dal.shards import ShardSpec, rendezvous_order
from tierq.errors import QuotaExceeded
from tierq.logic.context import OffsetClock
from tierq.logic.homes import ShardDown
from tierq.sharded import ShardedTierq

DAY = 86_400.0


def queues_on_distinct_homes(tenant: str, count: int) -> list[str]:
    """Queue names whose pairs with ``tenant`` are born on ``count`` different shards."""
    picked: dict[str, str] = {}
    for n in range(1000):
        queue = f"q{n}"
        home = rendezvous_order(list(SHARD_NAMES), queue, tenant)[0]
        picked.setdefault(home, queue)
        if len(picked) == count:
            return list(picked.values())
    raise AssertionError("no spread found")


def homes_recorded(tq: ShardedTierq, queue: str, tenant: str) -> dict[str, str | None]:
    return {name: e.ctx.store.home_get(queue, tenant) for name, e in tq.engines.items()}


def test_the_queue_cap_counts_a_tenants_queues_on_every_shard(
        make_sharded: ShardedFactory) -> None:
    tq = make_sharded(max_queues_per_tenant=3)
    spread = queues_on_distinct_homes("capped", 3)
    for queue in spread:  # one queue on each shard: no shard alone holds three
        tq.enqueue(queue, [{"payload": 1}], tenant="capped")
    with pytest.raises(QuotaExceeded, match="already has 3 queues"):
        tq.enqueue("one-more", [{"payload": 1}], tenant="capped")
    assert all(home is None for home in homes_recorded(tq, "one-more", "capped").values())
    tq.enqueue(spread[0], [{"payload": 2}], tenant="capped")  # its own queues still take work
    tq.enqueue("one-more", [{"payload": 1}], tenant="another")  # the cap is per tenant


def test_forgetting_an_idle_pair_drops_its_home_everywhere_and_keeps_busy_ones(
        make_sharded: ShardedFactory) -> None:
    clock = OffsetClock()
    tq = make_sharded(clock=clock, pair_retention_seconds=DAY)
    for queue in ("idle", "busy"):
        tq.put_queue(queue, {"retention_seconds": 60})
        tq.enqueue(queue, [{"payload": 1}], tenant="t")
    done = tq.claim("idle", max=1)
    assert not tq.ack("idle", done).rejected
    idle_home = tq.homes.home_of("idle", "t", create=False)
    assert set(homes_recorded(tq, "idle", "t").values()) == {idle_home}
    clock.advance(2 * DAY)
    for _ in range(2):  # the first pass purges the done task, a pass after forgets the pair
        results = tq.run_job("reaper")
        assert not results.down, results
    assert set(homes_recorded(tq, "idle", "t").values()) == {None}
    busy_home = tq.homes.home_of("busy", "t", create=False)
    assert set(homes_recorded(tq, "busy", "t").values()) == {busy_home}  # a task remains
    # born again, the pair gets a home as any new pair does, and works
    tq.homes.invalidate("idle", "t")
    tq.enqueue("idle", [{"payload": 2}], tenant="t")
    assert tq.claim("idle", max=5)


def test_a_shard_behind_on_migrations_serves_nothing_until_migrated(
        make_sharded: ShardedFactory) -> None:
    tq = make_sharded()
    tenants = [f"t{i}" for i in range(12)]
    for tenant in tenants:
        tq.enqueue("mig", [{"payload": 1}], tenant=tenant)
    homes = {t: tq.homes.home_of("mig", t, create=False) for t in tenants}
    behind = "green"
    newest = tq.schema_version
    with tq.engines[behind].db.connection() as conn:  # as if its last migration had failed
        record: Any = conn.execute("DELETE FROM tierq_schema_migrations WHERE version = %s "
                              "RETURNING name, checksum", (newest,)).fetchone()
    fresh = make_sharded()  # a process started now
    for tenant, home in homes.items():
        if home == behind:
            with pytest.raises(ShardDown, match=f"needs {newest}"):
                fresh.claim("mig", tenant=tenant, max=1)
        else:
            assert fresh.claim("mig", tenant=tenant, max=1)
    with tq.engines[behind].db.connection() as conn:  # the migration ran again, and passed
        conn.execute("INSERT INTO tierq_schema_migrations (version, name, checksum) "
                     "VALUES (%(version)s, %(name)s, %(checksum)s)",
                     {"version": newest, "name": record["name"],
                      "checksum": record["checksum"]})
    fresh.migrate()
    behind_tenant = next(t for t, home in homes.items() if home == behind)
    assert fresh.claim("mig", tenant=behind_tenant, max=1)


def test_each_shard_asks_its_login_for_every_new_connection(
        make_sharded: ShardedFactory, shard_specs: list[ShardSpec]) -> None:
    """On AWS a shard's URL comes from its secret, asked again for each new connection, so
    a rotated password is picked up by running processes (ShardSpec.resolve_url)."""
    asked: list[tuple[str, bool]] = []

    def resolver(spec: ShardSpec) -> Callable[[bool], str]:
        def resolve(fresh: bool) -> str:
            asked.append((spec.name, fresh))
            return spec.url
        return resolve

    specs = [dataclasses.replace(spec, resolve_url=resolver(spec)) for spec in shard_specs[:3]]
    tq = make_sharded(specs=specs)
    for tenant in ("a", "b", "c", "d", "e", "f"):
        tq.enqueue("rotating", [{"payload": 1}], tenant=tenant)
    assert {name for name, _ in asked} == set(SHARD_NAMES)
