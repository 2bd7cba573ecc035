"""Finishing, giving back and extending leases: ``POST /v1/queues/{queue}/acks``,
``…/nacks``, ``…/releases`` and ``…/heartbeats``. Each item carries the task id and the
lease token its claim returned; an item whose lease is not (or not any more) the caller's comes
back in ``rejected`` (``not_owner``, or ``not_found`` when the task was cancelled
meanwhile)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, TypeVar

import orjson
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from tierq.aws import metrics
from tierq.aws.http import idempotency, request
from tierq.aws.http.claim_bounds import CLAIM_RESPONSE_BUDGET, claim_answer_by
from tierq.aws.http.errors import responses
from tierq.aws.http.idempotency import IdempotencyKeyHeader
from tierq.aws.http.lease_bodies import (
    AckRequest,
    HeartbeatRequest,
    NackRequest,
    ReleaseRequest,
)
from tierq.aws.http.params import QueuePath
from tierq.aws.runtime import default_engine, engine
from tierq.core.ids import tenant_of_token
from tierq.core.sizing import body_cost
from tierq.errors import InvalidInput, PayloadTooLarge

# the lease path (ack, nack, release, heartbeat, with what an ack settles): every request of
# this function runs it, so it is imported at the cold start (and so in a SnapStart
# snapshot), not on the first request's clock (tests/unit/test_cold_imports.py)
from tierq.logic import leases  # noqa: F401
from tierq.models import (
    AckItem,
    AckResult,
    HeartbeatItem,
    HeartbeatResult,
    NackItem,
    NackResult,
    Rejection,
    ReleaseItem,
    ReleaseResult,
)
from tierq.models.ack_claims import AckAnswer
from tierq.models.leases import ClaimOptions

router = Router()

# The most an ack's outcome costs per item in the body of an ack with claim: an id as JSON
# text, and a rejection of the longest reason.
ID_TEXT = "00000000-0000-0000-0000-000000000000"
REJECTION = {"id": ID_TEXT, "reason": "not_owner"}

Item = TypeVar("Item", AckItem, NackItem, ReleaseItem, HeartbeatItem)


def pinned_items(items: Sequence[Item]) -> tuple[list[Item], list[Rejection]]:
    """Items whose lease token belongs to the pinned tenant, and rejections for the rest
    (a token of another tenant cannot be the caller's)."""
    pinned = request.pinned_tenant()
    if pinned is None:
        return list(items), []
    mine = [i for i in items if tenant_of_token(i.lease_token) == pinned]
    others = [Rejection(id=i.id, reason="not_owner") for i in items
              if tenant_of_token(i.lease_token) != pinned]
    return mine, others


def check_results(acks: Sequence[AckItem]) -> None:
    limit = engine().settings.max_payload_bytes
    for i, ack in enumerate(acks):
        if ack.result is None:
            continue
        field = f"acks[{i}].result"
        try:
            size = len(orjson.dumps(ack.result))
        except TypeError as exc:
            raise InvalidInput.field(field, f"not storable as JSON: {exc}") from exc
        if size > limit:
            raise PayloadTooLarge(
                f"{field} is {size} bytes once serialised; the limit is {limit}",
                details=[{"field": field, "message": "too large"}],
            )


@router.post(
    "/v1/queues/<queue>/acks",
    summary="Acknowledge finished tasks",
    description="{\"acks\": [{id, lease_token, result?}], \"claim\"?: {max, lease_seconds, "
                "tenant, worker}} (1 to 500 acks). An acked task is gone, or kept with its "
                "result until the queue's retention ends. With claim, the next tasks are "
                "claimed once the ack is done, in the same call (a worker's loop in one "
                "request): the answer adds tasks (and retry_after_ms as a claim's). A claim "
                "that fails then does not undo the ack: the answer says claim_error and "
                "retry_after_ms. The claim does not wait: a long poll is a claim of its "
                "own. With an Idempotency-Key, a repeat answers the first answer again: the "
                "ack's outcome and the tasks still leased with the same tokens, leasing "
                "nothing more.",
    operation_id="ackTasks",
    tags=["leases"],
    responses=responses("Which tasks were acked and which were rejected; with claim, the "
                        "tasks claimed next.", 409, 413),
)
def ack_tasks(queue: QueuePath, body: Annotated[AckRequest, Body()],
              idempotency_key: IdempotencyKeyHeader = None) -> Response[AckAnswer]:
    check_results(body.acks)
    mine, rejected = pinned_items(body.acks)
    if body.claim is not None:
        return _ack_and_claim(queue, mine, rejected, body.claim, idempotency_key)
    result = engine().ack(queue, mine, **idempotency.keyed(idempotency_key)) \
        if mine or idempotency_key is not None else AckResult()
    result.rejected.extend(rejected)
    if not result.idempotent_replay:
        metrics.count_queue(default_engine().ctx, queue, {"Acked": len(result.acked)})
    answer = AckAnswer(acked=result.acked, rejected=result.rejected,
                       cancelled=result.cancelled)
    return idempotency.answer(answer, result.idempotent_replay)


def _ack_and_claim(queue: str, mine: list[AckItem], rejected: list[Rejection],
                   next_claim: ClaimOptions, idempotency_key: str | None) -> Response[AckAnswer]:
    """An ack that claims the next tasks (``Tierq.ack_and_claim``), within the claim route's
    bounds: its tasks fit one Lambda response beside the ack's outcome, and the claim stops
    in time to answer before the function's or the HTTP API's cut-off. Keyed, a repeat
    answers the first answer again (``ack_claim.keyed``)."""
    tenant = request.check_tenant(next_claim.tenant, "claim.tenant")
    claim = next_claim.request()
    if tenant != claim.tenant:
        claim = claim.model_copy(update={"tenant": tenant})
    tierq = engine()
    answer_by = claim_answer_by(router.lambda_context, request.current_event().raw_event)
    # (the ack's outcome comes before the tasks in the body: at most 500 ids and
    # rejections, sized at their most, as the runtime would encode them)
    room = CLAIM_RESPONSE_BUDGET - body_cost(orjson.dumps(
        {"acked": [ID_TEXT] * len(mine), "rejected": [REJECTION] * (len(mine) + len(rejected)),
         "cancelled": [ID_TEXT] * len(mine), "claim_error": "unavailable"}))
    answer = tierq.ack_and_claim(queue, mine, claim, max_bytes=room, answer_by=answer_by,
                                 **idempotency.keyed(idempotency_key))
    try:
        answer.rejected.extend(rejected)
        if not answer.idempotent_replay:
            counts = {"Acked": len(answer.acked), "Claimed": len(answer.tasks)}
            if answer.failed_pairs:  # (as the claim route counts them: an outage shows)
                counts["ClaimPairsFailed"] = answer.failed_pairs
            if answer.claim_error is not None:
                counts["AckClaimsFailed"] = 1
            metrics.count_queue(default_engine().ctx, queue, counts)
        return idempotency.answer(answer, answer.idempotent_replay)
    except BaseException:
        tierq.give_back(queue, answer.tasks)  # (leased but not answered: back in line)
        raise


@router.post(
    "/v1/queues/<queue>/nacks",
    summary="Report failed tasks",
    description="{\"nacks\": [{id, lease_token, error, retry_in_seconds?, dead?}]} (1 to 500). "
                "A task is retried after the queue's backoff (or retry_in_seconds), or moves "
                "to the dead letters at max_attempts or when dead is true.",
    operation_id="nackTasks",
    tags=["leases"],
    responses=responses("Which tasks will be retried, which are dead, which were rejected.", 409),
)
def nack_tasks(queue: QueuePath, body: Annotated[NackRequest, Body()],
               idempotency_key: IdempotencyKeyHeader = None) -> Response[NackResult]:
    mine, rejected = pinned_items(body.nacks)
    result = engine().nack(queue, mine, **idempotency.keyed(idempotency_key)) \
        if mine or idempotency_key is not None else NackResult()
    result.rejected.extend(rejected)
    if not result.idempotent_replay:
        metrics.count_queue(default_engine().ctx, queue, {
            "Nacked": len(result.retried) + len(result.dead),
            "DeadLettered": len(result.dead),
        })
    return idempotency.answer(result, result.idempotent_replay)


@router.post(
    "/v1/queues/<queue>/releases",
    summary="Give leased tasks back unfinished",
    description="{\"releases\": [{id, lease_token}]} (1 to 500). Each task returns to its "
                "old place in line, ready at once, and no attempt is counted: for tasks a "
                "worker took but did not start (shutting down, or claimed more than it can "
                "run). A task that failed is nacked instead. A lease an ack or a nack has "
                "checked (even one that then failed) is not released: not_owner; it ends by "
                "its outcome, or at its deadline as an expired attempt.",
    operation_id="releaseTasks",
    tags=["leases"],
    responses=responses("Which tasks were given back and which were rejected.", 409),
)
def release_tasks(queue: QueuePath, body: Annotated[ReleaseRequest, Body()],
                  idempotency_key: IdempotencyKeyHeader = None) -> Response[ReleaseResult]:
    mine, rejected = pinned_items(body.releases)
    result = engine().release(queue, mine, **idempotency.keyed(idempotency_key)) \
        if mine or idempotency_key is not None else ReleaseResult()
    result.rejected.extend(rejected)
    if not result.idempotent_replay:
        metrics.count_queue(default_engine().ctx, queue, {"Released": len(result.released)})
    return idempotency.answer(result, result.idempotent_replay)


@router.post(
    "/v1/queues/<queue>/heartbeats",
    summary="Extend leases",
    description="{\"leases\": [{id, lease_token, extend_seconds?}]} (1 to 500): each lease is "
                "extended to now + extend_seconds (default: the queue's lease_seconds).",
    operation_id="extendLeases",
    tags=["leases"],
    responses=responses("New lease deadlines, and the leases that were rejected.", 409),
)
def extend_leases(queue: QueuePath, body: Annotated[HeartbeatRequest, Body()],
                  idempotency_key: IdempotencyKeyHeader = None) -> Response[HeartbeatResult]:
    mine, rejected = pinned_items(body.leases)
    result = engine().heartbeat(queue, mine, **idempotency.keyed(idempotency_key)) \
        if mine or idempotency_key is not None else HeartbeatResult()
    result.rejected.extend(rejected)
    return idempotency.answer(result, result.idempotent_replay)
