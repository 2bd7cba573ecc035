"""The running leases as the admin sees them (``GET /v1/metrics/queues/running``): read by
the lease outcomes on first use."""


from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import Field

from tierq.models.base import Model
from tierq.models.envelope_base import NEXT_DESCRIPTION, Envelope


class RunningLease(Model):
    queue: str
    tenant: str
    id: UUID
    worker: str | None
    attempt: int
    started_at: datetime
    running_for_ms: int
    lease_expires_at: datetime
    group: str | None = Field(default=None, description="The task's group, if any.")
    progress: Any = Field(default=None, description="The last progress its heartbeats "
                                                    "carried, if any.")
    progress_at: datetime | None = Field(default=None,
                                         description="When that progress came.")


class RunningMetrics(Envelope):
    running: list[RunningLease]
    timestamp: datetime
    next: str | None = Field(default=None, description=NEXT_DESCRIPTION)
