"""Live numbers: ``GET /v1/metrics/queues/detailed`` (per (queue, tenant): warm, cold, delayed,
leased and dead counts and the oldest ready task) and ``GET /v1/metrics/queues/running``
(current leases: who holds them, since when, until when)."""

from __future__ import annotations

from datetime import UTC, datetime

from aws_lambda_powertools.event_handler.api_gateway import Router

from tierq.api import request
from tierq.api.errors import responses
from tierq.api.models import DetailedMetrics, RunningMetrics
from tierq.api.params import QueueQuery
from tierq.api.runtime import engine

router = Router()


@router.get(
    "/v1/metrics/queues/detailed",
    summary="Counts per queue and tenant",
    operation_id="queueMetricsDetailed",
    tags=["metrics"],
    responses=responses("One row per (queue, tenant)."),
)
def detailed() -> DetailedMetrics:
    rows = [r for r in engine().detailed_counts() if request.visible(r.tenant)]
    return DetailedMetrics(queues=rows, timestamp=datetime.now(UTC))


@router.get(
    "/v1/metrics/queues/running",
    summary="Current leases",
    operation_id="queueMetricsRunning",
    tags=["metrics"],
    responses=responses("Every lease held now, oldest first."),
)
def running(queue: QueueQuery = None) -> RunningMetrics:
    leases = [r for r in engine().running(queue) if request.visible(r.tenant)]
    return RunningMetrics(running=leases, timestamp=datetime.now(UTC))
