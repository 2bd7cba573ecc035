"""The `cold_to_warm` function (EventBridge Scheduler, once a minute): promotes cold tasks to
the warm tier every TIERQ_COLD_TO_WARM_EVERY seconds (default 5) within one invocation."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tierq.api.runtime import logger, tracer
from tierq.scheduled.jobs import handle


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle("cold_to_warm", event, context)
