"""The response envelopes of leases: a claim's answer and the running leases (see
:mod:`tierq.models.envelopes`, which reads them from here on first use)."""


from datetime import datetime

from pydantic import Field

from tierq.models.envelopes import NEXT_DESCRIPTION, Envelope
from tierq.models.leases import ClaimedTask, RunningLease


class ClaimResults(Envelope):
    tasks: list[ClaimedTask]
    # left out of the body when null: the answer of a claim no limit cut is as before
    retry_after_ms: int | None = Field(
        default=None, ge=0, exclude_if=lambda value: value is None,
        description="Set when the queue's limits (max_leased, rate, tenant_max_leased, "
                    "tenant_rate) handed out fewer tasks than asked for: when claiming again "
                    "is worth it (the next token of a rate; for a count, the earliest lease "
                    "end, at most 1000 ms, since an ack frees capacity at once). Left out when "
                    "no limit cut the claim.")


class RunningMetrics(Envelope):
    running: list[RunningLease]
    timestamp: datetime
    next: str | None = Field(default=None, description=NEXT_DESCRIPTION)
