"""The response envelopes of the HTTP API, defined once: the server answers with them (and
the API document describes them) and the client reads them (docs/architecture.md §10).
The items inside (tasks, claims, outcomes, counts, leases) are the models of
:mod:`tierq.models`.

Fields a response carries that a model does not know are ignored (``extra="ignore"``, said
here, not left to pydantic's default), so a newer server never breaks an older client.

Some envelopes are defined beside what they carry and read here on first use:

| envelope                           | defined in                              |
| ---------------------------------- | --------------------------------------- |
| ``Envelope`` (their base)          | :mod:`tierq.models.envelope_base`       |
| ``ClaimResults``                   | :mod:`tierq.models.lease_envelopes`     |
| ``RunningMetrics``                 | :mod:`tierq.models.lease_outcomes`      |
| ``QueueList``, ``DetailedMetrics`` | :mod:`tierq.models.queue_views`         |

so that a function that never answers a claim never imports the lease models, one that
never shows a queue or a running lease never defines them, and the claim and ack functions,
which answer with the envelopes of leases only, define none of the task envelopes here."""


import importlib
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import Field

from tierq.models.base import Replayable
from tierq.models.bounds import SLICE_MAX_ITEMS as SLICE_MAX_ITEMS
from tierq.models.bounds import SLICE_SECONDS as SLICE_SECONDS
from tierq.models.envelope_base import MORE_DESCRIPTION as MORE_DESCRIPTION
from tierq.models.envelope_base import NEXT_DESCRIPTION as NEXT_DESCRIPTION
from tierq.models.envelope_base import Envelope as Envelope
from tierq.models.tasks import EnqueueOutcome, TaskView

if TYPE_CHECKING:
    from tierq.models.lease_envelopes import ClaimResults as ClaimResults
    from tierq.models.lease_outcomes import RunningMetrics as RunningMetrics
    from tierq.models.queue_views import DetailedMetrics as DetailedMetrics
    from tierq.models.queue_views import QueueList as QueueList

class EnqueueResults(Envelope):
    """Outcome of a batch enqueue, one entry per task in request order."""

    tasks: list[EnqueueOutcome]


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


# Each envelope defined elsewhere and its module.
_ELSEWHERE = {
    "ClaimResults": "tierq.models.lease_envelopes",
    "RunningMetrics": "tierq.models.lease_outcomes",
    "QueueList": "tierq.models.queue_views",
    "DetailedMetrics": "tierq.models.queue_views",
}


def __getattr__(name: str) -> Any:
    module = _ELSEWHERE.get(name)
    if module is not None:
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'tierq.models.envelopes' has no attribute {name!r}")
