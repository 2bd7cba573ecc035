"""``POST /v1/queues/{queue}/claims``: lease up to ``max`` ready tasks (optionally waiting up
to ``wait_seconds`` for some). Without a tenant, claims rotate fairly across the queue's
tenants; a caller pinned to a tenant claims only from it."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from tierq.api import metrics, request
from tierq.api.errors import responses
from tierq.api.models import ClaimResults
from tierq.api.params import QueuePath
from tierq.api.runtime import engine
from tierq.models import ClaimRequest

router = Router()

# Lambda caps a response at 6 MB: the task data of one claim stays under 4 MiB, leaving room
# for the JSON around it (and its escapes). Tasks beyond it stay in line for the next claim.
CLAIM_RESPONSE_BUDGET = 4 * 1024 * 1024


@router.post(
    "/v1/queues/<queue>/claims",
    summary="Claim tasks with a lease",
    description="Body (all optional): max (1 to 500), lease_seconds, tenant, worker, "
                "wait_seconds (long-poll, ≤ 20). Each task comes with a lease_token to ack, "
                "nack or heartbeat it; an empty list means nothing was ready.",
    operation_id="claimTasks",
    tags=["leases"],
    responses=responses("The claimed tasks, in claim order.", 403),
)
def claim_tasks(
    queue: QueuePath,
    body: Annotated[ClaimRequest | None, Body(description="Claim options.")] = None,
) -> ClaimResults:
    claim = body or ClaimRequest()
    tenant = request.check_tenant(claim.tenant)
    if tenant != claim.tenant:
        claim = claim.model_copy(update={"tenant": tenant})
    tasks = engine().claim(queue, claim, max_bytes=CLAIM_RESPONSE_BUDGET)
    metrics.count(queue, {"Claimed": len(tasks)})
    return ClaimResults(tasks=tasks)
