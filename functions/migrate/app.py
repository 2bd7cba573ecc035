"""The `migrate` function: the CloudFormation custom resource that applies the SQL
migrations on stack create and update (see tierq.aws.custom_resource)."""

from __future__ import annotations

from typing import Any

from tierq.core.cold_start import initialising

with initialising():
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from tierq.aws.custom_resource import handle
    from tierq.aws.runtime import logger, tracer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context)
