"""Batch rows in the engine: which enqueued batches become one, and the move of a member
out of its row before any transition but a plain ack (migration 0030;
docs/design-rotating-tables.md, *Design D*).

| a batch enqueued                                                   | written as     |
| ------------------------------------------------------------------ | -------------- |
| ``TIERQ_BATCH_ROWS`` on; every task warm now, of one max_attempts  | one batch row  |
| and time limit; none with a key, group, parents, schedule, trace   |                |
| or big payload                                                     |                |
| any other                                                          | a row per task |

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

from tierq.core.batch_ids import batch_ids, batch_member
from tierq.dal.store.base import Conn
from tierq.dal.store.rows import AckedRow
from tierq.logic.context import Context


class Member(Protocol):
    """What ``take`` reads and renumbers of a prepared task (``enqueue.Prepared``)."""

    id: str
    tenant: str
    state: str
    run_at_explicit: bool


@dataclass(frozen=True)
class BatchRow:
    """A prepared batch written as one batch row: its key and its tenants by place (names
    in first-seen order; a byte per place naming one, None for a batch of one tenant)."""

    key: str
    tenant_names: list[str]
    tenant_of: bytes | None


# The most tenants one batch row names (a byte per place: migration 0030).
MAX_TENANTS = 256


def take(ctx: Context, batch: Sequence[Member], columns: object) -> BatchRow | None:
    """Whether a prepared batch becomes one batch row: if so its tasks are given members'
    ids (``batch_ids``, in batch order: their places) and ``columns["ids"]`` with them, and
    the batch row is returned; else None. The caller has checked that no task has a key,
    group, parents, trace or big payload."""
    if not ctx.settings.batch_rows or not isinstance(columns, dict) \
            or columns.get("state") != "warm":
        return None
    names: dict[str, int] = {}
    of = bytearray()
    for p in batch:
        if p.run_at_explicit or p.state != "warm":
            return None
        n = names.setdefault(p.tenant, len(names))
        if n >= MAX_TENANTS:
            return None
        of.append(n)
    ids = batch_ids(len(batch), tag=ctx.id_tag)
    for p, task_id in zip(batch, ids, strict=True):
        p.id = task_id
    columns["ids"] = "{" + ",".join(ids) + "}"
    return BatchRow(ids[0], list(names), bytes(of) if len(names) > 1 else None)


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
    | all marked              | ``end_batch_members``, one round trip                 |
    | some marked             | both, the marked ones first                           |
    """
    marks = [batch_member(task_id) for task_id in ids]
    if any(marks):
        members = [n for n, mark in enumerate(marks) if mark]
        others = [n for n, mark in enumerate(marks) if not mark]
        finished = ctx.store.end_batch_members(
            queue, [ids[n] for n in members], [owners[n] for n in members],
            [attempts[n] for n in members], relaxed=relaxed)
        if others:
            finished += finish_plain(ctx, queue, [ids[n] for n in others],
                                     [owners[n] for n in others],
                                     [attempts[n] for n in others], relaxed=relaxed)
        return finished
    # (one attempt and one tenant, the usual batch: checked against the set; an admin's
    # batch over tenants pairs each row with its own)
    if min(attempts) == max(attempts) and min(owners) == max(owners):
        return ctx.store.ack_delete(queue, ids, owners, attempts[0], relaxed=relaxed)
    return ctx.store.ack_delete_by_attempt(queue, ids, owners, attempts, relaxed=relaxed)
