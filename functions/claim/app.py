"""The `claim` function: POST /v1/queues/{queue}/claims (tierq.aws.http.routes.claims).

The route code lives in the tierq package (the Lambda layer).
"""

from tierq.core.cold_start import initialising

with initialising():
    from tierq.aws.http.resolver import http_handler

    lambda_handler = http_handler("claim")
