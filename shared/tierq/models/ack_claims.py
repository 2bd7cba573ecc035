"""The answers of an ack that claims the next tasks (logic/ack_claim.py): the engines'
``AckClaimResult`` and ``POST …/acks``' ``AckAnswer``. Apart from the claim's envelope
(:mod:`tierq.models.lease_envelopes`), which the claim function imports at its cold start
without the ack's outcomes."""

from pydantic import Field, PrivateAttr

from tierq.models.lease_outcomes import AckResult
from tierq.models.leases import ClaimedTask


class AckAnswer(AckResult):
    """The answer of ``POST …/acks``: the ack's outcome and, when the request asked for a
    claim, the claim's (``tasks``, ``retry_after_ms``, ``claim_error``; left out otherwise,
    so a plain ack's answer is an ``AckResult``'s)."""

    tasks: list[ClaimedTask] | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="With a claim: the tasks claimed after the ack, in claim order, as a "
                    "claim answers them.")
    retry_after_ms: int | None = Field(
        default=None, ge=0, exclude_if=lambda value: value is None,
        description="With a claim: as a claim's, set when the queue's limits cut it; also "
                    "when it failed (claim_error): when claiming again is worth it.")
    claim_error: str | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="With a claim that failed after the ack went through: the error code a "
                    "claim would have answered (for example unavailable). The ack's outcome "
                    "stands; claim again later.")


class AckClaimResult(AckAnswer):
    """The answer of an ack that claims the next tasks (logic/ack_claim.py): the ack's
    outcome, then the claim's. ``failed_pairs`` (not a field): how many tenants' pairs
    the claim went on past (a claim's ``failed_pairs``, for the metrics)."""

    _failed_pairs: int = PrivateAttr(default=0)

    @property
    def failed_pairs(self) -> int:
        return self._failed_pairs

    @failed_pairs.setter
    def failed_pairs(self, value: int) -> None:
        self._failed_pairs = value

    tasks: list[ClaimedTask] = Field(default_factory=list,
                                     description="The tasks claimed after the ack, in claim "
                                                 "order, as a claim answers them.")
