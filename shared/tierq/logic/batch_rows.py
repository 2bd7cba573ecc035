"""Batch rows in the engine: which enqueued batches become one, and the move of a member
out of its row before any transition but a plain ack (migration 0030;
docs/design-rotating-tables.md, *Design D*).

| a batch enqueued (``TIERQ_BATCH_ROWS`` on)                        | written as          |
| ----------------------------------------------------------------- | ------------------- |
| every task warm now, of one max_attempts and time limit, none     | its keyless tasks   |
| with a group, parents, schedule, trace or big payload, and at     | one batch row, its  |
| least ``TIERQ_BATCH_ROWS_MIN`` keyless tasks                      | keyed ones rows     |
| any other, the setting off, or a schema before migration 0033     | a row per task      |

A member stays in its batch row until a plain ack ends it (``end_batch_members``, by the
ack) or a transition moves it out (``move_out``): a nack, an expiry, a release, a cancel
or a delete, an ack that keeps a result, progress written, a refusal by the warm tier, or
a child that waits on it. From then on it is a row of ``tierq_tasks`` like any other, and
the transition's statements find it there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import orjson

from tierq.core.batch_ids import batch_ids, batch_member
from tierq.dal.postgres import text_array
from tierq.dal.store.base import Conn
from tierq.dal.store.batches import BatchColumns
from tierq.dal.store.rows import AckedRow
from tierq.logic.context import Context


class Member(Protocol):
    """What ``take`` reads and renumbers of a prepared task (``enqueue.Prepared``)."""

    id: str
    tenant: str
    key: str | None
    priority: int
    payload_json: bytes
    state: str
    run_at_explicit: bool
    max_attempts: int
    timeout_seconds: int | None
    group: str | None
    trace: bytes | None
    object_key: str | None
    after: list[str] | tuple[()]


@dataclass(frozen=True)
class BatchRow:
    """A prepared batch whose keyless tasks are one batch row: their indexes in the batch
    (its places, in order) and the statement's parameters (``BatchQueries.insert_batch``)."""

    places: list[int]
    columns: BatchColumns


# The most tenants one batch row names (a byte per place: migration 0030).
MAX_TENANTS = 256


def take(ctx: Context, batch: Sequence[Member]) -> BatchRow | None:
    """Whether a prepared batch's keyless tasks become one batch row (the module's table):
    if so they are given members' ids (``batch_ids``, in batch order: their places) and
    the batch row is returned, its keyed tasks beside it; else None (nothing changed)."""
    if not ctx.settings.batch_rows or not batch or not ctx.store.batch_rows_ready():
        return None
    first = batch[0]
    names: dict[str, int] = {}
    of = bytearray()
    places: list[int] = []
    for n, p in enumerate(batch):
        if p.run_at_explicit or p.state != "warm" or p.max_attempts != first.max_attempts \
                or p.timeout_seconds != first.timeout_seconds or p.group is not None \
                or p.trace is not None or p.object_key or p.after:
            return None
        if p.key is None:
            t = names.setdefault(p.tenant, len(names))
            if t >= MAX_TENANTS:
                return None
            of.append(t)
            places.append(n)
    if not places or len(places) < ctx.settings.batch_rows_min:
        return None
    ids = batch_ids(len(places), tag=ctx.id_tag)
    if not batch_member(ids[0]):  # (a clock behind MEMBERS_SINCE_MS: rows, as ever)
        return None
    for n, task_id in zip(places, ids, strict=True):
        batch[n].id = task_id
    members = [batch[n] for n in places]
    columns: BatchColumns = {
        "batch": ids[0], "tenant_names": text_array(list(names)),
        "tenant_of": bytes(of) if len(names) > 1 else None,
        "priorities": "{" + ",".join([str(p.priority) for p in members]) + "}",
        "payloads": (b"[" + b",".join([p.payload_json for p in members]) + b"]").decode(),
        "max_attempts": first.max_attempts, "timeout": first.timeout_seconds}
    if len(places) < len(batch):  # (keyed tasks too: rows of their own, in the same block)
        keyed = [n for n, p in enumerate(batch) if p.key is not None]
        columns.update({
            "seq_offsets": "{" + ",".join(map(str, places)) + "}",
            "keyed_ids": "{" + ",".join([batch[n].id for n in keyed]) + "}",
            "keyed_tenants": orjson.dumps([batch[n].tenant for n in keyed]).decode(),
            "keys": orjson.dumps([batch[n].key for n in keyed]).decode(),
            "keyed_priorities": "{" + ",".join([str(batch[n].priority) for n in keyed]) + "}",
            "keyed_payloads": (b"[" + b",".join([batch[n].payload_json for n in keyed])
                               + b"]").decode(),
            "keyed_offsets": "{" + ",".join(map(str, keyed)) + "}"})
    return BatchRow(places, columns)


def move_out(ctx: Context, queue: str | None, ids: Sequence[str],
             tenants: Sequence[str | None] | None, conn: Conn | None = None) -> list[str]:
    """Move the members among ``ids`` still in their batch rows out into ``tierq_tasks``
    (``move_out_of_batches``; a None queue or tenants names any, for tierq's own callers);
    the ids moved. Free when no id carries a member's mark."""
    if not any(batch_member(i) for i in ids):
        return []
    return ctx.store.move_out_of_batches(queue, ids, tenants, conn=conn)


def finish_plain(ctx: Context, queue: str, ids: Sequence[str], owners: Sequence[str],
                 attempts: Sequence[int], *, relaxed: bool = False) -> list[AckedRow]:
    """The PostgreSQL write of plain acks (each id with its lease's tenant and attempt): a
    member still in its batch row is ended (``end_batch_members``), any other task's row
    deleted; (id, group) of those finished.

    | the ids                 | statements                                            |
    | ----------------------- | ----------------------------------------------------- |
    | none marked             | ``ack_delete`` (one attempt, one tenant) or           |
    |                         | ``ack_delete_by_attempt``                              |
    | some marked             | ``end_batch_members``, one statement for all (as none |
    |                         | marked while its function is not there and no batch   |
    |                         | row exists: code deployed before migration 0031)      |
    """
    if any(batch_member(task_id) for task_id in ids):
        finished = ctx.store.end_batch_members(queue, ids, owners, attempts, relaxed=relaxed)
        if finished is not None:
            return finished
        # (its function not there yet, and no batch row anywhere: every task is a row)
    # (one attempt and one tenant, the usual batch: checked against the set; an admin's
    # batch over tenants pairs each row with its own)
    if min(attempts) == max(attempts) and min(owners) == max(owners):
        return ctx.store.ack_delete(queue, ids, owners, attempts[0], relaxed=relaxed)
    return ctx.store.ack_delete_by_attempt(queue, ids, owners, attempts, relaxed=relaxed)
