"""Big payloads: a task whose payload is larger than the inline limit carries a pointer to
an object in the payload store instead (``tierq.core.pointers``, the SQS extended client's
format), and its handler gets the object.

1. **upload** (the producer, ``Client.enqueue``): ``POST /v1/queues/{queue}/payloads`` gives
   a key under the caller's tenant prefix and a presigned upload (:func:`new_upload`), and
   records the key as pending (a tenant has at most ``TIERQ_MAX_PENDING_PAYLOADS``); the
   producer sends the bytes to the store itself.
2. **enqueue** (the API): the pointer is checked (:func:`check`: this deployment's bucket,
   the task's tenant's prefix, 403 otherwise; :func:`precheck`: a key this shard handed out
   and has not deleted, 422 otherwise) and, in the insert's own transaction, its key's row
   locked and each (object, task) recorded (:func:`use`). A pointer belongs to the shard
   whose upload route made it: another shard refuses it (it knows no such key). One
   pointer may be enqueued again, on that shard, until its object is deleted.
3. **claim**: the claim carries the pointer (claims and consumer batches stay within 6 MB);
   ``POST /v1/queues/{queue}/payloads/fetch`` gives a Worker a presigned download
   (:func:`new_download`); a consumer function reads the bucket with its own role
   (``tierq.aws.payloads``).
4. **delete** (the reaper, :func:`sweep`): a key's row is locked, then checked in the same
   transaction and tombstoned ('deleted') when no task needs the object: no task that
   named it has a row left (acked without a result, deleted, or purged when its retention
   ended), or, pending, no task named it within ``TIERQ_PAYLOAD_PENDING_SECONDS``; then the
   object, then its (object, task) rows. The tombstone stays ``TIERQ_REAPER_PAYLOAD_
   TOMBSTONE_DAYS`` (30): an enqueue naming the key is refused (422 "was deleted"); after
   that the key's row goes too, and the key is refused as one this shard does not know
   (422 "is not known here"), so the table holds the live keys and a bounded tail.

The bucket's lifecycle rule (template.yaml ``PayloadExpirationDays``, longer than a year's
delay plus retention) is the backstop for objects the reaper could not delete.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from tierq.core.ids import uuid7_strings
from tierq.core.pointers import (
    POINTER_CLASS,
    MalformedPointer,
    Pointer,
    parse_pointer,
    tenant_prefix,
)
from tierq.dal.payload_store import PayloadStore, Transfer, payload_store
from tierq.dal.store.base import Conn
from tierq.errors import Forbidden, InvalidInput, PayloadTooLarge, TooManyRequests
from tierq.logic.context import Context, to_datetime

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


def _refusal(key: str, where: str, state: str | None) -> InvalidInput:
    field = f"{where}.payload"
    if state is None:
        message = (f"payload object {key!r} is not known here (for the task's tenant): a "
                   "pointer belongs to the tenant and the "
                   "shard its upload was made through (POST /v1/queues/{queue}/payloads "
                   "to a queue of this shard), and a deleted object's key is forgotten "
                   "after TIERQ_REAPER_PAYLOAD_TOMBSTONE_DAYS; upload the payload again "
                   "for this queue")
    else:
        message = (f"payload object {key!r} was deleted (no task needed it any more); "
                   "upload the payload again")
    return InvalidInput(f"{field}: {message}", details=[{"field": field, "message": message}])


def precheck(ctx: Context, keys: Sequence[tuple[str, str]]) -> None:
    """Refuse, before anything is written, pointers (``(key, where)`` pairs) to objects
    this shard never handed out or has deleted (422). :func:`use` checks again under
    lock."""
    if not keys:
        return
    states = ctx.store.payload_keys_states([key for key, _ in keys])
    for key, where in keys:
        state = states.get(key)
        if state is None or state == "deleted":
            raise _refusal(key, where, state)


def use(ctx: Context, conn: Conn,
        tasks: Sequence[tuple[str | None, str, str, str]]) -> None:
    """Record each (object, task) of tasks being inserted in ``conn``'s transaction:
    ``(key, task id, task's tenant, where)``. Their keys' rows are locked until it commits,
    so the reaper cannot delete an object between this check and the commit. A key deleted,
    unknown or handed out to another tenant than the task's refuses the whole transaction
    (422), the statement that locks the keys matching each key's tenant with its task's."""
    pairs = [(key, task_id, tenant, where) for key, task_id, tenant, where in tasks if key]
    if not pairs:
        return
    states = ctx.store.payload_keys_use([(key, tenant) for key, _, tenant, _ in pairs], conn)
    for key, _, tenant, where in pairs:
        state = states.get((key, tenant))
        if state is None or state == "deleted":
            raise _refusal(key, where, state)
    ctx.store.payload_objects_register([key for key, _, _, _ in pairs],
                                       [task_id for _, task_id, _, _ in pairs],
                                       to_datetime(ctx.now()), conn)


def use_bulk(ctx: Context, conn: Conn) -> None:
    """A bulk chunk's pointers (logic/bulk.py), in its transaction after its insert: each
    checked as an enqueue's (:func:`check`, :func:`use`; the chunk refused otherwise) and
    recorded with its task when the task was created."""
    rows = ctx.store.payload_bulk_pointers(conn, POINTER_CLASS)
    if not rows:
        return
    used: list[tuple[str | None, str, str, str]] = []
    for ord_, task_id, tenant, text, created in rows:
        where = f"row {ord_}"
        key = check(ctx, where, tenant, orjson.loads(text))
        if created:
            used.append((key, task_id, tenant, where))
    use(ctx, conn, used)


def use_now(ctx: Context, tasks: Sequence[tuple[str | None, str, str, str]]) -> None:
    """:func:`use` in a transaction of its own."""
    if any(key for key, _, _, _ in tasks):
        ctx.db.run_transaction(lambda conn: use(ctx, conn, tasks), what="payload records")


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
    now = ctx.now()
    cap = ctx.settings.max_pending_payloads
    since = to_datetime(now - ctx.settings.payload_pending_seconds)
    if ctx.store.payload_keys_pending(tenant, since) >= cap:
        raise TooManyRequests(
            f"tenant {tenant!r} has {cap} uploads no task has named yet "
            "(TIERQ_MAX_PENDING_PAYLOADS): enqueue them, or wait for the reaper to delete "
            "those never enqueued", retry_after=60)
    key = f"{tenant_prefix(tenant)}{uuid7_strings(1)[0]}"
    ctx.store.payload_keys_add(key, tenant, to_datetime(now))  # pending until enqueued
    seconds = ctx.settings.payload_url_seconds
    return Upload(Pointer(store.bucket, key), store.upload(key, size, seconds), seconds)


def not_the_callers(key: str) -> Forbidden:
    """The 403 of a download whose pointer is not one of the caller's payloads."""
    message = f"the object {key!r} is not one of the caller's payloads"
    return Forbidden(message, details=[{"field": "pointer", "message": message}])


def new_download(ctx: Context, tenant: str | None, payload: Any,
                 task_id: str | None = None) -> tuple[Transfer, int]:
    """A presigned download of the object ``payload`` points at; ``tenant``: the caller's
    pinned tenant (None: an admin, any tenant's objects). ``task_id``, when given: the
    task must carry that object and be of the key's tenant (403 otherwise)."""
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
        raise not_the_callers(pointer.key)
    if task_id is not None and not ctx.store.payload_object_of_task(pointer.key, task_id,
                                                                    owner):
        message = (f"task {task_id} of tenant {owner!r} does not carry the object "
                   f"{pointer.key!r}")
        raise Forbidden(message, details=[{"field": "task_id", "message": message}])
    seconds = ctx.settings.payload_url_seconds
    return store.download(pointer.key, seconds), seconds


# -- deletion ---------------------------------------------------------------------------------

_cursors: dict[int, str] = {}  # per store (one per shard): the last key a sweep visited
_cursor_lock = threading.Lock()


# How long a deleted object's key is remembered as deleted (its tombstone), by default.
TOMBSTONE_DAYS = 30


@dataclass
class Swept:
    visited: int = 0
    deleted: int = 0
    failed: int = 0
    forgotten: int = 0  # tombstones past their days, removed


def sweep(ctx: Context, slice_size: int, slices: int,
          tombstone_days: float = TOMBSTONE_DAYS) -> Swept:
    """Delete the objects no task needs any more: up to ``slices`` slices of live keys after
    this process's cursor (it wraps round at the end). Each slice's keys are locked,
    checked and tombstoned in one transaction (an enqueue naming one waits, then is
    refused; one holding it is skipped), then deleted from the store. A used key goes once
    no task that named it has a row left; a pending one once it is older than
    ``TIERQ_PAYLOAD_PENDING_SECONDS``. An object whose delete failed is live again and
    tried on the next round. Then the tombstones older than ``tombstone_days`` are
    removed, oldest first, up to ``slices`` slices (as many as a pass may tombstone, so
    the old ones never pile up): the table keeps the live keys and the recent tombstones,
    which the live keys' scan would otherwise step over forever."""
    out = Swept()
    with _cursor_lock:
        after = _cursors.get(id(ctx.store), "")
    now = ctx.now()
    pending_before = to_datetime(now - ctx.settings.payload_pending_seconds)
    forget_before = to_datetime(now - tombstone_days * 86_400)
    for _ in range(slices):
        keys = ctx.store.payload_keys_after(after, slice_size)
        out.visited += len(keys)
        # (the store, and so boto3, only once there may be something to delete)
        store = store_of(ctx) if keys else None
        if store is not None:
            unused = ctx.store.payload_keys_mark_deleted(keys, to_datetime(now),
                                                         pending_before)
            if unused:
                try:
                    failed = set(store.delete(unused))
                except Exception:  # the store (S3) failing must not fail the reaper's pass
                    log.exception("deleting %d payload objects failed; tried again next "
                                  "round", len(unused))
                    failed = set(unused)
                out.failed += len(failed)
                if failed:
                    ctx.store.payload_keys_restore(sorted(failed))
                done = [key for key in unused if key not in failed]
                out.deleted += len(done)
                if done:
                    ctx.store.payload_objects_forget(done)
        if len(keys) < slice_size:
            after = ""  # round complete: the next starts from the first key
            break
        after = keys[-1]
    with _cursor_lock:
        _cursors[id(ctx.store)] = after
    for _ in range(slices):  # as many slices as may have been tombstoned: the tail stays short
        forgotten = ctx.store.payload_tombstones_forget(forget_before, slice_size)
        out.forgotten += forgotten
        if forgotten < slice_size:
            break
    return out
