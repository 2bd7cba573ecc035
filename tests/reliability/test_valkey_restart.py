"""Valkey killed mid-run and restarted empty: every lease, ready set and tier mode is gone.
While it is down the engine raises Unavailable; once it is back the reconciler re-dispatches
every unfinished task from PostgreSQL. Nothing is lost; the tasks whose leases died are
delivered again (at-least-once), never while a valid lease on them exists."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from tests.reliability.harness import (
    QUEUE,
    Fleet,
    Maintenance,
    Stack,
    account,
    engine,
    wait_for_acks,
    wait_until_finished,
)
from tierq.dal.warm_tier import PairKeys
from tierq.errors import Unavailable

TASKS = 8000
DOWN_SECONDS = 1.5


@pytest.mark.slow
def test_valkey_killed_and_restarted_empty_loses_nothing(clean: Stack,
                                                         journal_dir: Path) -> None:
    settings = clean.settings(reconcile_grace_seconds=1.0, max_attempts=100)
    fleet = Fleet(journal_dir, settings)
    probe = engine({"settings": settings})
    held: list[str] = []
    with Maintenance(settings) as jobs:
        try:
            fleet.start_workers(4, batch=20, lease_seconds=30, work_seconds=0.02)
            fleet.start_producers(TASKS, rate=1200)
            wait_for_acks(journal_dir, 1000)
            # the fault must find work in Valkey to lose: a worker frozen while it holds
            # leases it has not begun to ack keeps them in Valkey until the kill (the others
            # may have acked all theirs, and the pair may be cold for a moment, everything in
            # PostgreSQL, on a loaded machine)
            held = fleet.freeze_worker_mid_lease(0)
            try:
                keys = PairKeys.of(QUEUE, "_")
                with redis.Redis.from_url(clean.valkey_url) as valkey:
                    assert valkey.zcard(keys.leased) >= len(held)
                clean.services.valkey.kill()
                wiped_at = time.time()
            finally:
                fleet.thaw_worker(0)
            with pytest.raises(Unavailable):
                probe.claim(QUEUE, max=1)
            time.sleep(DOWN_SECONDS)
            clean.services.valkey.start()
            fleet.wait_producers(timeout=120)
            wait_until_finished(clean.database_url, TASKS, timeout=90, check=fleet.check)
        finally:
            fleet.close()
            probe.close()
    report = account(journal_dir, clean.database_url, wipes=[wiped_at])
    report.layout_was(clean)
    print("\n" + report.line(f"Valkey killed, down {DOWN_SECONDS}s, restarted empty")
          + f" restored_by_reconciler={jobs.restored}")
    assert report.enqueued == TASKS
    assert report.lost == []
    assert report.stuck == 0 and report.dead == 0
    assert report.double_dispatch == [], report.double_dispatch[:5]
    # The fault found work in Valkey: the frozen worker's leases, which the kill voided, so
    # its tasks were delivered again, and the reconciler put them back (no lease of theirs
    # was left to expire).
    assert held, "the frozen worker held no lease"
    assert report.duplicates >= len(held)
    assert jobs.restored > 0
