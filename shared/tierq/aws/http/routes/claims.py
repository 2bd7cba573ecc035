"""``POST /v1/queues/{queue}/claims``: lease up to ``max`` ready tasks (optionally waiting up
to ``wait_seconds`` for some). Without a tenant, claims rotate fairly across the queue's
tenants; a caller pinned to a tenant claims only from it.

The answer fits Lambda's 6 MB response limit as the runtime sends it, and it is given before
the function's or the HTTP API's timeout (tierq.aws.http.claim_bounds): a claim never leases
tasks it does not hand out."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from tierq.aws import metrics
from tierq.aws.http import idempotency, request
from tierq.aws.http.claim_bounds import CLAIM_RESPONSE_BUDGET, claim_answer_by
from tierq.aws.http.errors import responses
from tierq.aws.http.idempotency import IdempotencyKeyHeader
from tierq.aws.http.params import QueuePath
from tierq.aws.runtime import default_engine, engine

# claim_replay (with the claim path and the leases): every request of this function runs
# it, so it is imported at the cold start (and so in a SnapStart snapshot), not on the first
# request's clock (tests/unit/test_cold_imports.py)
from tierq.logic import claim_replay, tenant_limits  # noqa: F401
from tierq.models import ClaimRequest
from tierq.models.lease_envelopes import ClaimResults

router = Router()

@router.post(
    "/v1/queues/<queue>/claims",
    summary="Claim tasks with a lease",
    description="Body (all optional): max (1 to 500), lease_seconds, tenant, worker, "
                "wait_seconds (long-poll, ≤ 20). Each task comes with a lease_token to ack, "
                "nack or heartbeat it; an empty list means nothing was ready. A claim hands "
                "out fewer than max tasks when more would not fit one Lambda response "
                "(6 MB); the others keep their places in line. With an Idempotency-Key, a "
                "repeat (kept no longer than the lease) answers the first claim's tasks whose "
                "leases are still held, with the same tokens, and leases nothing more. "
                "When the queue's limits (max_leased, rate, tenant_max_leased, tenant_rate) "
                "allow fewer tasks than max, the answer holds what they allow (possibly "
                "none) and retry_after_ms; a long poll waits for capacity. A tenant caller "
                "holds at most TIERQ_TENANT_LONG_POLLS long polls at once, and all callers "
                "together a share of the claim function's reserved concurrency: one more is "
                "429 too_many_requests with Retry-After.",
    operation_id="claimTasks",
    tags=["leases"],
    responses=responses("The claimed tasks, in claim order.", 403, 409),
)
def claim_tasks(
    queue: QueuePath,
    body: Annotated[ClaimRequest | None, Body(description="Claim options.")] = None,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Response[ClaimResults]:
    claim = body or ClaimRequest()
    tenant = request.check_tenant(claim.tenant)
    if tenant != claim.tenant:
        claim = claim.model_copy(update={"tenant": tenant})
    if claim.wait_seconds <= 0:
        return _claim(queue, claim, idempotency_key)
    # a long poll holds a function for up to 20 s: its tenant's cap and the cap over all
    # callers come first (429), before the claim function's reserved concurrency (5xx for
    # everyone)
    with tenant_limits.long_poll(default_engine().ctx, request.pinned_tenant()):
        return _claim(queue, claim, idempotency_key)


def _claim(queue: str, claim: ClaimRequest,
           idempotency_key: str | None) -> Response[ClaimResults]:
    tierq = engine()
    answer_by = claim_answer_by(router.lambda_context, request.current_event().raw_event)
    # keyed: the engine keeps the claim's leases with the key (claim_replay); a repeat
    # gets the first answer's tasks still leased, rebuilt
    outcome = tierq.claim_outcome(queue, claim, max_bytes=CLAIM_RESPONSE_BUDGET,
                                  answer_by=answer_by, **idempotency.keyed(idempotency_key))
    if outcome.idempotent_replay:
        return idempotency.answer(ClaimResults(tasks=outcome.tasks), replayed=True)
    tasks = outcome.tasks
    try:
        counts = {"Claimed": len(tasks)}
        if outcome.failed_pairs:  # (tenants' pairs the claim went on past: an outage shows)
            counts["ClaimPairsFailed"] = outcome.failed_pairs
        metrics.count_queue(default_engine().ctx, queue, counts)
        results = ClaimResults(tasks=tasks, retry_after_ms=outcome.retry_after_ms)
        return idempotency.answer(results, replayed=False)
    except BaseException:
        # leased but not answered: back to their places, no attempt counted
        tierq.give_back(queue, tasks)
        raise
