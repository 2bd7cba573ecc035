"""Review of i28-f-aws: failing tests that show defects of the branch (see the review's
report). Each is written to pass once the defect is fixed."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.handlers.support import Invoke
from tests.handlers.test_migrate_requests import (  # (its fixtures puts and stack too)
    Context,
    Work,
    puts,
    shard_request,
    stack,
)
from tierq.aws.runtime import default_engine

ACME = {"tenant": "acme"}
__all__ = ["puts", "stack"]  # fixtures used by name


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


# ---------------------------------------------------------------- migrate: Delete requests

def test_deleting_a_removed_shards_resource_is_answered_success(
        puts: list[dict[str, Any]], stack: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard taken out of ExtraShardNames: the parent's update sets the migrate function's
    TIERQ_SHARD_NAMES without it first, then deletes the shard's nested stack in the clean-up
    phase, whose custom resource sends Delete. A Delete does nothing, yet check_request runs
    for it and refuses it (the shard is no longer named): FAILED, and the nested stack is
    left DELETE_FAILED. Likewise a rollback that deletes a shard stack just created."""
    from tierq.aws.custom_resource import handle

    monkeypatch.setenv("TIERQ_SHARD_NAMES", "default,b")  # c was just removed
    work = Work()
    body = handle({**shard_request("c", stack["c"]), "RequestType": "Delete",
                   "PhysicalResourceId": "tierq-db-migrations"}, Context(), work=work)
    assert work.calls == []
    assert body["Status"] == "SUCCESS", body.get("Reason")
