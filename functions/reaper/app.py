"""The `reaper` function (EventBridge Scheduler, once a minute): every TIERQ_REAPER_EVERY
seconds (default 5) expires leases, re-pushes warm tasks Valkey lost and purges rows past
retention; emits the per-queue gauges (EMF) once a minute."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tierq.api.runtime import logger, tracer
from tierq.scheduled.jobs import handle


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle("reaper", event, context)
