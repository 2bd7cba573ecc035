"""The `admin` function: queues, tasks, dead letters, metrics, schedules, /v1/openapi.json
and /dashboard (the routers of tierq.aws.http.routes.FUNCTION_ROUTERS["admin"]).

The route code lives in the tierq package (the Lambda layer).
"""

from tierq.core.cold_start import initialising

with initialising():
    from tierq.aws.http.resolver import http_handler

    lambda_handler = http_handler("admin")
