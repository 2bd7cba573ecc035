"""The HTTP API (docs/architecture.md §10) over the engine, for the Lambda functions in
``functions/``.

* :mod:`tierq.aws.http.resolver`: one Powertools resolver per function (validation, strict JSON,
  errors), and the OpenAPI document of all routes.
* :mod:`tierq.aws.http.routes`: the routers, one module per resource, and which function serves
  which (``FUNCTION_ROUTERS``, kept equal to template.yaml's HttpApi events).
* :mod:`tierq.aws.http.errors`: the error shape and the mapping of every error to it.
* :mod:`tierq.aws.http.request`: the current request and tenant pinning (JWT ``tenant`` claim).
* :mod:`tierq.aws.http.models`, :mod:`tierq.aws.http.lease_bodies`,
  :mod:`tierq.aws.http.params`: bodies and parameters.
* :mod:`tierq.aws.runtime`: the engine built once per execution environment; Logger, Tracer.
* :mod:`tierq.aws.metrics`: EMF counters and gauges per queue.
"""
