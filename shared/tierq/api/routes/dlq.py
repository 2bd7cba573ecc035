"""Dead letters of a queue: ``GET /v1/queues/{queue}/dlq`` (newest first, paged),
``POST …/dlq/replay`` (``{"ids": [...]}`` or ``{"all": true}``: ready again at the back of
the line with fresh attempts) and ``DELETE …/dlq`` (purge the same selection; no body
purges them all). A pinned caller sees and touches only its own tenant's dead letters."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from tierq.api import paging, request
from tierq.api.errors import responses
from tierq.api.models import MAX_IDS, DeadLetterPage, DeadLetterSelection, PurgeResult, ReplayResult
from tierq.api.params import QueuePath, TenantQuery
from tierq.api.runtime import engine
from tierq.errors import InvalidInput, NotFound
from tierq.logic import dlq as dlq_logic
from tierq.models.tasks import TaskView

router = Router()

MAX_PAGE = 1000


# Dead letters read per statement while a page fills (payloads may be up to 256 KiB each).
READ_CHUNK = 50
CURSOR_KIND = "dlq"


def encode_cursor(finished_at: datetime, task_id: UUID) -> str:
    return paging.encode_cursor(CURSOR_KIND, finished_at.isoformat(), str(task_id))


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    when, task_id = paging.decode_cursor(cursor, CURSOR_KIND, (str, str))
    try:
        at = datetime.fromisoformat(when)
        if at.tzinfo is None:
            raise ValueError("naive time")
        return at, UUID(task_id)
    except ValueError as exc:
        raise InvalidInput.field(paging.CURSOR_FIELD,
                                 "not a cursor returned by a previous page of this list "
                                 f"({CURSOR_KIND})") from exc


def position_of(task: TaskView) -> tuple[datetime, UUID]:
    return task.finished_at or task.created_at, task.id


def dead_letters_after(queue: str, tenant: str | None, after: tuple[datetime, UUID] | None,
                       chunk: int) -> Iterator[TaskView]:
    """Dead letters of a queue (of one tenant, in SQL), newest first, after a position, read
    ``chunk`` at a time as they are consumed."""
    ctx = engine().ctx
    while True:
        batch = dlq_logic.list_dead(ctx, queue, tenant=tenant, limit=chunk, after=after)
        yield from batch
        if len(batch) < chunk:
            return
        after = position_of(batch[-1])


def dead_ids_of(queue: str, tenant: str) -> Iterator[UUID]:
    after = None
    while True:
        page = engine().dlq_list(queue, tenant=tenant, limit=MAX_PAGE, after=after)
        yield from (t.id for t in page)
        if len(page) < MAX_PAGE:
            return
        last = page[-1]
        after = (last.finished_at or last.created_at, last.id)


def selected(queue: str, selection: DeadLetterSelection) -> tuple[list[UUID], list[UUID], bool]:
    """(ids to act on, ids refused, whether to act on all) for the caller."""
    pinned = request.pinned_tenant()
    if pinned is None:
        return list(selection.ids or []), [], selection.all
    if selection.all:
        return list(dead_ids_of(queue, pinned)), [], False
    mine: list[UUID] = []
    refused: list[UUID] = []
    for task_id in selection.ids or []:
        try:
            task = engine().get_task(queue, task_id)
        except NotFound:
            refused.append(task_id)
            continue
        (mine if task.tenant == pinned else refused).append(task_id)
    return mine, refused, False


def chunks(ids: list[UUID]) -> Iterator[list[UUID]]:
    for start in range(0, len(ids), MAX_IDS):
        yield ids[start:start + MAX_IDS]


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
    after: Annotated[str | None, Query(max_length=paging.CURSOR_MAX_LENGTH,
                                       description="`next` of the previous page.")] = None,
) -> DeadLetterPage:
    tenant = request.check_tenant(tenant)
    position = decode_cursor(after) if after else None
    source = dead_letters_after(queue, tenant, position, min(limit + 1, READ_CHUNK))
    tasks, last = paging.fill(source, position_of, limit=limit)
    cursor = None if last is None else encode_cursor(*last)
    return DeadLetterPage(tasks=tasks, next=cursor, next_cursor=cursor)


@router.post(
    "/v1/queues/<queue>/dlq/replay",
    summary="Replay dead letters",
    description="{\"ids\": [...]} (≤ 1000) or {\"all\": true}. Replayed tasks are ready "
                "again at the back of their line with their attempts reset.",
    operation_id="replayDeadLetters",
    tags=["dead letters"],
    responses=responses("Which tasks were replayed and which were skipped."),
)
def replay_dead_letters(queue: QueuePath,
                        body: Annotated[DeadLetterSelection, Body()]) -> ReplayResult:
    ids, refused, everything = selected(queue, body)
    tq = engine()
    if everything:
        replayed, skipped = tq.dlq_replay(queue, all_dead=True)
        return ReplayResult(replayed=replayed, skipped=skipped)
    replayed, skipped = [], list(refused)
    for chunk in chunks(ids):
        done, not_done = tq.dlq_replay(queue, ids=chunk)
        replayed.extend(done)
        skipped.extend(not_done)
    return ReplayResult(replayed=replayed, skipped=skipped)


@router.delete(
    "/v1/queues/<queue>/dlq",
    summary="Purge dead letters",
    description="Without a body every dead letter of the queue (or of the caller's tenant) "
                "is deleted; {\"ids\": [...]} deletes only those.",
    operation_id="purgeDeadLetters",
    tags=["dead letters"],
    responses=responses("The ids deleted."),
)
def purge_dead_letters(
    queue: QueuePath,
    body: Annotated[DeadLetterSelection | None, Body()] = None,
) -> PurgeResult:
    ids, _, everything = selected(queue, body or DeadLetterSelection(all=True))
    tq = engine()
    if everything:
        return PurgeResult(purged=tq.dlq_purge(queue, all_dead=True))
    purged: list[UUID] = []
    for chunk in chunks(ids):
        purged.extend(tq.dlq_purge(queue, ids=chunk))
    return PurgeResult(purged=purged)
