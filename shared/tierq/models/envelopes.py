"""The response envelopes of the HTTP API, defined once: the server answers with them (and
the API document describes them) and the client reads them (docs/architecture.md §10).
The items inside (tasks, claims, outcomes, counts, leases) are the models of
:mod:`tierq.models`.

Fields a response carries that a model does not know are ignored (``extra="ignore"``, said
here, not left to pydantic's default), so a newer server never breaks an older client.

The envelopes of leases (``ClaimResults``, ``RunningMetrics``) are defined in
:mod:`tierq.models.lease_envelopes` and read here on first use, so that a function that
never answers a claim never imports the lease models."""


from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import ConfigDict, Field

from tierq.models.base import Model, Replayable
from tierq.models.queues import AnyQueueView, TenantCounts
from tierq.models.tasks import EnqueueOutcome, TaskView

if TYPE_CHECKING:
    from tierq.models.lease_envelopes import ClaimResults as ClaimResults
    from tierq.models.lease_envelopes import RunningMetrics as RunningMetrics

NEXT_DESCRIPTION = ("The cursor of the next page (the position of this page's last item): "
                    "pass it as ?after=; null on the last page. A page ends at its limit or "
                    "before it would overrun a Lambda response (6 MB), so it may hold fewer "
                    "items than asked for.")
# A dead-letter replay or purge of "all" acts on a slice: at most this many, within about
# this many seconds (tierq.logic.dlq).
SLICE_MAX_ITEMS = 10_000
SLICE_SECONDS = 5.0
MORE_DESCRIPTION = ('With "all": true, each request acts on a bounded slice (at most 10,000 '
                    'dead letters, about 5 seconds): true when some may be left, so repeat the '
                    'request until it is false.')


class Envelope(Model):
    """A response body: unknown fields are ignored (a newer server may add some)."""

    model_config = ConfigDict(extra="ignore")


class EnqueueResults(Envelope):
    """Outcome of a batch enqueue, one entry per task in request order."""

    tasks: list[EnqueueOutcome]


class QueueList(Envelope):
    queues: list[AnyQueueView] = Field(
        description="Admin views for an admin; for a caller pinned to a tenant, tenant views "
                    "of the queues its tenant has had tasks in.")
    next: str | None = Field(default=None, description=NEXT_DESCRIPTION)


class DeadLetterPage(Envelope):
    tasks: list[TaskView]
    next: str | None = Field(default=None, description=NEXT_DESCRIPTION)
    next_cursor: str | None = Field(
        default=None, description="The same cursor as `next` (the name of earlier versions)."
    )


class ReplayResult(Envelope, Replayable):
    replayed: list[UUID] = Field(description="Ready again, at the back of their line.")
    skipped: list[UUID] = Field(
        description="Not dead (any more), not visible to the caller, or their key is taken "
                    "by a live task."
    )
    more: bool = Field(default=False, description=MORE_DESCRIPTION)


class PurgeResult(Envelope):
    purged: list[UUID]
    more: bool = Field(default=False, description=MORE_DESCRIPTION)


class DetailedMetrics(Envelope):
    queues: list[TenantCounts] = Field(description="One row per (queue, tenant).")
    timestamp: datetime
    next: str | None = Field(default=None, description=NEXT_DESCRIPTION)


_LEASE_ENVELOPES = frozenset({"ClaimResults", "RunningMetrics"})


def __getattr__(name: str) -> Any:
    if name in _LEASE_ENVELOPES:
        from tierq.models import lease_envelopes

        return getattr(lease_envelopes, name)
    raise AttributeError(f"module 'tierq.models.envelopes' has no attribute {name!r}")
