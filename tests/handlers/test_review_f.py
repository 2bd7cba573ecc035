"""Review of i28-f-aws: failing tests that show defects of the branch (see the review's
report). Each is written to pass once the defect is fixed."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.handlers.support import Invoke
from tierq.aws.runtime import default_engine

ACME = {"tenant": "acme"}


def test_a_committed_enqueue_is_not_answered_an_error_by_its_metrics(
        lambda_env: None, monkeypatch: pytest.MonkeyPatch, call: Invoke, pg: Any,
        database_url: str) -> None:
    """count_queue reads tierq_queues (MetricQueues) after the enqueue committed: when that
    read fails (here: a migration holds tierq_queues; with shards: the default shard is
    down while the task's shard is up) the committed enqueue is answered 503, and a client
    without an Idempotency-Key that retries enqueues the task twice."""
    monkeypatch.setenv("TIERQ_SETTINGS_CACHE_SECONDS", "60")  # (the queue's settings cached)
    monkeypatch.setenv("TIERQ_LOCK_TIMEOUT_MS", "300")
    assert call("POST", "/v1/queues/q/tasks", {"payload": 1}, claims=ACME).status == 200
    default_engine().ctx.metric_queues.forget()  # a minute on: the list is read again
    with psycopg.connect(database_url) as other:
        other.execute("LOCK TABLE tierq_queues IN ACCESS EXCLUSIVE MODE")
        reply = call("POST", "/v1/queues/q/tasks", {"payload": 2}, claims=ACME)
        other.rollback()
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (2,)  # committed
    assert reply.status == 200, reply.body  # ... yet answered 503 on the branch
