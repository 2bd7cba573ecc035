"""Request bodies of the lease routes (POST …/acks, …/nacks, …/releases, …/heartbeats):
lists of the engine's lease models (:mod:`tierq.models.leases`), which only the ack function
imports (the other bodies: :mod:`tierq.aws.http.models`)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from tierq.models.base import Model
from tierq.models.lease_outcomes import AckItem, HeartbeatItem, NackItem, ReleaseItem
from tierq.models.leases import MAX_CLAIM, ClaimOptions


class AckRequest(Model):
    model_config = ConfigDict(extra="forbid")

    acks: list[AckItem] = Field(min_length=1, max_length=MAX_CLAIM)
    claim: ClaimOptions | None = Field(
        default=None, description="Claim the next tasks once the ack is done, in the same "
                                  "call.")


class NackRequest(Model):
    model_config = ConfigDict(extra="forbid")

    nacks: list[NackItem] = Field(min_length=1, max_length=MAX_CLAIM)


class ReleaseRequest(Model):
    model_config = ConfigDict(extra="forbid")

    releases: list[ReleaseItem] = Field(min_length=1, max_length=MAX_CLAIM)


class HeartbeatRequest(Model):
    model_config = ConfigDict(extra="forbid")

    leases: list[HeartbeatItem] = Field(min_length=1, max_length=MAX_CLAIM)
