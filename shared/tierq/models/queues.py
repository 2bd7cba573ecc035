"""Per-queue settings: the deployment's defaults over a queue's own.

Their update (``QueueSettingsUpdate``, :mod:`tierq.models.queue_update`) and the views of a
queue (its counts, an admin's and a tenant's view, the per-tenant counts,
:mod:`tierq.models.queue_views`) are read here on first use: every request reads a queue's
settings, only the admin function's and a few jobs' change them or build their views."""


import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from tierq.core.backoff import BackoffPolicy
from tierq.models.base import Model
from tierq.models.bounds import MAX_TIMEOUT_SECONDS
from tierq.models.strict import RequestModel

if TYPE_CHECKING:
    from tierq.models.queue_update import QueueSettingsUpdate as QueueSettingsUpdate
    from tierq.models.queue_views import AnyQueueView as AnyQueueView
    from tierq.models.queue_views import LimitsUse as LimitsUse
    from tierq.models.queue_views import QueueCounts as QueueCounts
    from tierq.models.queue_views import QueueView as QueueView
    from tierq.models.queue_views import TenantCounts as TenantCounts
    from tierq.models.queue_views import TenantQueueView as TenantQueueView
    from tierq.models.queue_views import WorkerSettings as WorkerSettings

# warm_max_bytes: from 1 KiB (tests, tiny queues) to 1 TiB
WARM_MAX_BYTES_MIN = 1024
WARM_MAX_BYTES_MAX = 1 << 40


class BackoffSettings(RequestModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["fixed", "linear", "exponential"] = "exponential"
    base_seconds: float = Field(default=2.0, ge=0, le=86_400)
    cap_seconds: float = Field(default=3600.0, ge=0, le=366 * 86_400)
    jitter: float = Field(default=0.1, ge=0, le=1)

    @model_validator(mode="after")
    def _cap_not_below_base(self) -> "BackoffSettings":
        if self.cap_seconds < self.base_seconds:
            raise ValueError("cap_seconds must be >= base_seconds")
        return self

    def policy(self) -> BackoffPolicy:
        return BackoffPolicy(self.kind, self.base_seconds, self.cap_seconds, self.jitter)


# Limits on claims: a count of leases or a rate of tasks handed out, per queue or per tenant.
LIMIT_MAX = 1_000_000
# group_max_leased: its default (strictly one at a time) and its largest value
GROUP_MAX_LEASED_DEFAULT = 1
GROUP_MAX_LEASED_MAX = 1000
# A consumer's batching window may be up to 5 minutes, as an SQS event source mapping's.
BATCHING_WINDOW_MAX_MS = 300_000
CONSUMER_BATCH_MAX = 100
CONSUMER_CONCURRENCY_MAX = 10_000
CONSUMER_FUNCTION_MAX = 512


# the slowest rate: one token every 10,000 s (far slower ones would overflow the wait the
# bucket computes for retry_after_ms)
RATE_MIN = 1e-4


class RateLimit(RequestModel):
    """A token bucket on the tasks a claim hands out: it holds at most ``burst`` tokens and
    refills at ``per_second``; each task handed out takes one. Counted on the warm tier's
    clock (``TIME``), not the callers'."""

    model_config = ConfigDict(extra="forbid")

    per_second: float = Field(ge=RATE_MIN, le=LIMIT_MAX, allow_inf_nan=False,
                              description="Tokens added per second (may be below 1; at "
                                          "least 0.0001, one every 2.8 hours).")
    burst: int = Field(default=0, ge=0, le=LIMIT_MAX,
                       description="Tokens the bucket holds at most: how many tasks may go "
                                   "out at once after a quiet spell. Left out (or 0): "
                                   "per_second rounded up, at least 1.")

    @model_validator(mode="after")
    def _burst_default(self) -> "RateLimit":
        if self.burst == 0:
            self.burst = max(1, math.ceil(self.per_second))
        return self


class ConsumerSettings(RequestModel):
    """A function the dispatcher calls with batches of the queue's tasks, shaped as SQS
    events (a Lambda function name or ARN on AWS; locally also ``module:function``)."""

    model_config = ConfigDict(extra="forbid")

    function: str = Field(min_length=1, max_length=CONSUMER_FUNCTION_MAX,
                          pattern=r"^\S+$",
                          description="The function to call: a Lambda function name or ARN "
                                      "(from the stack's allow-list), or locally a function "
                                      "of template.yaml or an importable module:function.")
    batch_size: int = Field(default=10, ge=1, le=CONSUMER_BATCH_MAX,
                            description="Tasks per invocation at most.")
    max_concurrency: int | None = Field(
        default=None, ge=1, le=CONSUMER_CONCURRENCY_MAX,
        description="Invocations of the function running at once for this queue, at most "
                    "(null: no limit but the queue's own limits).")
    max_batching_window_ms: int = Field(
        default=0, ge=0, le=BATCHING_WINDOW_MAX_MS,
        description="How long to wait for a full batch before calling with fewer.")


class QueueSettings(Model):
    """A queue's effective settings (stored values over the deployment defaults)."""

    warm_max: int = Field(ge=1, le=1_000_000)
    # (a default, so that a client still reads the settings of a server without it)
    warm_max_bytes: int = Field(default=64 * 1024 * 1024, ge=WARM_MAX_BYTES_MIN,
                                le=WARM_MAX_BYTES_MAX)
    lease_seconds: int = Field(ge=1, le=43_200)
    max_attempts: int = Field(ge=1, le=1000)
    backoff: BackoffSettings
    retention_seconds: int = Field(ge=0, le=10 * 366 * 86_400)
    paused: bool = False
    max_leased: int | None = Field(
        default=None, ge=1, le=LIMIT_MAX,
        description="Tasks of the queue leased at once, at most, over all tenants (null: no "
                    "limit).")
    rate: RateLimit | None = Field(
        default=None, description="A token bucket on the tasks the queue hands out (null: "
                                  "no limit).")
    tenant_max_leased: int | None = Field(
        default=None, ge=1, le=LIMIT_MAX,
        description="Tasks of each tenant leased at once, at most (null: no limit).")
    tenant_rate: RateLimit | None = Field(
        default=None, description="A token bucket per tenant on the tasks it is handed "
                                  "(null: no limit).")
    consumer: ConsumerSettings | None = Field(
        default=None, description="The function the dispatcher calls with the queue's "
                                  "tasks (null: none; workers claim over HTTP).")
    group_max_leased: int = Field(
        default=GROUP_MAX_LEASED_DEFAULT, ge=1, le=GROUP_MAX_LEASED_MAX,
        description="Tasks of one group (a task's `group`) active at once, at most: the "
                    "others wait, held in enqueue order (1: strictly one at a time).")
    timeout_seconds: int | None = Field(
        default=None, ge=1, le=MAX_TIMEOUT_SECONDS,
        description="The longest one attempt of a task without a `timeout_seconds` of its "
                    "own may run: heartbeats do not extend its lease past it, and an attempt "
                    "that reaches it fails with `timeout` (retried with the backoff, "
                    "dead-lettered past max_attempts). Null: no limit.")


# The settings that null clears in a PUT.
CLEARABLE = frozenset({"max_leased", "rate", "tenant_max_leased", "tenant_rate", "consumer",
                       "group_max_leased", "timeout_seconds"})


_VIEWS = frozenset({"QueueCounts", "LimitsUse", "QueueView", "WorkerSettings", "TenantQueueView",
                    "AnyQueueView", "TenantCounts"})


def __getattr__(name: str) -> Any:
    if name in _VIEWS:
        from tierq.models import queue_views

        return getattr(queue_views, name)
    if name == "QueueSettingsUpdate":
        from tierq.models import queue_update

        return queue_update.QueueSettingsUpdate
    raise AttributeError(f"module 'tierq.models.queues' has no attribute {name!r}")
