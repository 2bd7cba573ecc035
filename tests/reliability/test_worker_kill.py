"""Worker processes SIGKILLed while they hold leases: their tasks come back after the lease
expires (the reaper), nothing is lost, and nobody gets a task while a lease on it is valid."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.reliability.harness import (
    Fleet,
    Maintenance,
    Stack,
    account,
    wait_until_finished,
)

TASKS = 6000
LEASE_SECONDS = 2


@pytest.mark.slow
def test_workers_killed_mid_lease_lose_nothing(clean: Stack, journal_dir: Path) -> None:
    settings = clean.settings(reconcile_grace_seconds=2.0, max_attempts=100)
    fleet = Fleet(journal_dir, settings)
    held: list[str] = []
    with Maintenance(settings):
        try:
            fleet.start_workers(4, batch=20, lease_seconds=LEASE_SECONDS, work_seconds=0.05)
            fleet.start_producers(TASKS, rate=1500)
            for victim in (0, 1):
                held.extend(fleet.kill_worker_mid_lease(victim))
                time.sleep(0.5)
            fleet.start_workers(2, batch=20, lease_seconds=LEASE_SECONDS, work_seconds=0.05)
            fleet.wait_producers(timeout=120)
            wait_until_finished(clean.database_url, TASKS, timeout=90, check=fleet.check)
        finally:
            fleet.close()
    report = account(journal_dir, clean.database_url)
    report.layout_was(clean)
    print("\n" + report.line("2 of 4 workers SIGKILLed mid-lease"))
    assert report.enqueued == TASKS
    assert report.lost == []
    assert report.stuck == 0 and report.dead == 0
    assert report.double_dispatch == [], report.double_dispatch[:5]
    assert held, "the victims held no lease when killed"
    # the tasks the victims held were delivered again, after their leases expired
    assert report.duplicates >= len(held)
