"""Big payloads: a task whose payload is larger than the inline limit carries a pointer to
an object in the payload store instead (``tierq.core.pointers``, the SQS extended client's
format), and its handler gets the object.

1. **upload** (the producer, ``Client.enqueue``): ``POST /v1/queues/{queue}/payloads`` gives
   a key under the caller's tenant prefix and a presigned upload (:func:`new_upload`); the
   producer sends the bytes to the store itself.
2. **enqueue** (the API): the pointer is checked (:func:`check`: this deployment's bucket,
   the task's tenant's prefix; otherwise refused, nothing written); after the commit each
   (object, task) is recorded (:func:`register`).
3. **claim**: the claim carries the pointer (claims and consumer batches stay within 6 MB);
   ``POST /v1/queues/{queue}/payloads/fetch`` gives a Worker a presigned download
   (:func:`new_download`); a consumer function reads the bucket with its own role
   (``tierq.aws.payloads``).
4. **delete** (the reaper): once no task that named an object has a row left (acked without
   a result, deleted, or purged when its retention ended), the object, then its rows
   (:func:`sweep`).

The bucket's lifecycle rule (template.yaml ``PayloadExpirationDays``, longer than a year's
delay plus retention) is the backstop for objects nothing recorded: uploads never enqueued,
a record lost to a crash between the enqueue's commit and :func:`register`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tierq.core.ids import uuid7_strings
from tierq.core.pointers import MalformedPointer, Pointer, parse_pointer, tenant_prefix
from tierq.dal.payload_store import PayloadStore, Transfer, payload_store
from tierq.errors import Forbidden, InvalidInput, PayloadTooLarge
from tierq.logic.context import Context, to_datetime
from tierq.models.tasks import EnqueueOutcome

log = logging.getLogger(__name__)

NO_STORE = ("this deployment keeps no payloads outside tasks (TIERQ_PAYLOAD_BUCKET is not "
            "set)")


def store_of(ctx: Context) -> PayloadStore | None:
    return payload_store(ctx.settings)


def check(ctx: Context, where: str, tenant: str, payload: Any) -> str | None:
    """The object key when ``payload`` is a pointer the task may carry; None when it is no
    pointer. Refused (nothing written): a malformed pointer or no store here (422), another
    bucket or a key outside the tenant's prefix (403)."""
    field = f"{where}.payload"
    try:
        pointer = parse_pointer(payload)
    except MalformedPointer as exc:
        raise InvalidInput.field(field, str(exc)) from None
    if pointer is None:
        return None
    store = store_of(ctx)
    if store is None:
        raise InvalidInput.field(field, NO_STORE)
    prefix = tenant_prefix(tenant)
    if pointer.bucket != store.bucket:
        message = (f"the pointer names the bucket {pointer.bucket!r}; this deployment's "
                   f"payloads live in {store.bucket!r}")
    elif not pointer.key.startswith(prefix) or pointer.tenant() != tenant:
        message = (f"the object {pointer.key!r} is outside tenant {tenant!r}'s prefix "
                   f"{prefix!r}")
    else:
        return pointer.key
    raise Forbidden(f"{field}: {message}", details=[{"field": field, "message": message}])


def register(ctx: Context, tasks: Sequence[Any], outcomes: Sequence[EnqueueOutcome]) -> None:
    """Record each (object, task) of an enqueue that committed: ``tasks`` (models with a
    ``payload``) and their outcomes, in the same order. An ignored task made nothing."""
    register_tasks(ctx, [(task.payload, str(outcome.id))
                         for task, outcome in zip(tasks, outcomes, strict=True)
                         if outcome.outcome != "ignored"])


def register_tasks(ctx: Context, tasks: Sequence[tuple[Any, str]]) -> None:
    """Record each (object, task) of tasks that committed: (payload, task id) pairs."""
    keys: list[str] = []
    ids: list[str] = []
    for payload, task_id in tasks:
        try:
            pointer = parse_pointer(payload)
        except MalformedPointer:
            continue  # (refused by check before anything was written)
        if pointer is not None:
            keys.append(pointer.key)
            ids.append(task_id)
    if keys:
        ctx.store.payload_objects_register(keys, ids, to_datetime(ctx.now()))


@dataclass(frozen=True)
class Upload:
    pointer: Pointer
    transfer: Transfer
    expires_in: int


def new_upload(ctx: Context, tenant: str, size: int) -> Upload:
    """A new object key under ``tenant``'s prefix and a presigned upload of ``size`` bytes
    to it."""
    store = store_of(ctx)
    if store is None:
        raise InvalidInput.field("size", NO_STORE)
    limit = ctx.settings.max_offloaded_payload_bytes
    if size > limit:
        raise PayloadTooLarge(f"size is {size} bytes; an offloaded payload is at most {limit}",
                              details=[{"field": "size", "message": "too large"}])
    key = f"{tenant_prefix(tenant)}{uuid7_strings(1)[0]}"
    seconds = ctx.settings.payload_url_seconds
    return Upload(Pointer(store.bucket, key), store.upload(key, size, seconds), seconds)


def new_download(ctx: Context, tenant: str | None, payload: Any) -> tuple[Transfer, int]:
    """A presigned download of the object ``payload`` points at; ``tenant``: the caller's
    pinned tenant (None: an admin, any tenant's objects)."""
    store = store_of(ctx)
    try:
        pointer = parse_pointer(payload)
    except MalformedPointer as exc:
        raise InvalidInput.field("pointer", str(exc)) from None
    if pointer is None:
        raise InvalidInput.field("pointer", "not a pointer: give the task's payload as "
                                 "claimed")
    if store is None:
        raise InvalidInput.field("pointer", NO_STORE)
    owner = pointer.tenant()
    if pointer.bucket != store.bucket or owner is None or (
            tenant is not None and owner != tenant):
        message = f"the object {pointer.key!r} is not one of the caller's payloads"
        raise Forbidden(message, details=[{"field": "pointer", "message": message}])
    seconds = ctx.settings.payload_url_seconds
    return store.download(pointer.key, seconds), seconds


# -- deletion ---------------------------------------------------------------------------------

_cursors: dict[int, str] = {}  # per store (one per shard): the last key a sweep visited
_cursor_lock = threading.Lock()


@dataclass
class Swept:
    visited: int = 0
    deleted: int = 0
    failed: int = 0


def sweep(ctx: Context, slice_size: int, slices: int) -> Swept:
    """Delete the objects no task needs any more: up to ``slices`` slices of recorded
    objects after this process's cursor (it wraps round at the end). An object whose delete
    failed keeps its rows and is tried again on the next round."""
    out = Swept()
    with _cursor_lock:
        after = _cursors.get(id(ctx.store), "")
    for _ in range(slices):
        rows = ctx.store.payload_objects_unused(after, slice_size)
        out.visited += len(rows)
        unused = [row.object_key for row in rows if row.unused]
        # (the store, and so boto3, only once there is something to delete)
        store = store_of(ctx) if unused else None
        if store is not None:
            try:
                failed = set(store.delete(unused))
            except Exception:  # the store (S3) failing must not fail the reaper's pass
                log.exception("deleting %d payload objects failed; tried again next round",
                              len(unused))
                out.failed += len(unused)
                break
            out.failed += len(failed)
            done = [key for key in unused if key not in failed]
            out.deleted += len(done)
            if done:
                ctx.store.payload_objects_forget(done)
        if len(rows) < slice_size:
            after = ""  # round complete: the next starts from the first key
            break
        after = rows[-1].object_key
    with _cursor_lock:
        _cursors[id(ctx.store)] = after
    return out
