"""16 claimer processes over 50,000 tasks, leases short enough to expire under them (1% of
the tasks are never acked by the worker that got them): every task is acked, and no task is
handed out while a lease on it is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.harness import (
    Fleet,
    Maintenance,
    Stack,
    account,
    wait_until_finished,
)

TASKS = 50_000
CLAIMERS = 16


@pytest.mark.slow
def test_sixteen_claimers_no_double_dispatch_within_a_lease(clean: Stack,
                                                            journal_dir: Path) -> None:
    settings = clean.settings(reconcile_grace_seconds=5.0, max_attempts=100, warm_max=5000)
    fleet = Fleet(journal_dir, settings)
    with Maintenance(settings):
        try:
            fleet.start_producers(TASKS, processes=2, batch=500)
            fleet.wait_producers(timeout=300)
            fleet.start_workers(CLAIMERS, batch=20, lease_seconds=2, stall=0.01)
            wait_until_finished(clean.database_url, TASKS, timeout=300, check=fleet.check)
        finally:
            fleet.close()
    report = account(journal_dir, clean.database_url)
    report.layout_was(clean)
    print("\n" + report.line(f"{CLAIMERS} concurrent claimers over {TASKS} tasks"))
    assert report.enqueued == TASKS
    assert report.lost == []
    assert report.stuck == 0 and report.dead == 0
    assert report.double_dispatch == [], report.double_dispatch[:5]
    assert report.duplicates > 0  # stalled tasks came back once their leases expired
