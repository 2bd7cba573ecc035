"""Three shards for the sharded engine's tests: three databases on the session's server,
migrated (tests/support/stores.py), with the session's warm tier flushed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from tests.support.stores import flush_valkey, migrated_database
from tierq.config import Settings
from tierq.dal.shards import ShardSpec
from tierq.local.services import LocalServices
from tierq.logic.context import OffsetClock
from tierq.sharded import ShardedTierq

SHARD_NAMES = ("red", "green", "blue")


@pytest.fixture
def shard_specs(services: LocalServices) -> Iterator[list[ShardSpec]]:
    with ExitStack() as stack:
        yield [ShardSpec(name, stack.enter_context(
            migrated_database(services.postgres.url, f"tierq_shard_{name}")))
            for name in (*SHARD_NAMES, "yellow")]


ShardedFactory = Callable[..., ShardedTierq]


@pytest.fixture
def make_sharded(shard_specs: list[ShardSpec], valkey_url: str, valkey_private: bool
                 ) -> Iterator[ShardedFactory]:
    """Sharded engines over the first three shards (``specs=`` for others), their homes in
    service; keyword arguments are settings by field name."""
    flush_valkey(valkey_url, valkey_private)
    made: list[ShardedTierq] = []

    def factory(specs: list[ShardSpec] | None = None, clock: Any = None,
                **overrides: Any) -> ShardedTierq:
        settings = Settings(valkey_url=valkey_url, **{"settings_cache_seconds": 0.0,
                                                      **overrides})
        tq = ShardedTierq(specs or shard_specs[:3], settings=settings,
                          clock=clock or OffsetClock())
        made.append(tq)
        tq.sync_homes()
        return tq

    yield factory
    for tq in made:
        tq.close()
