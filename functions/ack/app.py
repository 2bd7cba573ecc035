"""The `ack` function: POST /v1/queues/{queue}/acks, …/nacks, …/releases and …/heartbeats
(tierq.api.routes.leases).

The route code lives in the tierq package (the Lambda layer).
"""

from tierq.api.resolver import http_handler

lambda_handler = http_handler("ack")
