"""Invariant 2: many claimer processes at once — no task handed to two workers while its
lease is valid, and every task acked exactly once in total."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import time
from collections import Counter
from typing import Any

import pytest

from tierq.config import Settings
from tierq.engine import Tierq

TASKS = 20_000
PROCESSES = 8


def claimer(database_url: str, valkey_url: str, queue: str, out: Any) -> None:
    settings = Settings(database_url=database_url, valkey_url=valkey_url, warm_max=2000,
                        lease_seconds=300, db_pool_max=2)
    deliveries: list[tuple[str, int, float, float]] = []
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


@pytest.mark.slow
def test_eight_claimer_processes_over_twenty_thousand_tasks(make_tq, database_url, valkey_url,
                                                            pg):
    tq = make_tq(warm_max=2000)
    ids: list[str] = []
    for start in range(0, TASKS, 500):
        out = tq.enqueue("race", [{"payload": i} for i in range(start, start + 500)])
        ids.extend(str(o.id) for o in out)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=claimer, args=(database_url, valkey_url, "race", results))
             for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    collected = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    deliveries = [d for ds, _ in collected for d in ds]
    acked = [a for _, ack in collected for a in ack]
    per_task = Counter(d[0] for d in deliveries)
    doubles = [i for i, n in per_task.items() if n > 1]
    for task_id in doubles:  # a second delivery is only allowed after the first lease ended
        times = sorted((d[2], d[3]) for d in deliveries if d[0] == task_id)
        for (_, first_expiry), (second_at, _) in itertools.pairwise(times):
            assert second_at >= first_expiry, f"{task_id} handed out twice within a lease"
    assert doubles == []  # leases are long: no redelivery at all in this run
    assert Counter(acked) == Counter(ids)  # every task acked exactly once
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone()[0] == 0
    print(f"\n{len(ids)} tasks, {PROCESSES} processes, {len(deliveries)} deliveries, "
          f"{len(acked)} acks, 0 doubles")
