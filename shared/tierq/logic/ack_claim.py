"""Ack and claim in one call: a worker's loop of one request, whose ack's lease drop goes in
the first round trip of the claim that follows it.

A worker that acks a batch and claims the next makes, apart, two requests and, in Valkey,
the claim's round trips (its pop, and a read of the ready-tenant index when it names no
tenant and keeps no window) and the ack's two (its lease check; its lease drop, after the
PostgreSQL commit). Here the ack runs as ``leases.ack`` does, but its drop is held
(``WarmTier.holding_drop``) and goes at the front of the claim's first round trip: one
request, and one Valkey round trip fewer. The drop still comes after the ack's commit, as
every ack's does. The ack commits alone, never with the pair's acks committed together
(logic/ack_gathering.py): a committer's answers go with its drop, which here waits for the
claim. A claim that waits (``wait_seconds``) makes its first pass with the drop,
then waits with the drop sent.

| what fails                        | the answer                                            |
| --------------------------------- | ----------------------------------------------------- |
| the ack (before its commit)       | its error, as a plain ack's; nothing claimed          |
| the claim                         | the ack's outcome, no tasks, ``claim_error`` (its     |
|                                   | code; ``internal`` for an error of no ``TierqError``) |
|                                   | and ``retry_after_ms``: the ack is not undone         |
| the round trip the drop went in   | the drop sent again alone; the claim's own outcome as |
|                                   | above                                                 |
| the ack's drop itself             | its error, as a plain ack's; the claimed tasks given  |
|                                   | back first (no attempt counted)                       |
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tierq.errors import TierqError, Unavailable
from tierq.logic import claim, claim_replay, idempotency, leases
from tierq.logic.claim import ClaimOutcome
from tierq.logic.context import Context
from tierq.logic.idempotency import KeyedCall
from tierq.models.ack_claims import AckClaimResult
from tierq.models.lease_outcomes import AckItem, AckResult
from tierq.models.leases import ClaimedTask, ClaimRequest

if TYPE_CHECKING:
    from tierq.contract import Deployment

log = logging.getLogger(__name__)

# What a keyed ack-and-claim keeps of its answer beside its claim's record (``keyed``).
KEPT_FIELDS = {"acked", "rejected", "cancelled", "retry_after_ms", "claim_error"}
# When to claim again after a claim failed with an error that names no wait of its own.
RETRY_AFTER_FAILED_MS = 1000


def ack_and_claim(ctx: Context, queue: str, items: Sequence[AckItem | ClaimedTask],
                  request: ClaimRequest, tenants: Sequence[str] | None = None, *,
                  max_bytes: int = 0, answer_by: float | None = None) -> AckClaimResult:
    """Ack ``items`` (``leases.ack``), then claim as ``claim.claim_outcome`` does with
    ``request``, ``tenants``, ``max_bytes`` and ``answer_by``; the ack's lease drop goes in
    the claim's first round trip (the module's table says what each failure answers)."""
    wait_until = time.monotonic() + request.wait_seconds
    first = request if request.wait_seconds == 0 else \
        request.model_copy(update={"wait_seconds": 0})
    with ctx.warm.holding_drop() as held:
        acked = leases.ack(ctx, queue, items)
        answer = then_claim(queue, acked, lambda: claim.claim_outcome(
            ctx, queue, first, tenants, max_bytes=max_bytes, answer_by=answer_by))
    if held.error is not None:
        claim.give_back(ctx, queue, [(str(t.id), t.lease_token) for t in answer.tasks])
        raise held.error
    left = wait_until - time.monotonic()
    if answer.tasks or answer.claim_error is not None or left <= 0:
        return answer
    # (nothing ready: the rest of the wait, the drop sent)
    return then_claim(queue, acked, lambda: claim.claim_outcome(
        ctx, queue, request.model_copy(update={"wait_seconds": left}), tenants,
        max_bytes=max_bytes, answer_by=answer_by))


def then_claim(queue: str, acked: AckResult,
               claim_outcome: Callable[[], ClaimOutcome]) -> AckClaimResult:
    """The answer of an ack (``acked``, done) followed by the claim ``claim_outcome`` makes:
    a claim that fails is answered by its code (``internal`` for an error of no
    ``TierqError``, logged with its trace), and when to claim again, beside the ack's
    outcome, which stands."""
    claim_error: Exception | None = None
    try:
        outcome = claim_outcome()
    except TierqError as exc:
        log.warning("the claim of an ack-and-claim on %r failed: %s", queue, exc)
        claim_error, outcome = exc, ClaimOutcome([])
    except Exception as exc:
        log.exception("the claim of an ack-and-claim on %r failed", queue)
        claim_error, outcome = exc, ClaimOutcome([])
    retry_after_ms = outcome.retry_after_ms
    if isinstance(claim_error, Unavailable):
        retry_after_ms = claim_error.retry_after * 1000
    elif claim_error is not None:
        retry_after_ms = RETRY_AFTER_FAILED_MS
    answer = AckClaimResult(
        acked=acked.acked, rejected=acked.rejected, cancelled=acked.cancelled,
        tasks=outcome.tasks, retry_after_ms=retry_after_ms,
        claim_error=None if claim_error is None else
        claim_error.code if isinstance(claim_error, TierqError) else "internal")
    answer.failed_pairs = outcome.failed_pairs
    return answer


def keyed(deployment: Deployment, queue: str, call: KeyedCall | None,
          work: Callable[[], AckClaimResult]) -> AckClaimResult:
    """``work`` (an ack and its claim) once per key: the answer is kept, the claim's tasks
    as a keyed claim keeps them (``claim_replay.record_of``); a repeat
    answers, marked a replay, the ack's outcome and those of the first answer's tasks still
    leased with the same tokens (``claim_replay.replay``), and leases nothing more. Should
    keeping the record fail, the claimed tasks are given back before the error goes up."""
    ctx = deployment.engines[deployment.default_shard].ctx

    def replayed(kept: Any) -> AckClaimResult:
        answer = AckClaimResult.model_validate({k: kept[k] for k in KEPT_FIELDS if k in kept})
        answer.tasks = deployment.replay_claim(queue, kept.get("claim") or {"tasks": []})
        return answer.as_replay()

    answer, _ = idempotency.once_in_valkey(
        ctx, call, work, load=replayed,
        record=lambda got: ({**got.model_dump(mode="json", include=KEPT_FIELDS),
                             "claim": claim_replay.record_of(got.tasks)}, None),
        undo=lambda got: deployment.give_back(queue, got.tasks))
    return answer
