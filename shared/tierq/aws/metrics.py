"""Queue metrics as CloudWatch EMF log lines (Powertools metrics), namespace ``Tierq``, one
blob per queue with the dimension ``queue`` (Powertools adds ``service``).

The dimension is a queue's name only for the queues an admin configured, at most 500
(tierq.logic.metric_queues): every other queue counts under ``queue=~other``, so no name a
tenant invents makes a new billed metric, and the template's alarms leave ``~other`` out.
``count_queue`` / ``count_queues`` pick the value (a queue's counts are emitted only through
them, so no caller can put a tenant-chosen name in the dimension); ``queue_gauge`` takes the
value its caller picked (tierq.maintenance.gauges).

Counting never fails a request. It runs after the request's work is done (an enqueue
committed, an ack applied, tasks leased), and whatever goes wrong in it is logged and the
counts are dropped: an EMF blob refused, or the list of configured queues unreadable (it is
read off the request path, and a failed read is not fatal).

* Counts, from the requests and from the dispatcher (push delivery to consumer functions);
  ``GET /v1/metrics/consumers`` shows the dispatcher's per queue.

  | count              | counted by                                                     |
  | ------------------ | -------------------------------------------------------------- |
  | ``Enqueued``       | an enqueue, per task                                           |
  | ``Claimed``        | a claim, per task                                              |
  | ``Acked``          | an ack, per task                                               |
  | ``Nacked``         | a nack, per task (retried or dead)                             |
  | ``Released``       | a release, per task given back unfinished                      |
  | ``DeadLettered``   | a nack, or lease expiry in the reaper                          |
  | ``Dispatched``     | the dispatcher, per task handed to a function                  |
  | ``Throttled``      | the dispatcher, per invocation throttled (its batch released)  |
  | ``ConsumerErrors`` | the dispatcher, per invocation failed: a function error, an    |
  |                    | invoke refused or cut off                                      |

* Gauges, from the reaper's invocations: ``Warm``, ``Waiting`` (flow children waiting for
  their parents), ``Held`` (group members behind their group's running task), ``Cold``,
  ``Delayed``, ``Leased``, ``Dead`` and ``OldestReadyAgeSeconds`` (the template's alarms
  use the last one and ``DeadLettered``, grouped by ``queue``), about once a minute for each
  queue that has tasks, and zeros once for a queue that has just emptied.

* ``ShardDown`` (dimension ``shard``, not ``queue``): 1 from each scheduled tick for each
  shard of a sharded deployment that did not answer it (its pairs wait); the template's
  ``ShardDownAlarm`` groups it by shard.
* ``TaskSeqUsedPercent`` (dimension ``shard``: each shard has its own sequence, one shard
  without shards): how much of ``tierq_task_seq`` is used, from each gauge round
  (tierq.maintenance.gauges); the template's ``TaskSeqAlarm`` groups it by shard.

Each call builds its own ``EphemeralMetrics``, so concurrent requests for different queues
(the local stack serves them from threads) never mix their dimensions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from tierq.aws.runtime import SERVICE, logger
from tierq.config import Settings, get_settings
from tierq.logic.context import Context

GAUGES = ("warm", "waiting", "held", "cold", "delayed", "leased", "dead")


def _new_blob(settings: Settings | None = None) -> EphemeralMetrics:
    """An empty blob in the namespace of POWERTOOLS_METRICS_NAMESPACE (``settings``', by
    default the process's)."""
    namespace = (settings or get_settings()).powertools_metrics_namespace
    return EphemeralMetrics(namespace=namespace, service=SERVICE)


def _blob(queue: str, settings: Settings | None = None) -> EphemeralMetrics:
    blob = _new_blob(settings)
    blob.add_dimension(name="queue", value=queue)
    return blob


def count_queue(ctx: Context, queue: str, counts: Mapping[str, int]) -> None:
    """Emit one queue's non-zero counters under its series (its name, or ``~other``);
    never raises (a failure is logged)."""
    if not any(counts.values()):
        return
    try:
        _count(ctx.metric_queues.series(ctx.store, queue), counts, ctx.settings)
    except Exception:
        logger.warning("metrics not emitted (the request's work is done)", exc_info=True)


def count_queues(ctx: Context, name: str, per_queue: Mapping[str, int]) -> None:
    """Emit the counter ``name`` of several queues, summed by series (``~other`` once);
    never raises (a failure is logged)."""
    try:
        summed: dict[str, int] = defaultdict(int)
        for queue, value in per_queue.items():
            summed[ctx.metric_queues.series(ctx.store, queue)] += value
        for series, value in sorted(summed.items()):
            _count(series, {name: value}, ctx.settings)
    except Exception:
        logger.warning("metrics not emitted", exc_info=True)


def _count(series: str, counts: Mapping[str, int], settings: Settings) -> None:
    """Emit non-zero counters (``{"Enqueued": 3}``) under the dimension value ``series``
    (picked for a queue by ``count_queue``)."""
    values = {name: value for name, value in counts.items() if value}
    if not values:
        return
    blob = _blob(series, settings)
    for name, value in values.items():
        blob.add_metric(name=name, unit=MetricUnit.Count, value=value)
    blob.flush_metrics()


def shard_down(job: str, shards: Iterable[str]) -> None:
    """Emit ``ShardDown`` = 1 for each shard that did not answer a tick of ``job``."""
    for shard in shards:
        blob = _new_blob()
        blob.add_dimension(name="shard", value=shard)
        blob.add_metadata(key="job", value=job)
        blob.add_metric(name="ShardDown", unit=MetricUnit.Count, value=1)
        blob.flush_metrics()


def task_seq_used(shard: str, percent: float) -> None:
    """Emit ``TaskSeqUsedPercent`` of one shard's ``tierq_task_seq``."""
    blob = _new_blob()
    blob.add_dimension(name="shard", value=shard)
    blob.add_metric(name="TaskSeqUsedPercent", unit=MetricUnit.Percent, value=percent)
    blob.flush_metrics()


def queue_gauge(queue: str, values: Mapping[str, float]) -> None:
    """Emit one queue's gauges (``warm`` … ``dead`` and ``oldest_ready_age_seconds``)."""
    blob = _blob(queue)
    for name in GAUGES:
        blob.add_metric(name=name.capitalize(), unit=MetricUnit.Count, value=values[name])
    blob.add_metric(name="OldestReadyAgeSeconds", unit=MetricUnit.Seconds,
                    value=values.get("oldest_ready_age_seconds", 0.0))
    blob.flush_metrics()
