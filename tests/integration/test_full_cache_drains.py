"""Nothing is stranded when the cache is full (issue 28): promotions and the claims' inline
refill are sized by the bytes Valkey has room for and bring in what fits, down to one
task, so a cold line larger than the free memory drains as memory frees."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import redis

from tests.integration.helpers import count_state
from tierq.engine import Tierq
from tierq.logic import claim as claim_logic
from tierq.logic import tiering

MB = 1_000_000
PAYLOAD = "x" * 200_000  # 200 KB tasks
# Room for about 25 of them, counted from what the session's Valkey holds now (scripts and
# allocator pages of the worker's earlier tests stay after their flush).
ROOM = 5 * MB


@pytest.mark.parametrize("bound", [None, 0], ids=["default-tenant-bound", "no-tenant-bound"])
def test_a_cold_line_larger_than_free_memory_drains_as_claims_free_it(
        make_tq: Callable[..., Tierq], pg: psycopg.Connection[Any],
        small_valkey: Callable[[int], None], monkeypatch: pytest.MonkeyPatch,
        bound: int | None) -> None:
    monkeypatch.setattr(claim_logic, "LOW_WATER_EVERY", 0.0)
    # (a batch sized from small tasks seen before, as when the line changes its sizes)
    monkeypatch.setitem(tiering._last_blob_sizes, ("big", "_"), 100)
    tq = make_tq(**({} if bound is None else {"tenant_warm_max_bytes": bound}))
    small_valkey(ROOM)
    tq.ctx.warm.forget_memory()
    for start in range(0, 100, 10):
        tq.enqueue("big", [{"payload": [start + i, PAYLOAD]} for i in range(10)])
    warm, cold = count_state(pg, "big", "warm"), count_state(pg, "big", "cold")
    assert warm + cold == 100 and 0 < warm < 50 and cold > 50
    first = tq.claim("big", max=100)
    assert first and len(tq.ack("big", first).acked) == len(first)
    # the cold line (far more than the free memory) drains through the claims alone: no
    # 503 "the warm tier is full", every task once and in order
    seen = [t.payload[0] for t in first]
    for _ in range(200):
        got = tq.claim("big", max=10)  # raises WarmTierFull were it stranded
        if not got:
            break
        seen += [t.payload[0] for t in got]
        assert len(tq.ack("big", got).acked) == len(got)
    assert seen == list(range(100))
    assert count_state(pg, "big", "cold") == 0


def test_the_mover_promotes_what_fits_and_retries_a_refused_batch_smaller(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        small_valkey: Callable[[int], None], monkeypatch: pytest.MonkeyPatch) -> None:
    """Where Valkey does not tell its free memory (ElastiCache refuses INFO), a batch it
    refuses for want of memory is tried again a quarter the size, down to one task."""
    tq = make_tq(tenant_warm_max_bytes=0)
    small_valkey(ROOM)
    bound = int(valkey.config_get("maxmemory")["maxmemory"])
    for start in range(0, 60, 10):
        tq.enqueue("big", [{"payload": [start + i, PAYLOAD]} for i in range(10)])
    assert count_state(pg, "big", "cold") > 20
    got = tq.claim("big", max=100)
    assert tq.ack("big", got).acked
    monkeypatch.setattr(tq.ctx.warm, "info_refused", True)  # as on ElastiCache
    assert tq.ctx.warm.memory("big", "_") is None
    # the mover's first batch is sized by the warm set's byte bound alone (64 MiB): far
    # more than fits; Valkey refuses it, and the smaller retries bring some in
    summary = tq.run_cold_to_warm()
    assert summary.promoted > 0
    assert int(valkey.info("memory")["used_memory"]) <= bound
    assert tiering.memory_room(tq.ctx, "big", "_") is None
