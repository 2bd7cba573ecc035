"""The `admin` function: queues, tasks, dead letters, metrics, schedules, /v1/openapi.json
and /dashboard (the routers of tierq.api.routes.FUNCTION_ROUTERS["admin"]).

The route code lives in the tierq package (the Lambda layer).
"""

from tierq.api.resolver import http_handler

lambda_handler = http_handler("admin")
