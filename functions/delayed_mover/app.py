"""The `delayed_mover` function (EventBridge Scheduler, once a minute): makes due delayed
tasks ready every TIERQ_DELAYED_EVERY seconds (default 1) within one invocation."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tierq.api.runtime import logger, tracer
from tierq.scheduled.jobs import handle


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle("delayed_mover", event, context)
