"""Small helpers shared by the engine's integration tests."""

from __future__ import annotations

from typing import Any

import psycopg
import redis

from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.models import ClaimedTask


def drain(tq: Tierq, queue: str, *, batch: int = 50, **claim: Any) -> list[ClaimedTask]:
    """Claim and ack until nothing is left; returns the tasks in claim order."""
    out: list[ClaimedTask] = []
    while True:
        got = tq.claim(queue, max=batch, **claim)
        if not got:
            return out
        out.extend(got)
        result = tq.ack(queue, [{"id": t.id, "lease_token": t.lease_token} for t in got])
        assert not result.rejected, result.rejected


def ready_size(valkey: redis.Redis, queue: str, tenant: str = "_") -> int:
    return int(valkey.zcard(PairKeys.of(queue, tenant).ready))


def mode_of(valkey: redis.Redis, queue: str, tenant: str = "_") -> str | None:
    raw = valkey.hget(PairKeys.of(queue, tenant).meta, "mode")
    return None if raw is None else raw.decode()


def count_state(pg: psycopg.Connection[Any], queue: str, state: str) -> int:
    row = pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = %s AND state = %s",
                     (queue, state)).fetchone()
    assert row is not None
    return int(row[0])


def count_rows(pg: psycopg.Connection[Any], queue: str | None = None) -> int:
    if queue is None:
        row = pg.execute("SELECT count(*) FROM tierq_tasks").fetchone()
    else:
        row = pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = %s", (queue,)).fetchone()
    assert row is not None
    return int(row[0])
