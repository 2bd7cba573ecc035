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
on shards the first never wrote to. The binding fails open: while the default shard does
not answer, a keyed request still runs on the shards it needs (each part's record keeps it
from running twice), and only that check is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Header
from pydantic import BaseModel

from tierq.aws.http import request
from tierq.aws.runtime import default_engine, default_shard, on_shard, sharded
from tierq.errors import Unavailable
from tierq.logic import idempotency
from tierq.logic.idempotency import IdempotencyInProgress, Kept, PgClaim, ValkeyClaim

log = logging.getLogger(__name__)

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
                       "caller (the tenant, or admin, and the token's sub, or its "
                       "client_id when it has no sub, told apart by the claim's name; a "
                       "token with neither shares the keys of its tenant), route and "
                       "queue."),
]

Result = TypeVar("Result", bound=BaseModel)
Part = TypeVar("Part", bound=BaseModel)


def caller_scope() -> tuple[str, str | None]:
    """Whose keys these are: (the tenant the caller is pinned to, or ``admin`` for every
    unpinned caller; the subject of its token).

    ========================================  ==========================================
    the caller                                its keys are shared with
    ========================================  ==========================================
    tenant token with ``sub`` / ``client_id``  the tokens of that tenant and that subject
                                              (``sub:X`` and ``client_id:X`` differ)
    admin token with ``sub`` / ``client_id``   the admin tokens of that subject
    tenant token with neither                  every such token of the tenant
    admin token with neither, local gateway    every such admin caller
    ========================================  ==========================================
    """
    caller = request.current_caller()
    owner = "admin" if caller.pinned is None else f"tenant:{caller.pinned}"
    return owner, caller.subject


def scope_of(route: str, queue: str, key: str) -> bytes:
    """The record's identity for this request's caller (:func:`caller_scope`)."""
    owner, subject = caller_scope()
    return idempotency.scope_key(owner, route, queue, key, subject=subject)


def _body() -> Any:
    event = request.current_event()
    return event.json_body if event.body else None


def _scope_and_fingerprint(route: str, queue: str, key: str) -> tuple[bytes, bytes]:
    return scope_of(route, queue, key), idempotency.fingerprint(_body())


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
        only = shards[0] if shards else default_shard()
        return in_postgres(route, queue, key, lambda claim: combine({only: work(only, claim)}))
    if key is None:
        return fresh_response(combine({shard: work(shard, None) for shard in shards}))
    scope, body_fingerprint = _scope_and_fingerprint(route, queue, key)
    bound = _bind_body(scope, body_fingerprint)
    parts: dict[str, Part] = {}
    replayed = bool(shards)
    try:
        for shard in shards:
            claimed = on_shard(shard, lambda e, s=shard: idempotency.claim_in_postgres(  # type: ignore[misc]
                e.ctx, scope + b"|shard:" + s.encode(), body_fingerprint))
            if isinstance(claimed, Kept):
                parts[shard] = model.model_validate(claimed.body)
                continue
            replayed = False
            try:
                part = work(shard, claimed)
            except BaseException:
                claimed.abandon()
                raise
            claimed.finish(part.model_dump(mode="json"))
            parts[shard] = part
    finally:
        # kept whatever happened: the key stays bound to this body for its retries
        if bound is not None:
            _finish_on_default_shard(bound)
    result = combine(parts)
    if replayed:
        return Response(status_code=200, content_type=content_types.APPLICATION_JSON,
                        body=result, headers={REPLAYED_HEADER: "true"})
    return fresh_response(result)


def _bind_body(scope: bytes, body_fingerprint: bytes) -> PgClaim | None:
    """Bind the key to this body on the default shard (409 ``idempotency_key_reused`` when
    it is bound to another); the claim to finish after the parts, or None when there is
    nothing to finish. The binding fails open: with the default shard not answering, or a
    request with this body still running, the parts' own records (each shard's) still keep
    the request from running twice; only a reused key's check waits for the shard."""
    default = default_shard()
    try:
        bound = on_shard(default, lambda e: idempotency.claim_in_postgres(
            e.ctx, scope + b"|body", body_fingerprint))
    except (Unavailable, IdempotencyInProgress) as exc:  # the body's check came first
        log.warning("Idempotency-Key not bound to its body on shard %s: %s", default, exc)
        return None
    return bound if isinstance(bound, PgClaim) else None


def _finish_on_default_shard(bound: PgClaim) -> None:
    """Keep the binding (its own record, no response: the parts hold the answers)."""
    default = default_shard()
    try:
        on_shard(default, lambda _e: bound.finish({}))
    except Unavailable as exc:  # its lease ends it: a retry then takes it over
        log.warning("Idempotency-Key binding not kept on shard %s: %s", default, exc)


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
