"""The local stack (``tierq dev``): the HTTP API and the scheduled functions of template.yaml
served from this machine, invoking the same handlers (``functions/*/app.py``) in-process
with the events API Gateway and EventBridge Scheduler would send.

* :mod:`tierq.local.gateway.template`: routes, functions and schedules read from template.yaml.
* :mod:`tierq.local.gateway.events`: payload v2 events and API Gateway's reading of results.
* :mod:`tierq.local.gateway.lambdas`: loading a function's handler; the Lambda context.
* :mod:`tierq.local.gateway.http`: the HTTP server (404/405/413 like API Gateway; the local-only
  ``x-tierq-jwt-claims`` header standing in for a JWT's claims, required on every API route
  unless the server listens on a loopback address).
* :mod:`tierq.local.gateway.scheduler`: schedules run on their rate.
* :mod:`tierq.local.gateway.stack`: all of it, with PostgreSQL, Valkey and migrations.
* :mod:`tierq.local.gateway.child`: ``tierq dev --no-services`` as a child process (the demo,
  the tests).
"""

from tierq.local.gateway.stack import DevOptions, DevStack, GatewayStackError

__all__ = ["DevOptions", "DevStack", "GatewayStackError"]
