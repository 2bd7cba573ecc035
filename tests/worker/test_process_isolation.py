"""``isolation="process"`` hands its child's handler what the thread's handler gets, on the
local stack: a big payload itself (not its pointer), ``task.set_progress`` relayed to the
lease's heartbeats (seen over HTTP, 4 KiB checked in the child), and a span that continues
the task's trace around the child's run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.local_api import QueueNames
from tests.support.polling import eventually
from tests.worker import handlers
from tests.worker.test_big_payloads import big_payload, object_of
from tests.worker.test_cancel_and_timeout import Threaded
from tests.worker.test_traces import TRACEPARENT, spans
from tests.worker.test_worker import check_progress, seen_over_http
from tierq.client import Client
from tierq.client.tracing import OpenTelemetryTracer
from tierq.client.worker import Worker

__all__ = ["spans"]  # (the fixture, used by name)


def test_a_process_handler_gets_a_big_payload_and_runs_in_the_tasks_trace(
        api: Client, names: QueueNames, spans: tuple[Any, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    queue = names["proc_big"]
    payload = big_payload("process")
    task_id = api.enqueue_one(queue, payload, trace={"traceparent": TRACEPARENT}).id
    assert object_of(api, queue, task_id).exists()  # the task carries a pointer
    stats = Worker(api, queue, handlers.describes_payload, concurrency=1, burst=True,
                   wait_seconds=0.5, install_signal_handlers=False, isolation="process",
                   tracer=OpenTelemetryTracer(tracer)).run()
    assert (stats.acked, stats.retried, stats.dead) == (1, 0, 0)
    task = api.get_task(queue, task_id)
    assert task.result == {"tag": "process", "blob": len(payload["blob"]),
                           "traceparent": TRACEPARENT}
    [span] = [s for s in exporter.get_finished_spans() if s.name == f"{queue} process"]
    assert span.parent is not None
    assert (span.parent.trace_id, span.parent.span_id) == (int(TRACEPARENT[3:35], 16),
                                                            int(TRACEPARENT[36:52], 16))
    assert span.attributes is not None
    assert span.attributes["messaging.message.id"] == str(task_id)


def test_a_process_handlers_progress_is_seen_over_http(
        api: Client, names: QueueNames, tmp_path: Path) -> None:
    queue = names["proc_progress"]
    go, end = tmp_path / "go", tmp_path / "end"
    task_id = api.enqueue_one(queue, {"go": str(go), "end": str(end)}).id
    # a 60-second lease is heartbeated every 20 s: progress rides a heartbeat of its own
    worker = Threaded(api, queue, handlers.reports_progress, concurrency=1,
                      lease_seconds=60, isolation="process")
    try:
        eventually(lambda: seen_over_http(api, queue, task_id, {"step": 1}), timeout=30,
                   what="step 1 over HTTP")
        go.touch()
        eventually(lambda: seen_over_http(api, queue, task_id, {"step": 2}), timeout=10,
                   what="step 2 over HTTP")
        end.touch()
        eventually(lambda: api.get_task(queue, task_id).state == "done", timeout=10,
                   what="the task acked")
    finally:
        stats = worker.stop()
    check_progress(api, queue, task_id, stats)
