"""Helpers of the maintenance tests: idle pairs written straight into the registry, what
the registry and the walk cursors hold, and the reaper's batch sweep alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.logic import pairs
from tierq.maintenance import reaper

TINY_BUDGET = 1e-9  # spent at once: each part of a pass visits exactly one item


def seed_idle_pairs(pg: psycopg.Connection[Any], n: int, *, prefix: str = "idle") -> None:
    """``n`` registered pairs without any row (as pairs that once held a task)."""
    pg.execute("INSERT INTO tierq_queue_tenants (queue, tenant)"
               " SELECT %s || '-' || lpad(g::text, 6, '0'), '_'"
               " FROM generate_series(1, %s) AS g", (prefix, n))


def registered(pg: psycopg.Connection[Any], queue: str, tenant: str = "_") -> bool:
    return pg.execute("SELECT 1 FROM tierq_queue_tenants WHERE queue = %s AND tenant = %s",
                      (queue, tenant)).fetchone() is not None


def cursor_of(pg: psycopg.Connection[Any], walk: str) -> tuple[str, str] | None:
    row = pg.execute("SELECT queue, tenant FROM tierq_maintenance_cursors WHERE walk = %s",
                     (walk,)).fetchone()
    return None if row is None else (row[0], row[1])


def lease_and_expire(tq: Tierq, queue: str, *, tenant: str = "_", ready: int = 0) -> None:
    """One task of (queue, tenant) leased for 1 s, plus ``ready`` more left in line; the
    caller moves the clock past the lease."""
    tq.enqueue(queue, [{"payload": i, "tenant": tenant} for i in range(1 + ready)])
    [task] = tq.claim(queue, max=1, tenant=tenant, lease_seconds=1)
    assert task.tenant == tenant


def lock_wait_given_up(pg: psycopg.Connection[Any], table: str,
                       run_pass: Callable[[], object]) -> float:
    """Seconds a pass waited for ``table``, locked by another transaction, before it gave
    up (the store error a lock timeout raises, HTTP 503)."""
    with pg.transaction():
        pg.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(Unavailable):
            run_pass()
        return time.monotonic() - started


def sweep_ended_batches(tq: Tierq) -> None:
    """The reaper's batch sweep alone, as the pass of a scheduled tick runs it before the
    tick's gauges (``ReaperTick.one_pass``): the batch rows whose members all ended are
    deleted, so their pairs are walked no more, as rows acked are not (nothing on rows)."""
    reaper.sweep_batches(tq.ctx, reaper.ReaperSummary(), pairs.Budget(60.0),
                         reaper.ReaperConfig(), pairs.load_cursors(tq.ctx.store))
