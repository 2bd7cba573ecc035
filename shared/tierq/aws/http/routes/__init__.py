"""Routers of the HTTP API, one module per resource, each exposing a Powertools ``Router``
named ``router``.

``FUNCTION_ROUTERS`` says which function serves which routers; it must agree with the
HttpApi events of template.yaml (tests/handlers/test_routes.py checks that every function
serves exactly the routes the template gives it). ``MODULE_ROUTES`` lists each module's
routes, so that a function imports a route module only when a request for one of its routes
arrives (:class:`tierq.aws.http.resolver.TierqResolver`); a request no entry matches loads
every router of its function, and tests/handlers/test_routes.py checks the list against the
routers. To add a resource, write its module here, add it to the tuple of the function that
serves it and list its routes; ``GET /v1/openapi.json`` documents every router listed.
"""

from __future__ import annotations

FUNCTION_ROUTERS: dict[str, tuple[str, ...]] = {
    "enqueue": ("tierq.aws.http.routes.enqueue", "tierq.aws.http.routes.flows",
                "tierq.aws.http.routes.payloads"),
    "claim": ("tierq.aws.http.routes.claims", "tierq.aws.http.routes.payload_fetch"),
    "ack": ("tierq.aws.http.routes.leases",),
    "admin": (
        "tierq.aws.http.routes.queues",
        "tierq.aws.http.routes.tasks",
        "tierq.aws.http.routes.dlq",
        "tierq.aws.http.routes.metrics",
        "tierq.aws.http.routes.consumers",
        "tierq.aws.http.routes.schedules",
        "tierq.aws.http.routes.docs",
    ),
}

# Each route module's routes, as template.yaml writes them ("METHOD /path/{parameter}").
MODULE_ROUTES: dict[str, tuple[str, ...]] = {
    "tierq.aws.http.routes.enqueue": ("POST /v1/queues/{queue}/tasks",),
    "tierq.aws.http.routes.flows": ("POST /v1/flows",),
    "tierq.aws.http.routes.payloads": ("POST /v1/queues/{queue}/payloads",),
    "tierq.aws.http.routes.claims": ("POST /v1/queues/{queue}/claims",),
    "tierq.aws.http.routes.payload_fetch": ("POST /v1/queues/{queue}/payloads/fetch",),
    "tierq.aws.http.routes.leases": (
        "POST /v1/queues/{queue}/acks",
        "POST /v1/queues/{queue}/nacks",
        "POST /v1/queues/{queue}/releases",
        "POST /v1/queues/{queue}/heartbeats",
    ),
    "tierq.aws.http.routes.queues": (
        "GET /v1/queues",
        "GET /v1/queues/{queue}",
        "PUT /v1/queues/{queue}",
    ),
    "tierq.aws.http.routes.tasks": (
        "GET /v1/queues/{queue}/tasks/{id}",
        "DELETE /v1/queues/{queue}/tasks/{id}",
        "POST /v1/queues/{queue}/tasks/{id}/cancel",
    ),
    "tierq.aws.http.routes.dlq": (
        "GET /v1/queues/{queue}/dlq",
        "POST /v1/queues/{queue}/dlq/replay",
        "POST /v1/queues/{queue}/dlq/purge",
    ),
    "tierq.aws.http.routes.metrics": (
        "GET /v1/metrics/queues/detailed",
        "GET /v1/metrics/queues/running",
        "GET /v1/queues/{queue}/throughput",
    ),
    "tierq.aws.http.routes.consumers": ("GET /v1/metrics/consumers",),
    "tierq.aws.http.routes.schedules": (
        "GET /v1/schedules",
        "PUT /v1/schedules/{name}",
        "GET /v1/schedules/{name}",
        "DELETE /v1/schedules/{name}",
    ),
    "tierq.aws.http.routes.docs": ("GET /v1/openapi.json", "GET /dashboard"),
}
