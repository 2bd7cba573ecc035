"""The `ack` function: POST /v1/queues/{queue}/acks, …/nacks, …/releases and …/heartbeats
(tierq.aws.http.routes.leases).

The route code lives in the tierq package (the Lambda layer).
"""

from tierq.core.cold_start import initialising

with initialising():
    from tierq.aws.http.resolver import http_handler

    lambda_handler = http_handler("ack")
