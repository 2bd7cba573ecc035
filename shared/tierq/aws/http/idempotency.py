"""The ``Idempotency-Key`` header of the POST routes (see :mod:`tierq.logic.idempotency`).

A route hands its work to :func:`in_postgres` (enqueues, dead-letter replays) or
:func:`in_valkey` (acks, nacks, releases, heartbeats) with the key the request carried.
Without a key the work simply runs. With one, the first request runs it and its 2xx
response is kept; a repeat with the same body gets that response again (header
``Idempotent-Replayed: true``) and changes nothing.

With several PostgreSQL shards, a request whose work spans shards (a batch of tenants
whose homes differ, dead letters of every tenant) runs as one part per shard
(:func:`in_postgres_by_shard`): each part's record is kept on its own shard, in the
transactions that write its tasks, under the key and the shard's name. A repeat answers
the parts already done from their records and runs the rest, so a request cut short
between two shards finishes, once, when it is retried. One more record, on the default
shard, binds the key to the request's body whichever shards its parts touch: a second
body under the key is 409 ``idempotency_key_reused`` even when its tasks would land only
on shards the first never wrote to. A request with a key therefore needs the default
shard to answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Header
from pydantic import BaseModel

from tierq.aws.http import request
from tierq.aws.runtime import default_engine, on_shard, sharded
from tierq.logic import idempotency
from tierq.logic.idempotency import Kept, PgClaim, ValkeyClaim

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(alias=HEADER, min_length=1, max_length=MAX_KEY_LENGTH, pattern=r"^[\x21-\x7e]+$",
           description="Any unique string (a UUID, say; 1 to 255 visible ASCII characters) "
                       "per logical request, the same on its retries. A retry with the same "
                       "key and body gets the first 2xx response and changes nothing; the "
                       "same key with another body is 409 idempotency_key_reused; while the "
                       "first request still runs, 409 idempotency_in_progress. Kept per "
                       "caller, route and queue."),
]

Result = TypeVar("Result", bound=BaseModel)
Part = TypeVar("Part", bound=BaseModel)


def caller_scope() -> str:
    """Whose keys these are: a pinned tenant's own, or the admin's (every unpinned caller)."""
    pinned = request.pinned_tenant()
    return "admin" if pinned is None else f"tenant:{pinned}"


def _body() -> Any:
    event = request.current_event()
    return event.json_body if event.body else None


def _scope_and_fingerprint(route: str, queue: str, key: str) -> tuple[bytes, bytes]:
    return (idempotency.scope_key(caller_scope(), route, queue, key),
            idempotency.fingerprint(_body()))


def kept_response(kept: Kept) -> Response[Any]:
    return Response(status_code=kept.status, content_type=content_types.APPLICATION_JSON,
                    body=kept.body, headers={REPLAYED_HEADER: "true"})


def fresh_response(result: BaseModel) -> Response[Any]:
    return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=result)


def in_postgres(route: str, queue: str, key: str | None,
                work: Callable[[PgClaim | None], Result]) -> Response[Any]:
    """Run ``work`` once per key. ``work`` gets the claim (None without a key) and must record
    its response so far with ``claim.record(conn, ...)`` in each transaction that writes
    tasks; ``claim.committed`` holds what a dead earlier owner recorded."""
    if key is None:
        return fresh_response(work(None))
    scope, body_fingerprint = _scope_and_fingerprint(route, queue, key)
    claimed = idempotency.claim_in_postgres(default_engine().ctx, scope, body_fingerprint)
    if isinstance(claimed, Kept):
        return kept_response(claimed)
    try:
        result = work(claimed)
    except BaseException:
        claimed.abandon()
        raise
    claimed.finish(result.model_dump(mode="json"))
    return fresh_response(result)


def in_postgres_by_shard(route: str, queue: str, key: str | None, shards: Sequence[str],
                         work: Callable[[str, PgClaim | None], Part],
                         model: type[Part],
                         combine: Callable[[dict[str, Part]], BaseModel]) -> Response[Any]:
    """:func:`in_postgres` for work done in one part per shard (``work(shard, claim)``, the
    claim kept on that shard), the parts' answers combined by ``combine`` ({shard: part},
    in ``shards`` order). Without shards this is exactly :func:`in_postgres`."""
    if not sharded():
        only = shards[0] if shards else "default"
        return in_postgres(route, queue, key, lambda claim: combine({only: work(only, claim)}))
    if key is None:
        return fresh_response(combine({shard: work(shard, None) for shard in shards}))
    scope, body_fingerprint = _scope_and_fingerprint(route, queue, key)
    # the key's body, on the default shard: another body is refused here (409), and a
    # second request with this one waits its turn (409 in progress) while this one runs
    body = idempotency.claim_in_postgres(default_engine().ctx, scope + b"|body",
                                         body_fingerprint)
    parts: dict[str, Part] = {}
    replayed = bool(shards)
    ran = False  # a part's work has started: it may have committed tasks
    try:
        for shard in shards:
            claimed = on_shard(shard, lambda e, s=shard: idempotency.claim_in_postgres(  # type: ignore[misc]
                e.ctx, scope + b"|shard:" + s.encode(), body_fingerprint))
            if isinstance(claimed, Kept):
                parts[shard] = model.model_validate(claimed.body)
                continue
            replayed = False
            ran = True
            try:
                part = work(shard, claimed)
            except BaseException:
                claimed.abandon()
                raise
            claimed.finish(part.model_dump(mode="json"))
            parts[shard] = part
    except BaseException:
        # no part ran: the key is free again, as on one database; once one has run (it
        # may have committed tasks), the key stays bound to this body for its retry
        if isinstance(body, PgClaim):
            if ran:
                body.finish({})
            else:
                body.abandon()
        raise
    if isinstance(body, PgClaim):
        body.finish({})  # it holds the body's fingerprint only; the parts hold the answers
    result = combine(parts)
    if replayed:
        return Response(status_code=200, content_type=content_types.APPLICATION_JSON,
                        body=result, headers={REPLAYED_HEADER: "true"})
    return fresh_response(result)


def in_valkey(route: str, queue: str, key: str | None,
              work: Callable[[], Result]) -> Response[Any]:
    """Run ``work`` once per key, the record kept in Valkey."""
    if key is None:
        return fresh_response(work())
    scope, body_fingerprint = _scope_and_fingerprint(route, queue, key)
    claimed = idempotency.claim_in_valkey(default_engine().ctx, scope, body_fingerprint)
    if isinstance(claimed, Kept):
        return kept_response(claimed)
    try:
        result = work()
    except BaseException:
        if isinstance(claimed, ValkeyClaim):
            claimed.abandon()
        raise
    if claimed is not None:
        claimed.finish(result.model_dump(mode="json"))
    return fresh_response(result)
