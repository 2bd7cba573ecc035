"""The `enqueue` function: POST /v1/queues/{queue}/tasks (tierq.aws.http.routes.enqueue) and
POST /v1/flows (tierq.aws.http.routes.flows).

The route code lives in the tierq package (the Lambda layer).
"""

from tierq.core.cold_start import initialising

with initialising():
    from tierq.aws.http.resolver import http_handler

    lambda_handler = http_handler("enqueue")
