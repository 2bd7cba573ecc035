"""What runs on AWS: the Lambda runtime over the engine.

* :mod:`tierq.aws.runtime`: the engine built once per execution environment; Logger, Tracer.
* :mod:`tierq.aws.http`: the HTTP API (API Gateway → Lambda): routes, access, errors, paging.
* :mod:`tierq.aws.scheduled`: the EventBridge-scheduled maintenance functions.
* :mod:`tierq.aws.metrics`: EMF counters and gauges per queue.
* :mod:`tierq.aws.custom_resource`: the CloudFormation custom resource that migrates.
"""
