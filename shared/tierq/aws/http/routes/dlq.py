"""Dead letters of a queue: ``GET /v1/queues/{queue}/dlq`` (newest first, paged),
``POST …/dlq/replay`` (``{"ids": [...]}`` or ``{"all": true}``: ready again at the back of
the line with fresh attempts) and ``POST …/dlq/purge`` (delete the same selection; no body
purges them all). "all" acts on a bounded slice per request and answers ``"more"``. A pinned
caller sees and touches only its own tenant's dead letters.

The purge is a POST on a path of its own, not a DELETE of ``…/dlq``: the list it empties
stays a resource (GET still answers, with no dead letters), and some proxies and clients
drop the body of a DELETE."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from tierq.aws.http import idempotency, paging, request
from tierq.aws.http.errors import responses
from tierq.aws.http.idempotency import IdempotencyKeyHeader
from tierq.aws.http.models import DeadLetterSelection
from tierq.aws.http.params import QueuePath, TenantQuery
from tierq.aws.runtime import engine
from tierq.logic import dlq as dlq_logic
from tierq.models.envelopes import DeadLetterPage, PurgeResult, ReplayResult
from tierq.models.tasks import TaskView

router = Router()

MAX_PAGE = 1000


# Dead letters read per statement while a page fills (payloads may be up to 256 KiB each).
READ_CHUNK = 50
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
# when the last dead letter died (µs since the epoch, as PostgreSQL keeps it) and its id
CURSOR = paging.CursorForm("dlq", (
    paging.CursorPart("dead_at_us", paging.COUNT_PART,
                      lambda text: EPOCH + int(text) * MICROSECOND),
    paging.CursorPart("id", paging.UUID_PART, UUID)))


def encode_cursor(finished_at: datetime, task_id: UUID) -> str:
    return CURSOR.encode((finished_at - EPOCH) // MICROSECOND, str(task_id))


def decode_cursor(cursor: str | None) -> tuple[datetime, UUID] | None:
    position = CURSOR.decode(cursor)
    return None if position is None else (position[0], position[1])


def position_of(task: TaskView) -> tuple[datetime, UUID]:
    return task.finished_at or task.created_at, task.id


def dead_letters_after(queue: str, tenant: str | None, after: tuple[datetime, UUID] | None,
                       chunk: int) -> Iterator[TaskView]:
    """Dead letters of a queue (of one tenant, in SQL), newest first, after a position, read
    ``chunk`` at a time as they are consumed."""
    tq = engine()
    while True:
        batch = tq.dlq_list(queue, tenant=tenant, limit=chunk, after=after)
        yield from batch
        if len(batch) < chunk:
            return
        after = position_of(batch[-1])


@router.get(
    "/v1/queues/<queue>/dlq",
    summary="List dead letters",
    description="Most recently dead first, at most `limit` per page and never more than fits "
                "a Lambda response (6 MB as the runtime writes it): a page may hold fewer. "
                "`next` (also `next_cursor`) is the cursor of the next page, null on the last.",
    operation_id="listDeadLetters",
    tags=["dead letters"],
    responses=responses("Dead tasks, most recently dead first, with last_error and attempts.",
                        403),
)
def list_dead_letters(
    queue: QueuePath,
    tenant: TenantQuery = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = 100,
    after: Annotated[str | None, CURSOR.query()] = None,
) -> DeadLetterPage:
    tenant = request.check_tenant(tenant)
    position = decode_cursor(after)
    source = dead_letters_after(queue, tenant, position, min(limit + 1, READ_CHUNK))
    tasks, last = paging.fill(source, position_of, limit=limit)
    cursor = None if last is None else encode_cursor(*last)
    return DeadLetterPage(tasks=tasks, next=cursor, next_cursor=cursor)


@router.post(
    "/v1/queues/<queue>/dlq/replay",
    summary="Replay dead letters",
    description="{\"ids\": [...]} (≤ 1000) or {\"all\": true}. Replayed tasks are ready "
                "again at the back of their line with their attempts reset. With \"all\" "
                "each request replays a bounded slice, oldest first, and answers \"more\": "
                "repeat it while that is true.",
    operation_id="replayDeadLetters",
    tags=["dead letters"],
    responses=responses("Which tasks were replayed and which were skipped, and whether more "
                        "may be left.", 409),
)
def replay_dead_letters(queue: QueuePath, body: Annotated[DeadLetterSelection, Body()],
                        idempotency_key: IdempotencyKeyHeader = None) -> Response[ReplayResult]:
    result = engine().dlq_replay_slice(queue, ids=body.ids or [], all_dead=body.all,
                                       tenant=request.pinned_tenant(),
                                       max_items=dlq_logic.SLICE_MAX_ITEMS,
                                       seconds=dlq_logic.SLICE_SECONDS,
                                       **idempotency.keyed(idempotency_key))
    return idempotency.answer(result, result.idempotent_replay)


@router.post(
    "/v1/queues/<queue>/dlq/purge",
    summary="Purge dead letters",
    description="Without a body (or with {\"all\": true}) the dead letters of the queue (or "
                "of the caller's tenant) are deleted, a bounded slice per request: repeat it "
                "while \"more\" is true. {\"ids\": [...]} (≤ 1000) deletes only those. "
                "A purge repeated deletes nothing more: it takes no Idempotency-Key.",
    operation_id="purgeDeadLetters",
    tags=["dead letters"],
    responses=responses("The ids deleted, and whether more may be left."),
)
def purge_dead_letters(
    queue: QueuePath,
    body: Annotated[DeadLetterSelection | None, Body()] = None,
) -> PurgeResult:
    selection = body or DeadLetterSelection(all=True)
    return engine().dlq_purge_slice(queue, ids=selection.ids or [], all_dead=selection.all,
                                    tenant=request.pinned_tenant(),
                                    max_items=dlq_logic.SLICE_MAX_ITEMS,
                                    seconds=dlq_logic.SLICE_SECONDS)
