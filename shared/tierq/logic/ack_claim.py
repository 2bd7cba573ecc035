"""Ack and claim in one call: a worker's loop of one request, whose ack's lease drop rides in
the first round trip of the claim that follows it.

A worker that acks a batch and claims the next makes, apart, two requests and four Valkey
round trips: the claim's pop, then the ack's lease check, its PostgreSQL commit and its
lease drop. Here the ack runs as ``leases.ack`` does, but its drop is held
(``WarmTier.riding``) and goes at the front of the claim's first round trip (its pop, or
the read of the ready-tenant index), so the loop makes one request and three round trips.
The drop still comes after the ack's commit, as every ack's does.

| what fails                    | the answer                                                |
| ----------------------------- | --------------------------------------------------------- |
| the ack (before its commit)   | its error, as a plain ack's; nothing claimed              |
| the claim (a ``TierqError``)  | the ack's outcome, no tasks, ``claim_error`` its code and |
|                               | ``retry_after_ms`` its wait: the ack is not undone        |
| the ack's drop, which rode    | its error, as a plain ack's; the claimed tasks given back |
|                               | first (no attempt counted)                                |
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from tierq.errors import TierqError, Unavailable
from tierq.logic import claim, idempotency, leases
from tierq.logic.claim import ClaimOutcome
from tierq.logic.context import Context
from tierq.logic.idempotency import KeyedCall
from tierq.models.ack_claims import AckClaimResult
from tierq.models.lease_outcomes import AckItem, AckResult
from tierq.models.leases import ClaimedTask, ClaimRequest

log = logging.getLogger(__name__)

# What a keyed ack-and-claim keeps of its answer: the ack's outcome (``keyed``).
ACK_FIELDS = {"acked", "rejected", "cancelled"}


def ack_and_claim(ctx: Context, queue: str, items: Sequence[AckItem | ClaimedTask],
                  request: ClaimRequest, tenants: Sequence[str] | None = None, *,
                  max_bytes: int = 0, answer_by: float | None = None) -> AckClaimResult:
    """Ack ``items`` (``leases.ack``), then claim as ``claim.claim_outcome`` does with
    ``request``, ``tenants``, ``max_bytes`` and ``answer_by``; the ack's lease drop rides in
    the claim's first round trip (the module's table says what each failure answers)."""
    with ctx.warm.riding() as ride:
        acked = leases.ack(ctx, queue, items)
        answer = then_claim(queue, acked, lambda: claim.claim_outcome(
            ctx, queue, request, tenants, max_bytes=max_bytes, answer_by=answer_by))
    if ride.error is not None:
        claim.give_back(ctx, queue, [(str(t.id), t.lease_token) for t in answer.tasks])
        raise ride.error
    return answer


def then_claim(queue: str, acked: AckResult,
               claim_outcome: Callable[[], ClaimOutcome]) -> AckClaimResult:
    """The answer of an ack (``acked``, done) followed by the claim ``claim_outcome`` makes:
    a claim that fails with a ``TierqError`` is answered by its code, and when to claim
    again, beside the ack's outcome, which stands."""
    claim_error: TierqError | None = None
    try:
        outcome = claim_outcome()
    except TierqError as exc:
        log.warning("the claim of an ack-and-claim on %r failed: %s", queue, exc)
        claim_error, outcome = exc, ClaimOutcome([])
    retry_after_ms = outcome.retry_after_ms
    if isinstance(claim_error, Unavailable):
        retry_after_ms = claim_error.retry_after * 1000
    return AckClaimResult(acked=acked.acked, rejected=acked.rejected,
                          cancelled=acked.cancelled, tasks=outcome.tasks,
                          retry_after_ms=retry_after_ms,
                          claim_error=None if claim_error is None else claim_error.code)


def keyed(ctx: Context, call: KeyedCall | None, work: Callable[[], AckClaimResult],
          give_back: Callable[[list[ClaimedTask]], None]) -> AckClaimResult:
    """``work`` (an ack and its claim) once per key: the ack's outcome is kept, and a
    repeat answers it, marked a replay, without tasks and without claiming. A claim's tasks
    are not kept: a repeat that leased again would leave the first answer's tasks leased
    with nobody to run them, so the first answer's tasks, when it was lost, are back in
    line when their leases end. Should keeping the outcome fail, the claimed tasks are
    given back (``give_back``) before the error goes up."""
    answer, replayed = idempotency.once_in_valkey(
        ctx, call, work, load=AckClaimResult.model_validate,
        record=lambda got: (got.model_dump(mode="json", include=ACK_FIELDS), None),
        undo=lambda got: give_back(got.tasks))
    return answer.as_replay() if replayed else answer
