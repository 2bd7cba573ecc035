"""The ``Idempotency-Key`` header of the POST routes: read here, kept below HTTP.

The engines take the key on each keyed operation (tierq.logic.idempotency: the key's
binding to its body, the records in the tasks' transactions, the parts per shard); a route
passes it on with :func:`keyed` (the key, the caller's scope from its token, the body's
fingerprint) and answers with :func:`answer`. The outcomes, as the routes answer them:

| the engine | the response |
| --- | --- |
| ran the call | 200, its answer |
| answered from the key's record (``idempotent_replay``) | 200, the kept answer, marked |
| ``IdempotencyKeyReused`` (another body) | 409 ``idempotency_key_reused`` |
| ``IdempotencyInProgress`` (the first still runs) | 409 ``idempotency_in_progress`` |

(marked: the header ``Idempotent-Replayed: true``.)
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Header
from pydantic import BaseModel

from tierq.aws.http import request
from tierq.logic import idempotency
from tierq.logic.idempotency import Caller

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = idempotency.MAX_KEY_LENGTH

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


class Keyed(TypedDict):
    """The keyword arguments of an engine's keyed operation."""

    idempotency_key: str | None
    caller: Caller | None
    body_fingerprint: bytes | None


def caller_scope() -> Caller:
    """Whose keys these are: the tenant the caller is pinned to, or ``admin`` for every
    unpinned caller, and the subject of its token (its issuer, when it names one, and its
    ``sub`` or ``client_id``: :func:`tierq.aws.http.access.subject_of`).

    ========================================  ==========================================
    the caller                                its keys are shared with
    ========================================  ==========================================
    tenant token with ``sub`` / ``client_id``  the tokens of that tenant, that issuer
                                              (``iss``, or none) and that subject
                                              (``sub:X`` and ``client_id:X`` differ)
    admin token with ``sub`` / ``client_id``   the admin tokens of that issuer and subject
    tenant token with neither                  every such token of the tenant, whatever
                                              its issuer
    admin token with neither, local gateway    every such admin caller
    ========================================  ==========================================
    """
    caller = request.current_caller()
    owner = "admin" if caller.pinned is None else f"tenant:{caller.pinned}"
    return Caller(owner, caller.subject)


def body_fingerprint() -> bytes:
    """The fingerprint of this request's JSON body (of null, without a body)."""
    event = request.current_event()
    return idempotency.fingerprint(event.json_body if event.body else None)


def keyed(key: str | None) -> Keyed:
    """The engine's keyword arguments for a request with header value ``key``: the key,
    its caller and its body's fingerprint (nothing of it without a key)."""
    if key is None:
        return Keyed(idempotency_key=None, caller=None, body_fingerprint=None)
    return Keyed(idempotency_key=key, caller=caller_scope(), body_fingerprint=body_fingerprint())


def answer(result: BaseModel, replayed: bool) -> Response[Any]:
    """200 with ``result``; marked ``Idempotent-Replayed: true`` when the engine answered
    it from the key's record."""
    return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=result,
                    headers={REPLAYED_HEADER: "true"} if replayed else None)
