"""The pairs' homes over three real PostgreSQL databases (tierq.logic.homes): births spread
over every shard and are copied on each, a home never changes when a shard is added, an
unanswering shard makes only the homes it could hold unknowable (503, never a second
home), and a deployment that had one shard keeps its pairs where they are."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack

import psycopg
import pytest

from tests.support.stores import migrated_database
from tierq.dal.postgres import Database
from tierq.dal.shards import rendezvous_order
from tierq.dal.task_store import TaskStore
from tierq.logic.homes import HomeConflict, HomeRegistry, ShardDown

NAMES = ("red", "green", "blue")


@pytest.fixture
def shard_urls(services) -> Iterator[dict[str, str]]:  # type: ignore[no-untyped-def]
    with ExitStack() as stack:
        yield {name: stack.enter_context(migrated_database(services.postgres.url,
                                                           f"tierq_shard_{name}"))
               for name in (*NAMES, "yellow")}


@pytest.fixture
def stores(shard_urls: dict[str, str]) -> Iterator[dict[str, TaskStore]]:
    dbs = {name: Database(url, max_size=4, timeout=5.0) for name, url in shard_urls.items()}
    try:
        yield {name: TaskStore(db) for name, db in dbs.items()}
    finally:
        for db in dbs.values():
            db.close()


def registry(stores: dict[str, TaskStore], names: tuple[str, ...] = NAMES,
             **swap: TaskStore) -> HomeRegistry:
    return HomeRegistry({name: swap.get(name, stores[name]) for name in names})


def unreachable() -> TaskStore:
    return TaskStore(Database("postgresql://127.0.0.1:1/nothing", min_size=0, timeout=1.0))


def test_pairs_are_born_over_every_shard_and_recorded_on_each(
        stores: dict[str, TaskStore]) -> None:
    homes = registry(stores)
    homes.sync()
    born = {f"t{i}": homes.home_of("q", f"t{i}") for i in range(60)}
    assert set(Counter(born.values())) == set(NAMES)
    for tenant, home in born.items():
        assert home == rendezvous_order(NAMES, "q", tenant)[0]
        assert {stores[n].home_get("q", tenant) for n in NAMES} == {home}
    fresh = registry(stores)  # another process, nothing cached
    assert {t: fresh.home_of("q", t, create=False) for t in born} == born
    assert fresh.home_of("q", "never-seen", create=False) is None


def test_adding_a_shard_moves_no_pair(stores: dict[str, TaskStore]) -> None:
    three = registry(stores)
    three.sync()
    born = {f"t{i}": three.home_of("q", f"t{i}") for i in range(80)}
    four = registry(stores, (*NAMES, "yellow"))
    four.sync()  # the new shard gets every home, then serves lookups
    assert stores["yellow"].home_get("q", "t0") == born["t0"]
    fresh = registry(stores, (*NAMES, "yellow"))
    assert {t: fresh.home_of("q", t) for t in born} == born
    new = Counter(fresh.home_of("q", f"n{i}") for i in range(80))
    assert new["yellow"] > 0 and set(new) <= {*NAMES, "yellow"}


def test_a_new_shard_not_yet_copied_into_is_not_taken_for_an_answer(
        stores: dict[str, TaskStore]) -> None:
    three = registry(stores)
    three.sync()
    born = {f"t{i}": three.home_of("q", f"t{i}") for i in range(40)}
    four = registry(stores, (*NAMES, "yellow"))  # no sync: yellow's copy is empty
    assert {t: four.home_of("q", t) for t in born} == born


def test_births_racing_with_different_shard_lists_agree(stores: dict[str, TaskStore]) -> None:
    registry(stores, (*NAMES, "yellow")).sync()
    results: dict[str, list[str | None]] = {f"t{i}": [] for i in range(40)}

    def born_by(names: tuple[str, ...]) -> None:
        homes = registry(stores, names)
        for tenant in results:
            try:
                results[tenant].append(homes.home_of("q", tenant))
            except ShardDown as down:  # born on yellow, which the old list cannot reach
                assert down.shard == "yellow" and "yellow" not in names, down.detail

    threads = [threading.Thread(target=born_by, args=(names,))
               for names in (NAMES, (*NAMES, "yellow"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    registry(stores, (*NAMES, "yellow")).sync()  # copies what the old list could not
    for tenant, seen in results.items():
        recorded = {stores[n].home_get("q", tenant) for n in (*NAMES, "yellow")}
        assert len(recorded) == 1 and set(seen) <= recorded, (tenant, seen, recorded)


def test_a_down_shard_hides_only_what_it_could_hold(stores: dict[str, TaskStore]) -> None:
    homes = registry(stores)
    homes.sync()
    born = {f"t{i}": homes.home_of("q", f"t{i}") for i in range(30)}
    blue_down = registry(stores, blue=unreachable())
    # every pair that exists is found on a shard that answers, blue's own included
    assert {t: blue_down.home_of("q", t, create=False) for t in born} == born
    # a pair never seen might be recorded only on blue: unknowable, not born elsewhere
    with pytest.raises(ShardDown) as down:
        blue_down.home_of("q", "brand-new")
    assert down.value.status == 503 and down.value.shard == "blue"
    assert all(stores[n].home_get("q", "brand-new") is None for n in ("red", "green"))


def test_births_wait_for_the_default_shard(stores: dict[str, TaskStore]) -> None:
    registry(stores).sync()
    red_down = registry(stores, red=unreachable())
    tenant = next(f"n{i}" for i in range(1000)
                  if rendezvous_order(NAMES, "q", f"n{i}")[0] != "red")
    with pytest.raises(ShardDown):
        red_down.home_of("q", tenant)
    assert all(stores[n].home_get("q", tenant) is None for n in ("green", "blue"))


def test_a_copy_that_failed_is_healed_by_the_next_lookup(stores: dict[str, TaskStore]) -> None:
    registry(stores).sync()
    tenant = next(f"n{i}" for i in range(1000)
                  if rendezvous_order(NAMES, "q", f"n{i}")[:2] == ["blue", "green"])
    assert registry(stores).home_of("q", tenant) == "blue"
    stores["green"].home_forget("q", tenant, "blue")  # as if green's copy had failed
    stores["blue"].home_forget("q", tenant, "blue")   # and blue's own were being forgotten
    # green ranks second and says none; red (the arbiter) still knows: found, and healed
    assert registry(stores).home_of("q", tenant) == "blue"
    assert {stores[n].home_get("q", tenant) for n in NAMES} == {"blue"}


def test_a_single_shard_deployment_becoming_sharded_keeps_its_pairs(
        stores: dict[str, TaskStore], shard_urls: dict[str, str]) -> None:
    with psycopg.connect(shard_urls["red"], autocommit=True) as conn:
        conn.execute("INSERT INTO tierq_queue_tenants (queue, tenant) "
                     "SELECT 'q', 't' || i FROM generate_series(0, 49) AS i")
    single = registry(stores, ("red",))
    assert single.home_of("q", "t1") == "red"
    assert stores["red"].home_get("q", "t1") is None  # one shard records nothing
    sharded = registry(stores)
    summary = sharded.sync()
    assert summary.adopted == 50
    assert {sharded.home_of("q", f"t{i}") for i in range(50)} == {"red"}
    assert {stores[n].home_get("q", "t7") for n in NAMES} == {"red"}


def test_two_names_on_one_database_are_refused(stores: dict[str, TaskStore]) -> None:
    registry(stores).sync()
    with pytest.raises(HomeConflict, match="two shard names point at one database"):
        HomeRegistry({"red": stores["red"], "purple": stores["green"]}).sync()


def test_forgetting_drops_every_copy(stores: dict[str, TaskStore]) -> None:
    homes = registry(stores)
    homes.sync()
    home = homes.home_of("q", "gone")
    assert home is not None
    assert stores[home].home_forget("q", "gone", home)  # (the caller's transaction)
    assert homes.forget_elsewhere("q", "gone", home) == []
    assert all(stores[n].home_get("q", "gone") is None for n in NAMES)
