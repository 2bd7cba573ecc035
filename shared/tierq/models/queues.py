"""Per-queue settings, counts and views."""


import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, model_validator

from tierq.core.backoff import BackoffPolicy
from tierq.models.base import Model
from tierq.models.strict import RequestModel
from tierq.models.tasks import MAX_TIMEOUT_SECONDS

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


class QueueSettingsUpdate(RequestModel):
    """PUT /v1/queues/{queue}: only the fields given change."""

    model_config = ConfigDict(extra="forbid")

    warm_max: int | None = Field(default=None, ge=1, le=1_000_000)
    # bytes of task data held warm per (queue, tenant); an empty warm set still takes one
    # task, however large
    warm_max_bytes: int | None = Field(default=None, ge=WARM_MAX_BYTES_MIN,
                                       le=WARM_MAX_BYTES_MAX)
    lease_seconds: int | None = Field(default=None, ge=1, le=43_200)
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    backoff: BackoffSettings | None = None
    retention_seconds: int | None = Field(default=None, ge=0, le=10 * 366 * 86_400)
    paused: bool | None = Field(default=None, strict=True)  # "true" or 1 is not a boolean
    # The limits and the consumer: left out keeps the stored value, null clears it.
    max_leased: int | None = Field(default=None, ge=1, le=LIMIT_MAX)
    rate: RateLimit | None = None
    tenant_max_leased: int | None = Field(default=None, ge=1, le=LIMIT_MAX)
    tenant_rate: RateLimit | None = None
    consumer: ConsumerSettings | None = None
    # null restores the default (1)
    group_max_leased: int | None = Field(default=None, ge=1, le=GROUP_MAX_LEASED_MAX)
    # the time limit of an attempt of the queue's tasks without their own; null: none
    timeout_seconds: int | None = Field(default=None, ge=1, le=MAX_TIMEOUT_SECONDS)

    def clears(self, field: str) -> bool:
        """Whether ``field`` was given as null (to clear it), not left out."""
        return field in self.model_fields_set and getattr(self, field) is None

    def given(self, field: str) -> bool:
        """Whether ``field`` was given (a value, or null to clear it)."""
        return field in self.model_fields_set


# The settings that null clears in a PUT.
CLEARABLE = frozenset({"max_leased", "rate", "tenant_max_leased", "tenant_rate", "consumer",
                       "group_max_leased", "timeout_seconds"})


class QueueCounts(Model):
    warm: int = 0  # ready in the warm tier
    waiting: int = 0  # enqueued with after, their parents not all finished (flows)
    held: int = 0  # behind their group's active tasks (groups)
    cold: int = 0
    delayed: int = 0
    leased: int = 0
    dead: int = 0


class LimitsUse(Model):
    """How much of each limit of a queue is in use now (a field is null when its limit is
    not set)."""

    leased: int | None = Field(
        default=None, description="Tasks leased now, counted against max_leased.")
    rate_tokens: float | None = Field(
        default=None, description="Tokens in the queue's rate bucket now (of burst): tasks "
                                  "that may go out at once.")
    tenant_leased_max: int | None = Field(
        default=None, description="The most tasks one tenant holds leased now, counted "
                                  "against tenant_max_leased.")
    tenant_rate_tokens_min: float | None = Field(
        default=None, description="The fewest tokens one tenant's rate bucket holds now "
                                  "(of tenant_rate's burst).")


class QueueView(Model):
    """A queue as an admin sees it: every setting, every tenant's counts, the limits' use."""

    view: Literal["admin"] = Field(
        default="admin", description="Which view this is: `admin`, the whole queue.")
    queue: str
    settings: QueueSettings
    counts: QueueCounts
    mode: Literal["warm", "cold"]
    tenants: list[str] = Field(
        default_factory=list,
        description="The queue's first tenants by name, at most 100 (a queue may have "
                    "hundreds of thousands); `tenants_total` counts them all and "
                    "`/v1/metrics/queues/detailed?queue=` pages through every one.")
    tenants_total: int = Field(default=0, description="How many tenants the queue has.")
    tenants_truncated: bool = Field(
        default=False, description="Whether `tenants` lists only the first of them.")
    limits_use: LimitsUse | None = Field(
        default=None, description="How much of each limit is in use now; null when the "
                                  "queue has no limits.")


class WorkerSettings(Model):
    """The settings of a queue that its workers read, and all a tenant is shown of them."""

    lease_seconds: int = Field(ge=1, le=43_200,
                               description="The lease a claim takes when it names none.")
    max_attempts: int = Field(ge=1, le=1000,
                              description="Attempts before a task is dead-lettered.")
    backoff: BackoffSettings = Field(description="The wait before a failed task's retry.")
    paused: bool = Field(default=False, description="A paused queue hands out nothing.")
    group_max_leased: int = Field(
        default=GROUP_MAX_LEASED_DEFAULT, ge=1, le=GROUP_MAX_LEASED_MAX,
        description="Tasks of one group (a task's `group`) active at once, at most.")
    timeout_seconds: int | None = Field(
        default=None, ge=1, le=MAX_TIMEOUT_SECONDS,
        description="The time limit of an attempt of a task without its own (null: none).")

    @classmethod
    def of(cls, settings: QueueSettings) -> "WorkerSettings":
        return cls(lease_seconds=settings.lease_seconds, max_attempts=settings.max_attempts,
                   backoff=settings.backoff, paused=settings.paused,
                   group_max_leased=settings.group_max_leased,
                   timeout_seconds=settings.timeout_seconds)


class TenantQueueView(Model):
    """A queue as a caller pinned to a tenant sees it: the settings its workers read (the
    queue's once its tenant has used the queue, the deployment's defaults before) and its own
    tenant's counts. Never the consumer, the limits, the capacity settings or another
    tenant's numbers; and the same answer for a name nobody used (the defaults, zero
    counts) as for a queue, configured or not, with other tenants' tasks only."""

    view: Literal["tenant"] = Field(
        default="tenant", description="Which view this is: `tenant`, one tenant's part.")
    queue: str
    tenant: str = Field(description="The caller's tenant, whose counts these are.")
    settings: WorkerSettings
    counts: QueueCounts = Field(description="The tenant's own tasks in the queue.")
    mode: Literal["warm", "cold"] = Field(
        default="warm", description="Where the tenant's ready tasks wait now: `cold` while "
                                    "some wait in PostgreSQL.")


def _view_kind(value: Any) -> str:
    """Which view a body or object is (``admin`` when it does not say: an older server)."""
    kind = value.get("view") if isinstance(value, dict) else getattr(value, "view", None)
    return kind if kind in ("admin", "tenant") else "admin"


# What GET /v1/queues/{queue} answers (and GET /v1/queues lists): an admin's view, or a pinned
# caller's, told apart by ``view``.
AnyQueueView = Annotated[
    Annotated[QueueView, Tag("admin")] | Annotated[TenantQueueView, Tag("tenant")],
    Discriminator(_view_kind),
]


class TenantCounts(Model):
    queue: str
    tenant: str
    warm: int
    cold: int
    # enqueued with after, their parents not all finished (flows); 0 from a server without
    waiting: int = 0
    # behind their group's active tasks (groups); 0 from a server without
    held: int = 0
    delayed: int
    leased: int
    dead: int
    mode: Literal["warm", "cold"] = "warm"
    oldest_ready_at: datetime | None = None
    oldest_ready_age_seconds: float | None = None
    groups: int = Field(default=0, description="Groups of the pair with work (active or "
                                               "held tasks).")
    oldest_group_head_at: datetime | None = Field(
        default=None, description="The earliest time one of the pair's groups with work "
                                  "had its head made active: its head has been at the "
                                  "front since (null without groups).")
    oldest_group_head_age_seconds: float | None = Field(
        default=None, description="Seconds since `oldest_group_head_at`.")
