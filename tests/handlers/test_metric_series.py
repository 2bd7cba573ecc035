"""CloudWatch series follow what an admin configured, not what tenants invent: the EMF
counts of a queue without settings go to ``queue=~other``, a configured queue's to its own
name, and the template's queue alarms leave ``~other`` out, so no tenant can page the
operator or make a new billed metric by naming a queue. The list of configured queues is
read off the request path: a read that fails fails no request whose work is done."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest

from tests.handlers.support import Invoke, emf_lines
from tests.support.every_task import EVERY_TASK
from tests.support.template import load_template
from tierq.aws.runtime import default_engine
from tierq.logic.metric_queues import CACHE_SECONDS, OTHER, RETRY_SECONDS, MetricQueues

ACME = {"tenant": "acme"}


def dimension_values(blobs: list[dict[str, Any]], metric: str) -> list[str]:
    found = []
    for blob in blobs:
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            if any(m["Name"] == metric for m in directive["Metrics"]):
                assert all("queue" in dims for dims in directive["Dimensions"])
                found.append(str(blob["queue"]))
    return found


def test_a_tenants_invented_queue_counts_as_other(call: Invoke,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    for name in ("invented-1", "invented-2"):
        assert call("POST", f"/v1/queues/{name}/tasks", {"payload": 1},
                    claims=ACME).status == 200
    assert call("PUT", "/v1/queues/orders", {}).status == 200  # an admin configures it
    assert call("POST", "/v1/queues/orders/tasks", {"payload": 1}, claims=ACME).status == 200
    [task] = call("POST", "/v1/queues/invented-1/claims", {"max": 1}, claims=ACME).body["tasks"]
    assert call("POST", "/v1/queues/invented-1/acks", {"acks": [
        {"id": task["id"], "lease_token": task["lease_token"]}]}, claims=ACME).status == 200
    blobs = emf_lines(capsys.readouterr().out)
    assert dimension_values(blobs, "Enqueued") == [OTHER, OTHER, "orders"]
    assert dimension_values(blobs, "Claimed") == [OTHER]
    assert dimension_values(blobs, "Acked") == [OTHER]
    text = str(blobs)
    assert "invented-1" not in text and "invented-2" not in text


def test_the_queue_alarms_leave_other_out() -> None:
    resources = load_template()["Resources"]
    queue_alarms = {name: r["Properties"]["Metrics"][0]["Expression"]
                    for name, r in resources.items()
                    if r["Type"] == "AWS::CloudWatch::Alarm"
                    and "GROUP BY queue" in str(r["Properties"].get("Metrics"))}
    assert set(queue_alarms) == {"OldestReadyAgeAlarm", "DeadLetteredAlarm"}
    for expression in queue_alarms.values():
        assert f"WHERE queue != '{OTHER}' GROUP BY queue" in expression


def test_work_done_is_answered_though_the_configured_queues_cannot_be_read(
        lambda_env: None, monkeypatch: pytest.MonkeyPatch, call: Invoke, pg: Any,
        database_url: str) -> None:
    """The counts are emitted after the work: an enqueue committed, tasks leased, an ack
    applied. Reading tierq_queues then fails here (a migration holds it; with shards, the
    default shard is down while the task's is up): each request is still answered 200, so
    a keyless retry enqueues nothing twice and no leased task is given back."""
    monkeypatch.setenv("TIERQ_SETTINGS_CACHE_SECONDS", "60")  # (the queue's settings cached)
    monkeypatch.setenv("TIERQ_LOCK_TIMEOUT_MS", "300")
    assert call("POST", "/v1/queues/q/tasks", {"payload": 1}, claims=ACME).status == 200
    default_engine().ctx.metric_queues.forget()  # a minute on: the list is read again
    with psycopg.connect(database_url) as other:
        other.execute("LOCK TABLE tierq_queues IN ACCESS EXCLUSIVE MODE")
        enqueued = call("POST", "/v1/queues/q/tasks", {"payload": 2}, claims=ACME)
        claimed = call("POST", "/v1/queues/q/claims", {"max": 2}, claims=ACME)
        tasks = claimed.body["tasks"] if claimed.status == 200 else []
        acked = call("POST", "/v1/queues/q/acks", {"acks": [
            {"id": t["id"], "lease_token": t["lease_token"]} for t in tasks[:1]]},
            claims=ACME)
        other.rollback()
    assert enqueued.status == 200, enqueued.body
    assert claimed.status == 200 and len(tasks) == 2, claimed.body
    assert acked.status == 200 and len(acked.body["acked"]) == 1, acked.body
    assert pg.execute(f"SELECT count(*) FROM {EVERY_TASK}").fetchone() == (1,)
    # the task claimed and not acked is still leased, not given back
    assert call("POST", "/v1/queues/q/claims", {"max": 2}, claims=ACME).body["tasks"] == []


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_failed_read_keeps_the_last_list_and_is_tried_again_later(
        make_tq: Any, database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    tq = make_tq(lock_timeout_ms=200)
    store = tq.ctx.store
    tq.put_queue("orders", {})
    clock = Clock()
    queues = MetricQueues(clock=clock)
    assert queues.configured(store) == {"orders"}  # no list yet: waited for
    tq.put_queue("invoices", {})
    clock.now += CACHE_SECONDS  # stale
    with psycopg.connect(database_url) as other, caplog.at_level(logging.WARNING):
        other.execute("LOCK TABLE tierq_queues IN ACCESS EXCLUSIVE MODE")
        assert queues.configured(store) == {"orders"}  # the list as it was
        queues.join()  # its read, in a thread, fails on the lock
        other.rollback()
    assert "reading the configured queues failed" in caplog.text
    # not read again before RETRY_SECONDS
    assert queues.configured(store) == {"orders"}
    queues.join()
    assert queues.configured(store) == {"orders"}
    clock.now += RETRY_SECONDS
    queues.configured(store)  # (starts the read)
    queues.join()
    assert queues.configured(store) == {"orders", "invoices"}
