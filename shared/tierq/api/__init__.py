"""The HTTP API (docs/architecture.md §10) over the engine, for the Lambda functions in
``functions/``.

* :mod:`tierq.api.resolver`: one Powertools resolver per function (validation, strict JSON,
  errors), and the OpenAPI document of all routes.
* :mod:`tierq.api.routes`: the routers, one module per resource, and which function serves
  which (``FUNCTION_ROUTERS``, kept equal to template.yaml's HttpApi events).
* :mod:`tierq.api.errors`: the error shape and the mapping of every error to it.
* :mod:`tierq.api.request`: the current request and tenant pinning (JWT ``tenant`` claim).
* :mod:`tierq.api.models`, :mod:`tierq.api.params`: bodies and parameters.
* :mod:`tierq.api.runtime`: the engine built once per execution environment; Logger, Tracer.
* :mod:`tierq.api.metrics`: EMF counters and gauges per queue.
"""
