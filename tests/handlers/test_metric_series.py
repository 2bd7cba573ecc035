"""CloudWatch series follow what an admin configured, not what tenants invent: the EMF
counts of a queue without settings go to ``queue=~other``, a configured queue's to its own
name, and the template's queue alarms leave ``~other`` out, so no tenant can page the
operator or make a new billed metric by naming a queue."""

from __future__ import annotations

from typing import Any

import pytest

from tests.handlers.support import Invoke, emf_lines
from tests.support.template import load_template
from tierq.logic.metric_queues import OTHER

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
