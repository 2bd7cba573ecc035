"""Claimer processes over one queue (guarantee 2, tests/integration and tests/cluster): each
claims and acks until the queue stays empty; the parent gathers every delivery and ack. A
claimer's failing assertion reaches the test with its message (tests/support/processes.py)."""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

from tests.integration.helpers import Delivery
from tests.support.processes import Children
from tierq.config import Settings
from tierq.engine import Tierq


def claimer(database_url: str, valkey_url: str, queue: str, out: Any,
            overrides: dict[str, Any] | None = None) -> None:
    """Claim and ack until the queue stays empty for 3 s; puts (deliveries, acked ids) on
    ``out``. ``overrides``: further settings by field name (e.g. ``valkey_cluster=True``)."""
    fields: dict[str, Any] = {"warm_max": 2000, **(overrides or {})}
    settings = Settings(database_url=database_url, valkey_url=valkey_url, lease_seconds=300,
                        db_pool_max=2, **fields)
    deliveries: list[Delivery] = []
    acked: list[str] = []
    empty_since: float | None = None
    with Tierq(settings=settings) as tq:
        while True:
            got = tq.claim(queue, max=50, worker=f"p{mp.current_process().pid}")
            now = time.time()
            if not got:
                empty_since = empty_since or now
                if now - empty_since > 3:
                    break
                time.sleep(0.05)
                continue
            empty_since = None
            deliveries.extend((str(t.id), t.attempt, now, t.lease_expires_at.timestamp())
                              for t in got)
            result = tq.ack(queue, [{"id": t.id, "lease_token": t.lease_token} for t in got])
            acked.extend(str(i) for i in result.acked)
            assert not result.rejected
    out.put((deliveries, acked))


def run_claimers(database_url: str, valkey_url: str, queue: str, processes: int,
                 overrides: dict[str, Any] | None = None) -> tuple[list[Delivery], list[str]]:
    """Run ``claimer`` in that many processes until the queue is drained; returns every
    delivery and every acked id."""
    children = Children()  # a claimer's failing assertion is raised here, with its message
    try:
        results = children.queue()
        for _ in range(processes):
            children.start(claimer, database_url, valkey_url, queue, results, overrides)
        collected = children.get(results, processes, timeout=600)
        children.join(timeout=60)
    finally:
        children.close()
    return ([d for ds, _ in collected for d in ds], [a for _, ack in collected for a in ack])
