"""Invariant 2: many claimer processes at once — no task handed to two workers while its
lease is valid, and every task acked exactly once in total."""

from __future__ import annotations

import pytest

from tests.integration.helpers import assert_each_delivered_once
from tests.support.claimers import run_claimers

TASKS = 20_000
PROCESSES = 8


@pytest.mark.slow
def test_eight_claimer_processes_over_twenty_thousand_tasks(make_tq, database_url, valkey_url,
                                                            pg):
    tq = make_tq(warm_max=2000)
    ids: list[str] = []
    for start in range(0, TASKS, 500):
        out = tq.enqueue("race", [{"payload": i} for i in range(start, start + 500)])
        ids.extend(str(o.id) for o in out)
    deliveries, acked = run_claimers(database_url, valkey_url, "race", PROCESSES)
    assert_each_delivered_once(deliveries, acked, ids)
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone()[0] == 0
    print(f"\n{len(ids)} tasks, {PROCESSES} processes, {len(deliveries)} deliveries, "
          f"{len(acked)} acks, 0 doubles")
