"""The views of a queue: its counts, an admin's and a tenant's view of it, the counts of
each (queue, tenant), and the envelopes that list them (``QueueList``,
``DetailedMetrics``). :mod:`tierq.models.queues` and :mod:`tierq.models.envelopes` read
them from here on first use, so that a function that never shows a queue (the claim and
ack functions, the scheduled jobs but the reaper's gauges) never defines them."""


from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from tierq.models.base import Model
from tierq.models.envelope_base import NEXT_DESCRIPTION, Envelope
from tierq.models.queues import (
    GROUP_MAX_LEASED_DEFAULT,
    GROUP_MAX_LEASED_MAX,
    BackoffSettings,
    QueueSettings,
)
from tierq.models.tasks import MAX_TIMEOUT_SECONDS


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


class QueueList(Envelope):
    queues: list[AnyQueueView] = Field(
        description="Admin views for an admin; for a caller pinned to a tenant, tenant views "
                    "of the queues its tenant has had tasks in.")
    next: str | None = Field(default=None, description=NEXT_DESCRIPTION)


class DetailedMetrics(Envelope):
    queues: list[TenantCounts] = Field(description="One row per (queue, tenant).")
    timestamp: datetime
    next: str | None = Field(default=None, description=NEXT_DESCRIPTION)
