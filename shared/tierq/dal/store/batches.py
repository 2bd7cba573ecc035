"""Statements of batch rows, the tasks of one enqueued batch in one row
(``sql/queries/batches.sql``, migration 0030; docs/design-rotating-tables.md, *Design D*).

A member is named by its id alone: its batch's key and its place come from the id
(``tierq.core.batch_ids``). An id without a member's mark is passed over by every method
here, so a caller may pass the ids of a transition whole.

| method                 | for                                  | locks (per batch, key order) |
| ---------------------- | ------------------------------------ | ---------------------------- |
| ``insert_batch``       | an enqueue admitted warm             | none                         |
| ``move_out_of_batches``| any transition but a plain ack       | the batch's alone            |
| ``end_batch_members``  | a plain ack                          | the batch's, shared          |
| ``batch_members``      | a read by id                         | none                         |
| ``sweep_batches``      | the sweep, a pass                    | each batch's alone, if free  |
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
from psycopg.rows import scalar_row, tuple_row

from tierq.core.batch_ids import batch_of
from tierq.dal.postgres import int_array, text_array, uuid_array
from tierq.dal.store.base import Conn, StoreBase, positional
from tierq.dal.store.rows import BatchMemberRow, BatchSweepRow

# The smallest uuid: a sweep's first pass starts after it.
FIRST_KEY = "00000000-0000-0000-0000-000000000000"


def _members(ids: Sequence[str], tenants: Sequence[str] | None = None) -> dict[str, Any] | None:
    """The parameters naming the marked ids among ``ids`` (with their tenants, when given,
    in the same order); None when no id is marked."""
    found: list[tuple[str, str, int, str]] = []
    for n, task_id in enumerate(ids):
        member = batch_of(task_id)
        if member is not None:
            found.append((str(task_id), member[0], member[1],
                          tenants[n] if tenants is not None else ""))
    if not found:
        return None
    params: dict[str, Any] = {"ids": uuid_array(f[0] for f in found),
                              "batches": uuid_array(f[1] for f in found),
                              "places": int_array(f[2] for f in found)}
    if tenants is not None:
        params["tenants"] = text_array([f[3] for f in found])
    return params


class BatchQueries(StoreBase):
    def insert_batch(self, queue: str, now: datetime, batch: str, tenants: Sequence[str],
                     priorities: Sequence[int], payloads: str, max_attempts: int,
                     timeout_seconds: int | None, *, conn: Conn | None = None) -> int:
        """One batch row keyed ``batch`` (the first member's id, ``batch_ids``), its tasks'
        tenants, priorities and payloads (a JSON array of their texts) by place; its first
        seq."""
        [first] = self._fetch("insert_batch", {
            "batch": batch, "queue": queue, "tenants": orjson.dumps(list(tenants)).decode(),
            "priorities": int_array(priorities), "payloads": payloads,
            "max_attempts": max_attempts, "timeout": timeout_seconds, "now": now},
            scalar_row, conn)
        return int(first)

    def move_out_of_batches(self, queue: str, now: datetime, ids: Sequence[str],
                            tenants: Sequence[str], *, conn: Conn | None = None) -> list[str]:
        """Make the members among ``ids`` (of ``queue``, each of its tenant in ``tenants``)
        that are still in their batch rows rows of ``tierq_tasks``, warm as they stand, and
        record them as moved; the ids moved. In the caller's transaction when ``conn`` is
        given (it should commit before the transition's own statements lock the rows),
        else in one of its own."""
        params = _members(ids, tenants)
        if params is None:
            return []
        params.update(queue=queue, now=now)

        def body(c: Conn) -> list[str]:
            self._fetch("lock_batches", {"batches": params["batches"]}, scalar_row, c)
            return [str(i) for i in self._fetch("move_out_of_batches", params, scalar_row, c)]

        if conn is not None:
            return body(conn)
        return self.db.run_transaction(body, what="a move out of batch rows")

    def end_batch_members(self, queue: str, ids: Sequence[str], tenants: Sequence[str], *,
                          conn: Conn | None = None) -> list[str]:
        """A plain ack's end of the members among ``ids`` still in their batch rows (each
        of its tenant in ``tenants``); the ids ended. A member moved out is not among them:
        the ack finds its row in ``tierq_tasks``, as for any task."""
        params = _members(ids, tenants)
        if params is None:
            return []
        params["queue"] = queue

        def body(c: Conn) -> list[str]:
            self._fetch("lock_batches_shared", {"batches": params["batches"]}, scalar_row, c)
            return [str(i) for i in self._fetch("end_batch_members", params, scalar_row, c)]

        if conn is not None:
            return body(conn)
        return self.db.run_transaction(body, what="an ack of batch members")

    def batch_members(self, ids: Sequence[str], tenants: Sequence[str] = (), *,
                      conn: Conn | None = None) -> list[BatchMemberRow]:
        """The members among ``ids`` whose batch rows are still there, as those hold them
        (of the ``tenants`` named, when any are), in no order."""
        params = _members(ids)
        if params is None:
            return []
        params["tenants"] = text_array(list(tenants))
        return self._fetch("batch_members", params, positional(BatchMemberRow), conn)

    def sweep_batches(self, after: str, budget: int) -> tuple[str | None, BatchSweepRow]:
        """One pass of the sweep, in one transaction: of the ``budget`` batches after key
        ``after`` whose locks are free, those whose every member has ended are deleted with
        their ends. (The last key looked at, None when no batch was left after ``after``;
        what went.)"""
        def body(c: Conn) -> tuple[str | None, BatchSweepRow]:
            seen = self._fetch("lock_free_batches", {"after": after, "budget": budget},
                               tuple_row, c)
            locked = [str(key) for key, free in seen if free]
            gone = BatchSweepRow(0, 0)
            if locked:
                [gone] = self._fetch("delete_ended_batches", {"batches": uuid_array(locked)},
                                     positional(BatchSweepRow), c)
            return (str(seen[-1][0]) if seen else None), gone

        return self.db.run_transaction(body, what="a pass of the batch sweep")
