"""Dead letters of a queue: ``GET /v1/queues/{queue}/dlq`` (newest first, paged),
``POST …/dlq/replay`` (``{"ids": [...]}`` or ``{"all": true}``: ready again at the back of
the line with fresh attempts) and ``DELETE …/dlq`` (purge the same selection; no body
purges them all). A pinned caller sees and touches only its own tenant's dead letters."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from tierq.api import request
from tierq.api.errors import responses
from tierq.api.models import MAX_IDS, DeadLetterPage, DeadLetterSelection, PurgeResult, ReplayResult
from tierq.api.params import QueuePath, TenantQuery
from tierq.api.runtime import engine
from tierq.errors import InvalidInput, NotFound

router = Router()

MAX_PAGE = 1000


def encode_cursor(finished_at: datetime, task_id: UUID) -> str:
    raw = f"{finished_at.isoformat()}|{task_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        when, _, task_id = raw.partition("|")
        at = datetime.fromisoformat(when)
        if at.tzinfo is None:
            raise ValueError("naive time")
        return at, UUID(task_id)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidInput.field("after", "not a cursor returned by a previous page") from exc


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
    operation_id="listDeadLetters",
    tags=["dead letters"],
    responses=responses("Dead tasks, most recently dead first, with last_error and attempts.",
                        403),
)
def list_dead_letters(
    queue: QueuePath,
    tenant: TenantQuery = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = 100,
    after: Annotated[str | None, Query(max_length=300, description="next_cursor of the "
                                       "previous page.")] = None,
) -> DeadLetterPage:
    tenant = request.check_tenant(tenant)
    position = decode_cursor(after) if after else None
    tasks = engine().dlq_list(queue, tenant=tenant, limit=limit, after=position)
    cursor = None
    if len(tasks) == limit:
        last = tasks[-1]
        cursor = encode_cursor(last.finished_at or last.created_at, last.id)
    return DeadLetterPage(tasks=tasks, next_cursor=cursor)


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
