"""What runs on a developer's machine: the local stack.

* :mod:`tierq.local.services`: private PostgreSQL and Valkey/Redis servers (or the ones
  ``DATABASE_URL`` / ``VALKEY_URL`` name).
* :mod:`tierq.local.gateway`: ``tierq dev``, the local API Gateway and EventBridge that run
  the functions of ``template.yaml`` in-process.
* :mod:`tierq.local.demo`: the end-to-end demo on a local stack that ``tierq demo``
  (:mod:`tierq.cli.demo`) runs.
"""
