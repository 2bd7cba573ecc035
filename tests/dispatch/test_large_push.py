"""The push path at scale on real PostgreSQL and Valkey: many tasks pushed to a Powertools
BatchProcessor consumer that fails 1 % of items once, with max_concurrency set. Every task
is acked, each failed item runs exactly twice, none is lost, no task is handed out while an
invocation holding it runs, and the queue never has more invocations at once than allowed.
(TIERQ_TEST_PUSH_TASKS sets the size; the benchmark, bench/push.py, runs 10,000 and more.)"""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest

from tests.dispatch.journal import JOURNAL
from tests.dispatch.support import run_until, task_states
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions
from tierq.logic.dispatch import InvocationSlots, read_counts

pytestmark = pytest.mark.usefixtures("clean_stores")

TASKS = int(os.environ.get("TIERQ_TEST_PUSH_TASKS", "10000"))
MAX_CONCURRENCY = 4


@pytest.mark.timeout(600)
def test_every_task_is_acked_failed_items_run_twice_and_concurrency_stays_bounded(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    queue = "push-large"
    tq.put_queue(queue, {
        "consumer": {"function": "tests.dispatch.consumers:fail_once", "batch_size": 25,
                     "max_concurrency": MAX_CONCURRENCY},
        "backoff": {"kind": "fixed", "base_seconds": 0, "jitter": 0}})
    fail = {n for n in range(TASKS) if n % 100 == 7}  # 1 %
    for start in range(0, TASKS, 500):
        tq.enqueue(queue, [{"payload": {"n": n, "fail_once": n in fail, "sleep": 0.001},
                            "tenant": f"t{n % 3}"}
                           for n in range(start, min(TASKS, start + 500))])
    samples: list[int] = []
    slots = InvocationSlots(tq.ctx)

    def done() -> bool:
        samples.append(slots.running(queue))
        return task_states(pg, queue).total() == 0

    run_until(tq, done, timeout=540)

    # none lost, every one acked (the acked rows are deleted and the acked members ended:
    # nothing left, nothing dead)
    assert len(JOURNAL.runs) == TASKS
    twice = {task_id for task_id, runs in JOURNAL.runs.items() if runs == 2}
    assert len(twice) == len(fail)
    assert set(JOURNAL.runs.values()) == {1, 2}
    assert all(JOURNAL.attempts[t] == [1, 2] for t in twice)
    # no double dispatch within a lease; the limit held, by the functions' count and by the
    # slots the dispatcher held
    assert JOURNAL.overlaps == []
    assert JOURNAL.max_running[queue] <= MAX_CONCURRENCY
    assert max(samples) <= MAX_CONCURRENCY
    assert JOURNAL.max_running[queue] > 1  # the run did go concurrent
    counts = read_counts(tq.ctx, queue)
    assert counts.dispatched == TASKS + len(fail)
    assert counts.acked == TASKS and counts.retried == len(fail)
    assert counts.dead == counts.throttled == counts.consumer_errors == 0
