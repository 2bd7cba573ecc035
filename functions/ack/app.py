"""The `ack` function: POST /v1/queues/{queue}/acks, …/nacks and …/heartbeats
(tierq.api.routes.leases).

Thin: the route code lives in the tierq package (Lambda layer); this module builds the
resolver once per execution environment and hands it each API Gateway (payload v2) event.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from tierq.api.resolver import build_resolver
from tierq.api.runtime import logger, tracer

app = build_resolver("ack")


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler(capture_response=False)  # task payloads stay out of traces
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
