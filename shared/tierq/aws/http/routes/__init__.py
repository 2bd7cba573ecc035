"""Routers of the HTTP API, one module per resource, each exposing a Powertools ``Router``
named ``router``.

``FUNCTION_ROUTERS`` says which function serves which routers; it must agree with the
HttpApi events of template.yaml (tests/handlers/test_routes.py checks that every function
serves exactly the routes the template gives it). To add a resource, write its module here
and add it to the tuple of the function that serves it; ``GET /v1/openapi.json`` documents
every router listed.
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
