"""Push delivery on real PostgreSQL and Valkey: the dispatcher claims batches and calls
consumer functions written for SQS (Powertools' BatchProcessor) in-process."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.dispatch.journal import JOURNAL
from tests.dispatch.support import run_until
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions

pytestmark = pytest.mark.usefixtures("clean_stores")


def remaining(pg: psycopg.Connection[Any], queue: str) -> int:
    row = pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = %s AND state <> 'done'",
                     (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def test_a_batch_processor_consumer_acks_and_retries_failed_items_once(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    tq.put_queue("orders", {"consumer": {"function": "tests.dispatch.consumers:fail_once",
                                         "batch_size": 10},
                            "backoff": {"kind": "fixed", "base_seconds": 0, "jitter": 0}})
    tq.enqueue("orders", [{"payload": {"n": i, "fail_once": i % 10 == 0}}
                          for i in range(50)])
    run_until(tq, lambda: remaining(pg, "orders") == 0)
    assert len(JOURNAL.runs) == 50
    twice = {task_id for task_id, runs in JOURNAL.runs.items() if runs == 2}
    assert len(twice) == 5 and set(JOURNAL.runs.values()) == {1, 2}
    assert all(JOURNAL.attempts[t] == [1, 2] for t in twice)
