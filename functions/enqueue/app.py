"""The `enqueue` function: POST /v1/queues/{queue}/tasks (tierq.api.routes.enqueue).

The route code lives in the tierq package (the Lambda layer).
"""

from tierq.api.resolver import http_handler

lambda_handler = http_handler("enqueue")
