"""``tierq migrate``, ``tierq schedules`` and ``tierq dev --no-services`` over the shards of
TIERQ_SHARD_URLS: migrations reach every shard (one that fails is named and tried again, the
others stay migrated), then the shards are put in service together; the schedule commands
route by pair; the local stack serves and dispatches every shard's pairs."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from typer.testing import CliRunner

from tests.support.dev_server import REPO, TICK_MAX_SECONDS, TICKS
from tests.support.stores import flush_valkey, scratch_database
from tierq.cli import app
from tierq.client import Client
from tierq.dal.shards import ShardSpec
from tierq.local.gateway.child import start_gateway_child
from tierq.local.services import LocalServices
from tierq.shard_migrations import migrate_shards
from tierq.sharded import ShardMigrationFailed

DOWN_URL = "postgresql://nobody@127.0.0.1:9/nothing?connect_timeout=1"
NAMES = ("red", "green", "blue")


@pytest.fixture
def fresh_shards(services: LocalServices) -> Iterator[list[ShardSpec]]:
    """Three empty databases (no migration applied), named red, green and blue."""
    with ExitStack() as stack:
        yield [ShardSpec(name, stack.enter_context(scratch_database(
            services.postgres.url, f"tierq_fresh_{name}"))) for name in NAMES]


def urls(specs: list[ShardSpec]) -> str:
    return ",".join(f"{spec.name}={spec.url}" for spec in specs)


def one(url: str, query: str, *params: Any) -> Any:
    with psycopg.connect(url) as conn:
        row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def migrated(url: str) -> bool:
    return bool(one(url, "SELECT to_regclass('tierq_schema_migrations') IS NOT NULL"))


def test_migrate_reaches_every_shard_names_a_failing_one_and_retries(
        fresh_shards: list[ShardSpec], services: LocalServices) -> None:
    red, green, blue = fresh_shards
    runner = CliRunner()
    env = {"TIERQ_SHARD_URLS": urls([red, green, ShardSpec("blue", DOWN_URL)])}
    failed = runner.invoke(app, ["migrate", "--attempts", "1"], env=env)
    assert failed.exit_code == 1, failed.output
    assert "failed on 1 of 3 shard(s)" in failed.output and "- blue:" in failed.output
    assert migrated(red.url) and migrated(green.url)  # the others are migrated
    assert one(red.url, "SELECT count(*) FROM tierq_shard_identity") == 0  # not in service

    # a shard that fails at first is tried again after the pause (here it is created then)
    late = ShardSpec("blue", blue.url.rsplit("/", 1)[0] + f"/{blue.url.rsplit('/', 1)[1]}_late")
    said: list[str] = []

    def create_late(_seconds: float) -> None:
        with psycopg.connect(services.postgres.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{late.url.rsplit("/", 1)[1]}"')

    try:
        applied = migrate_shards([red, green, late], attempts=2, sleep=create_late,
                                 say=said.append)
        assert applied["red"] == applied["green"] == [] and applied["blue"]
        assert any(line.startswith("shard blue: migrations failed (attempt 1 of 2)")
                   for line in said)
        assert said[-1].startswith("3 shards in service")
        for spec in (red, green, late):  # each database carries its shard's name
            assert one(spec.url, "SELECT name FROM tierq_shard_identity") == spec.name
    finally:
        with psycopg.connect(services.postgres.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{late.url.rsplit("/", 1)[1]}" '
                         "WITH (FORCE)")

    with pytest.raises(ShardMigrationFailed) as down:
        migrate_shards([red, ShardSpec("blue", DOWN_URL)], attempts=2, sleep=lambda _: None)
    assert list(down.value.failed) == ["blue"] and down.value.applied == {"red": []}

    ok = runner.invoke(app, ["migrate"], env={"TIERQ_SHARD_URLS": urls([red, green, blue])})
    assert ok.exit_code == 0, ok.output
    assert "3 shards in service" in ok.output and migrated(blue.url)


def test_schedule_commands_route_by_pair(fresh_shards: list[ShardSpec], valkey_url: str,
                                         valkey_private: bool) -> None:
    flush_valkey(valkey_url, valkey_private)
    migrate_shards(fresh_shards)
    runner = CliRunner()
    env = {"TIERQ_SHARD_URLS": urls(fresh_shards), "VALKEY_URL": valkey_url,
           "DATABASE_URL": ""}
    for tenant in ("a", "b", "c", "d", "e", "f"):
        put = runner.invoke(app, ["schedules", "put", f"every-{tenant}", "--queue", "reports",
                                  "--tenant", tenant, "--every-seconds", "60",
                                  "--payload", "{}"], env=env)
        assert put.exit_code == 0, put.output
    listed = runner.invoke(app, ["schedules", "list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    views = orjson.loads(listed.stdout)["schedules"]
    assert [(v["tenant"], v["name"]) for v in views] == [
        (t, f"every-{t}") for t in ("a", "b", "c", "d", "e", "f")]
    on = {spec.name: one(spec.url, "SELECT count(*) FROM tierq_schedules")
          for spec in fresh_shards}
    assert sum(on.values()) == 6 and sum(1 for n in on.values() if n) >= 2  # spread
    tick = runner.invoke(app, ["schedules", "tick"], env=env)
    assert tick.exit_code == 0, tick.output
    assert orjson.loads(tick.stdout)["shards_down"] == {}
    for spec in fresh_shards:  # each schedule's occurrences on its own shard
        assert one(spec.url, "SELECT count(DISTINCT tenant) FROM tierq_tasks") == on[spec.name]


@pytest.mark.timeout(180)
def test_tierq_dev_migrates_serves_and_dispatches_every_shard(
        fresh_shards: list[ShardSpec], valkey_url: str, valkey_private: bool) -> None:
    flush_valkey(valkey_url, valkey_private)
    log = Path(tempfile.mkdtemp(prefix="tierq-test-shards-dev-")) / "tierq-dev.log"
    env = {**os.environ, "TIERQ_SHARD_URLS": urls(fresh_shards), "VALKEY_URL": valkey_url,
           "PYTHONPATH": str(REPO), "TIERQ_SETTINGS_CACHE_SECONDS": "0",
           "TIERQ_DISPATCHER_IDLE_SECONDS": "1", "TIERQ_TICK_MAX_SECONDS": TICK_MAX_SECONDS,
           **TICKS}
    for name in ("DATABASE_URL", "DB_SECRET_ARN"):
        env.pop(name, None)
    server = start_gateway_child(env, log, cwd=REPO, args=("--schedule-period", "3"))
    try:
        text = server.log()
        assert all(f"PostgreSQL shard {name}:" in text for name in NAMES), text
        assert "3 shards in service" in text
        with Client(server.url) as client:
            client.put_queue("orders", {"consumer": {
                "function": "tests.dispatch.consumers:keep", "batch_size": 10}})
            client.enqueue("orders", [{"payload": {"n": n}, "tenant": f"t{n % 12}"}
                                      for n in range(36)])
        homes = {spec.name: one(spec.url, "SELECT count(*) FROM tierq_pair_homes WHERE "
                                          "queue = 'orders' AND shard = %s", spec.name)
                 for spec in fresh_shards}
        assert all(homes.values()), homes  # pairs on every shard
        deadline = time.monotonic() + 30
        while any(one(s.url, "SELECT count(*) FROM tierq_tasks") for s in fresh_shards):
            assert time.monotonic() < deadline, server.log()[-3000:]
            time.sleep(0.1)
    finally:
        assert server.stop() == 0, server.log()[-3000:]
