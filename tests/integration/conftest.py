"""The fixtures of the integration tests: the query-plan tests' database (helpers:
tests/integration/plans.py) and a private Valkey with little memory left."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis

from tests.integration.plans import WARM_ROWS
from tests.support.stores import migrated_database
from tests.support.valkey_memory import memory_bound


@pytest.fixture(scope="module")
def unanalyzed(services: Any) -> Iterator[psycopg.Connection[Any]]:
    """A database of its own: WARM_ROWS warm tasks of queue 'q', autovacuum off, no stats."""
    with migrated_database(services.postgres.url, "tierq_plans") as url, \
            psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE tierq_tasks SET (autovacuum_enabled = false)")
        conn.execute(
            "INSERT INTO tierq_tasks (id, queue, tenant, priority, payload, state, run_at,"
            " run_at_initially, max_attempts, seq, created_at, ready_since, state_since)"
            " SELECT gen_random_uuid(), 'q', '_', 0, '{}', 'warm', now(), now(), 5, g,"
            " now(), now(), now() FROM generate_series(1, %s) AS g", (WARM_ROWS,))
        yield conn


@pytest.fixture
def small_valkey(valkey: redis.Redis) -> Iterator[Callable[[int], None]]:
    """``limit(n)``: the session's private Valkey takes n bytes more than it holds now, then
    refuses writes (``noeviction``); its settings are restored afterwards."""
    def limit(extra: int) -> None:
        used = int(valkey.info("memory")["used_memory"])
        valkey.config_set("maxmemory", used + extra)

    with memory_bound(valkey):
        yield limit
