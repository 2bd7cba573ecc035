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
    "enqueue": ("tierq.api.routes.enqueue",),
    "claim": ("tierq.api.routes.claims",),
    "ack": ("tierq.api.routes.leases",),
    "admin": (
        "tierq.api.routes.queues",
        "tierq.api.routes.tasks",
        "tierq.api.routes.dlq",
        "tierq.api.routes.metrics",
        "tierq.api.routes.schedules",
        "tierq.api.routes.docs",
    ),
}
