"""The dispatcher's CloudWatch counts: one EMF blob per batch and queue with Dispatched,
Throttled and ConsumerErrors (zeros left out), the names the dashboards and alarms read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tierq.aws import metrics
from tierq.logic.dispatch import DispatchCounts


def test_a_batch_emits_its_counts_as_emf(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch, make_tq: Any) -> None:
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    # the engine's settings name the namespace (POWERTOOLS_METRICS_NAMESPACE)
    tq = make_tq(powertools_metrics_namespace="TierqDispatchTest")
    tq.put_queue("orders", {})  # (configured: its counts carry its name)
    counts = DispatchCounts(batches=1, dispatched=10, acked=8, retried=2, consumer_errors=0,
                            throttled=0)
    metrics.count_queue(tq.ctx, "orders", counts.metrics())
    metrics.count_queue(tq.ctx, "orders", DispatchCounts(throttled=1, released=10).metrics())
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    assert len(blobs) == 2
    first, second = blobs
    assert first["queue"] == "orders" and first["Dispatched"] in (10.0, [10.0])
    assert "Throttled" not in first and "ConsumerErrors" not in first
    [directive] = first["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "TierqDispatchTest"
    assert any("queue" in d for d in directive["Dimensions"])
    assert {m["Name"] for m in directive["Metrics"]} == {"Dispatched"}
    assert second["Throttled"] in (1.0, [1.0]) and "Dispatched" not in second
