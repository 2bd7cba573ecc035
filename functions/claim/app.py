"""The `claim` function: POST /v1/queues/{queue}/claims (tierq.api.routes.claims).

The route code lives in the tierq package (the Lambda layer).
"""

from tierq.api.resolver import http_handler

lambda_handler = http_handler("claim")
