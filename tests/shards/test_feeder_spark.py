"""The Glue feeder's job over three shards (TIERQ_SHARD_URLS in its stores): rows of many
tenants land each on its pair's home shard, in order and deduplicated per pair, and their
ids resolve to that shard."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import psycopg
import pytest

from tests.shards.conftest import ShardedFactory
from tests.spark.conftest import spark  # noqa: F401  (the test run's one Spark session)
from tests.spark.data import write_parquet
from tierq.dal.shards import ShardSpec

pytestmark = pytest.mark.spark

TENANTS = [f"t{i}" for i in range(8)]


def test_feed_writes_each_pair_on_its_home_shard(
        spark: object, make_sharded: ShardedFactory, shard_specs: list[ShardSpec],  # noqa: F811
        valkey_url: str, tmp_path: Path) -> None:
    from tierq_feeder.config import config_from_args
    from tierq_feeder.feeder import run_feed
    from tierq_feeder.writer import StoreConfig

    tq = make_sharded()
    specs = shard_specs[:3]
    # each tenant repeats its keys: k0 .. k2, then again (the first occurrence wins)
    rows = [{"tenant": TENANTS[n % len(TENANTS)], "id": f"k{(n // len(TENANTS)) % 3}", "n": n}
            for n in range(96)]
    folder = write_parquet(spark, tmp_path / "rows", rows, files=2)  # type: ignore[arg-type]
    stores = StoreConfig(database_url=specs[0].url, valkey_url=valkey_url,
                         shard_urls=",".join(f"{s.name}={s.url}" for s in specs))
    config = config_from_args(["--queue", "fq", "--source", f"rows={folder}",
                               "--key-column", "id", "--tenant-column", "tenant",
                               "--batch-rows", "40", "--chunk-rows", "16"])
    run_feed(spark, config, stores, engine=tq,  # type: ignore[arg-type]
             rejects_path=str(tmp_path / "rejects"))

    homes = {t: tq.homes.home_of("fq", t, create=False) for t in TENANTS}
    assert len(set(homes.values())) >= 2
    found: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for spec in specs:
        with psycopg.connect(spec.url) as conn:
            for tenant, key, n, task_id in conn.execute(
                    "SELECT tenant, key, (payload->>'n')::int, id::text FROM tierq_tasks "
                    "WHERE queue = 'fq' ORDER BY seq").fetchall():
                assert homes[tenant] == spec.name
                found[tenant].append((key, n))
                assert tq.get_task("fq", task_id).tenant == tenant  # the id tells its shard
    for index, tenant in enumerate(TENANTS):
        assert found[tenant] == [(f"k{j}", index + j * len(TENANTS)) for j in range(3)]
