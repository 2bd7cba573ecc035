"""The response envelope of a claim (see :mod:`tierq.models.envelopes`, which reads it from
here on first use; that of the running leases is in :mod:`tierq.models.lease_outcomes`)."""



from pydantic import Field

from tierq.models.envelope_base import Envelope
from tierq.models.leases import ClaimedTask


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
