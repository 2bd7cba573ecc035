"""Statements of batch rows, the tasks of one enqueued batch in one row
(``sql/queries/batches.sql``, migration 0030; docs/design-rotating-tables.md, *Design D*).

A member is named by its id alone: its batch's key and its place come from the id
(``tierq.core.batch_ids``). An id without a member's mark is passed over by every method
here, so a caller may pass the ids of a transition whole.

| method                    | for                                 | locks (per batch, key order) |
| ------------------------- | ----------------------------------- | ---------------------------- |
| ``insert_batch``          | an enqueue admitted warm            | none                         |
| ``move_out_of_batches``   | any transition but a plain ack      | the batch's alone            |
| ``end_batch_members``     | a plain ack                         | the batch's, shared          |
| ``batch_members``         | a read by id                        | none                         |
| ``unended_batch_members`` | a downgrade's read of what to move  | none                         |
| ``sweep_batches``         | the sweep, a pass                   | each batch's alone, if free  |
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NotRequired, TypedDict

import psycopg
from psycopg.rows import scalar_row, tuple_row

from tierq.core.batch_ids import batch_of
from tierq.dal.postgres import (
    int_array,
    text_array,
    transaction,
    uuid_array,
)
from tierq.dal.store.base import (
    ROUTINE_RECHECK_SECONDS,
    Conn,
    StoreBase,
    first_and_keyed,
    positional,
)
from tierq.dal.store.rows import AckedRow, BatchMemberRow, BatchSweepRow


class BatchColumns(TypedDict):
    """A batch row's parameters (logic/batch_rows.take): its key (its first member's id),
    its tenants' names (a ``text[]`` literal) and a byte per place naming one (None: the
    only name's), its priorities (a ``smallint[]`` literal) and payloads (a JSON array) by
    place, its max_attempts and time limit; with keyed tasks, each place's offset in the
    batch and the keyed tasks' columns, as ``insert_tasks_uniform_keyed`` takes them."""

    batch: str
    tenant_names: str
    tenant_of: bytes | None
    priorities: str
    payloads: str
    max_attempts: int
    timeout: int | None
    seq_offsets: NotRequired[str]
    keyed_ids: NotRequired[str]
    keyed_tenants: NotRequired[str]
    keys: NotRequired[str]
    keyed_priorities: NotRequired[str]
    keyed_payloads: NotRequired[str]
    keyed_offsets: NotRequired[str]


# The smallest uuid: a sweep's first pass starts after it.
FIRST_KEY = "00000000-0000-0000-0000-000000000000"


def _members(ids: Sequence[str], tenants: Sequence[str | None] | None = None
             ) -> dict[str, Any] | None:
    """The parameters naming the marked ids among ``ids``, with their tenants (``tenants``
    in the same order; None: any tenant's); None when no id is marked."""
    found: list[int] = []
    keys: list[str] = []
    places: list[int] = []
    for n, task_id in enumerate(ids):
        member = batch_of(task_id)
        if member is not None:
            found.append(n)
            keys.append(member[0])
            places.append(member[1])
    if not found:
        return None
    named = [None if tenants is None else tenants[n] for n in found]
    params: dict[str, Any] = {
        "ids": uuid_array(ids[n] for n in found), "batches": uuid_array(keys),
        "places": int_array(places),
        # (NULL: any tenant's; each name quoted as text_array quotes it)
        "tenants": "{" + ",".join("NULL" if t is None else text_array([t])[1:-1]
                                  for t in named) + "}"}
    return params


# A member and a row's task as tierq_end_batch_members_v2 (migration 0031) reads them: a
# member's batch index and place, then the index of its lease's tenant and its attempt;
# big-endian. A group of members as _v3 (migration 0033) reads it: its batch index, its
# leases' tenant index and attempt.
_PACKED_MEMBER = struct.Struct(">HHHi")
_PACKED_ROW = struct.Struct(">Hi")
_PACKED_GROUP = struct.Struct(">HHi")
# The function a plain ack of members calls (migration 0033), and the one before it, for a
# schema migration 0033 has not reached yet (migration 0031).
ACK_FUNCTION = "tierq_end_batch_members_v3"
ACK_FUNCTION_V2 = "tierq_end_batch_members_v2"
# A group's place in _v3's answer: minus (its group's number times this, plus the place),
# less one; every place an id can name is below it (three hex digits).
_GROUP_STEP = 4096
# The fewest members of one batch, tenant and attempt an ack sends as a group: a shorter
# run costs the function more as a group than as members alone (python -m
# bench.batch_acks).
GROUP_MIN = 8
# A group_min no run reaches (no id names a place past _GROUP_STEP): every member alone,
# as ACK_FUNCTION_V2 reads them.
ALL_ALONE = _GROUP_STEP + 1
# How long a pass of the batch sweep waits for a row lock before it gives up (the reaper
# sweeps first in its pass, and its expiries must not wait on a purge).
SWEEP_LOCK_TIMEOUT = "200ms"


def _grouped_acks(ids: Sequence[str], tenants: Sequence[str], attempts: Sequence[int],
                  group_min: int = GROUP_MIN) -> tuple[dict[str, Any], dict[int, str]]:
    """The parameters of ``end_batch_members`` for ``ids`` (each once, its first tenant and
    attempt kept): each batch and tenant named once; the members of each run of one batch,
    tenant and attempt of at least ``group_min`` as a group (``_PACKED_GROUP``, its places
    ascending in an array literal), the others alone (``_PACKED_MEMBER``); each other task's
    id with its tenant and attempt (``_PACKED_ROW``). And each member's id by its number in
    the answer (a member alone: its index; a group's place: minus its group times
    ``_GROUP_STEP`` plus the place, less one)."""
    batches: dict[str, int] = {}
    names: dict[str, int] = {}
    runs: dict[tuple[int, int, int], list[tuple[int, str]]] = {}
    row_ids: list[str] = []
    rows: list[bytes] = []
    seen: set[str] = set()
    for task_id, tenant, attempt in zip(map(str, ids), tenants, attempts, strict=True):
        if task_id in seen:
            continue
        seen.add(task_id)
        name = names.setdefault(tenant, len(names))
        member = batch_of(task_id)
        if member is None:
            row_ids.append(task_id)
            rows.append(_PACKED_ROW.pack(name, attempt))
            continue
        key = (batches.setdefault(member[0], len(batches)), name, attempt)
        places = runs.get(key)
        if places is None:
            runs[key] = [(member[1], task_id)]
        else:
            places.append((member[1], task_id))
    groups: list[bytes] = []
    literals: list[str] = []
    alone: list[bytes] = []
    numbered: dict[int, str] = {}
    for (batch, name, attempt), places in runs.items():
        if len(places) < group_min:
            for place, task_id in places:
                numbered[len(alone)] = task_id
                alone.append(_PACKED_MEMBER.pack(batch, place, name, attempt))
            continue
        base = len(groups) * _GROUP_STEP
        groups.append(_PACKED_GROUP.pack(batch, name, attempt))
        places.sort()
        literals.append('"{' + ",".join([str(place) for place, _ in places]) + '}"')
        for place, task_id in places:
            numbered[-(base + place) - 1] = task_id
    return {"batches": uuid_array(batches), "tenants": text_array(list(names)),
            "groups": b"".join(groups), "places": "{" + ",".join(literals) + "}",
            "members": b"".join(alone), "row_ids": uuid_array(row_ids),
            "rows": b"".join(rows)}, numbered


def _finished(answer: Sequence[tuple[Any, ...]], numbered: dict[int, str]) -> list[AckedRow]:
    """The tasks an ack's function finished: the members it was given (``numbered``: each
    id by its number in the answer) but those it names as not ended, then the rows it
    deleted."""
    finished: list[AckedRow] = []
    unended: list[int] = []
    for task_id, grp, left in answer:
        if task_id is None:
            unended = left
        else:
            finished.append(AckedRow(task_id, grp))
    skip = set(unended)
    if not skip <= numbered.keys():  # (a function that numbers them otherwise: never guess)
        raise RuntimeError(f"the ack's function answered {len(skip - numbered.keys())} "
                           "member number(s) it was not given")
    return [AckedRow(m, None) for n, m in numbered.items() if n not in skip] + finished


def _missing(exc: psycopg.errors.UndefinedFunction, function: str) -> bool:
    """Whether ``exc`` says ``function`` itself is not there (the schema before its
    migration), not that something its body calls is missing."""
    return exc.diag.context is None and (exc.diag.message_primary or "").startswith(
        f"function {function}(")


class BatchQueries(StoreBase):
    # whether the schema serves batch rows (``batch_rows_ready``), and when to look again
    # while it does not (time.monotonic())
    _batch_rows_ready = False
    _batch_rows_due = 0.0
    # until when (time.monotonic()) plain acks call ACK_FUNCTION_V2 without trying
    # ACK_FUNCTION first: it was not there at the last try (a schema before migration 0033)
    _ack_v2_until = 0.0

    def batch_rows_ready(self) -> bool:
        """Whether batch rows may be written here: the login can call their ack's function
        (``ACK_FUNCTION``, migration 0033; the table came with 0030). Once found it stays
        found; until then it is looked for again every ``ROUTINE_RECHECK_SECONDS``, and
        code deployed before its migration writes a row per task meanwhile."""
        if self._batch_rows_ready:
            return True
        if time.monotonic() < self._batch_rows_due:
            return False
        found = self._fetch("routines_found", {"functions": [ACK_FUNCTION]}, scalar_row)
        self._batch_rows_ready = bool(found)
        self._batch_rows_due = time.monotonic() + ROUTINE_RECHECK_SECONDS
        return self._batch_rows_ready

    def insert_batch(self, queue: str, now: datetime, columns: BatchColumns, *,
                     conn: Conn | None = None) -> tuple[int, dict[str, int]]:
        """One batch row (``BatchColumns``), every member warm since ``now``, and the
        batch's keyed tasks as rows when it has some: (the batch's first seq, {id: seq} of
        the keyed rows inserted; a keyed task that met a live task's key is not)."""
        params = {"queue": queue, "now": now, **columns}
        if "keyed_ids" in columns:
            return first_and_keyed(self._fetch("insert_batch_keyed", params, tuple_row, conn))
        return first_and_keyed(self._fetch("insert_batch", params, tuple_row, conn))

    def move_out_of_batches(self, queue: str | None, ids: Sequence[str],
                            tenants: Sequence[str | None] | None, *,
                            conn: Conn | None = None) -> list[str]:
        """Make the members among ``ids`` (of ``queue``, each of its tenant in ``tenants``;
        None names any, for tierq's own callers) that are still in their batch rows rows of
        ``tierq_tasks``, warm since their batch was made, and record them as moved; the ids
        moved. On
        ``conn`` when given (in its transaction, or one of its own there), else in a
        transaction of its own."""
        params = _members(ids, tenants)
        if params is None:
            return []
        params["queue"] = queue

        def body(c: Conn) -> list[str]:
            self._fetch("lock_batches", {"batches": params["batches"]}, scalar_row, c)
            return [str(i) for i in self._fetch("move_out_of_batches", params, scalar_row, c)]

        if conn is not None:
            with transaction(conn):
                return body(conn)
        return self.db.run_transaction(body, what="a move out of batch rows")

    def end_batch_members(self, queue: str, ids: Sequence[str], tenants: Sequence[str],
                          attempts: Sequence[int], *, relaxed: bool = False,
                          conn: Conn | None = None) -> list[AckedRow] | None:
        """A plain ack of ``ids`` (each with its lease's tenant and attempt): the members
        still in their batch rows ended, the rows of the others and of any task not marked
        as a member deleted as ``ack_delete_by_attempt`` deletes them; (id, group) of those
        finished, each once. One statement (``ACK_FUNCTION``), autocommit on a pooled
        connection (``relaxed``: the pool whose commits do not wait for the WAL flush), or
        on ``conn``.

        An ack without a run of ``GROUP_MIN`` goes to ``ACK_FUNCTION_V2`` (it stays in
        the schema), which reads the same members alone for less than ``ACK_FUNCTION``'s
        group machinery costs.

        | the functions                  | batch rows         | result                     |
        | ------------------------------ | ------------------ | -------------------------- |
        | _v3 there (migration 0033)     | any                | the tasks finished         |
        | only _v2 (code first)          | any                | the same, by _v2 (the next |
        |                                |                    | minute's acks go to it)    |
        | neither (before 0031)          | none (or no table) | None: every id is a row's, |
        |                                |                    | for the caller to delete   |
        | not the one called, on         | some               | ``UndefinedFunction``      |
        | ``conn``; neither              |                    |                            |
        """
        if not ids:
            return []
        alone = conn is None and time.monotonic() < self._ack_v2_until
        params, numbered = _grouped_acks(ids, tenants, attempts,
                                         ALL_ALONE if alone else GROUP_MIN)
        params["queue"] = queue
        if params["groups"]:
            try:
                return _finished(self._fetch("end_batch_members", params, tuple_row, conn,
                                             relaxed=relaxed), numbered)
            except psycopg.errors.UndefinedFunction as exc:
                if conn is not None or not _missing(exc, ACK_FUNCTION):
                    raise
                # (looked for again after a while, as batch_rows_ready looks for it)
                self._ack_v2_until = time.monotonic() + ROUTINE_RECHECK_SECONDS
                params, numbered = _grouped_acks(ids, tenants, attempts, ALL_ALONE)
                params["queue"] = queue
        if params["groups"]:  # (never: ALL_ALONE, or no run was long)
            raise RuntimeError("an ack for the function before migration 0033 has a group")
        del params["groups"], params["places"]
        try:
            answer = self._fetch("end_batch_members_v2", params, tuple_row, conn,
                                 relaxed=relaxed)
        except psycopg.errors.UndefinedFunction as exc:
            if conn is not None or not _missing(exc, ACK_FUNCTION_V2) \
                    or self._any_batch_row():
                raise
            return None
        return _finished(answer, numbered)

    def _any_batch_row(self) -> bool:
        """``has_batch_rows``, False where migration 0030 has not run (no table)."""
        try:
            return self.has_batch_rows()
        except psycopg.errors.UndefinedTable:
            return False

    def batch_members(self, ids: Sequence[str], tenants: Sequence[str] | None, *,
                      conn: Conn | None = None) -> list[BatchMemberRow]:
        """The members among ``ids`` whose batch rows are still there, as those hold them,
        of the ``tenants`` named (None: of any tenant, an admin's read), in no order."""
        params = _members(ids)
        if params is None:
            return []
        if tenants is not None and not tenants:
            return []
        params["tenants"] = text_array(list(tenants or ()))
        return self._fetch("batch_members", params, positional(BatchMemberRow), conn)

    def members_acked(self, ids: Sequence[str], tenant: str) -> set[str]:
        """The members among ``ids``, of ``tenant``, that a plain ack ended; none where
        migration 0030 has not run (no table, so no member: an id marked by chance)."""
        try:
            members = self.batch_members(ids, [tenant])
        except psycopg.errors.UndefinedTable:
            return set()
        return {m.id for m in members if m.ended == "acked"}

    def has_batch_rows(self) -> bool:
        """Whether any batch row is left (one index entry read at most)."""
        [found] = self._fetch("has_batch_rows", None, scalar_row)
        return bool(found)

    def unended_batch_members(self, after: str, limit: int) -> list[tuple[str, list[int]]]:
        """Of the first ``limit`` batch rows after key ``after``, in key order, each as
        (key, the places of every tenant's members without an end; empty when none)."""
        rows = self._fetch("unended_batch_members", {"after": after, "limit": limit},
                           tuple_row)
        return [(str(key), list(places)) for key, places in rows]

    def batch_suspects(self, queue: str, tenant: str, before: datetime, after: str,
                       limit: int, members: int) -> tuple[list[tuple[str, list[int]]], bool]:
        """The pair's members old enough that Valkey should know them, for the reconciler:
        of its batch rows made before ``before`` and after key ``after``, the first
        ``limit`` (in key order) as far as about ``members`` places, each as (key, the
        places of the tenant's members without an end; empty when none); and whether
        batch rows may follow them."""
        rows = self._fetch("batch_suspects", {
            "queue": queue, "tenant": tenant, "after": after, "before": before,
            "limit": limit, "members": members}, tuple_row)
        looked = rows[0][2] if rows else 0
        more = looked >= limit or len(rows) < looked
        return [(str(key), list(places)) for key, places, _ in rows], more

    def sweep_batches(self, after: str, budget: int) -> tuple[str | None, BatchSweepRow]:
        """One pass of the sweep, in one transaction: of the ``budget`` batches after key
        ``after`` whose locks are free, those whose every member has ended are deleted with
        their ends; once none is left after ``after``, the ends a purge left behind. (The
        last key looked at, None when no batch was left after ``after``; what went.) A row
        another writer holds (a purge of the queue) fails it after ``SWEEP_LOCK_TIMEOUT``
        (``DatabaseTimedOut``), so it never holds up the reaper's pass for long."""
        def body(c: Conn) -> tuple[str | None, BatchSweepRow]:
            self._fetch("local_lock_timeout", {"timeout": SWEEP_LOCK_TIMEOUT}, scalar_row, c)
            seen = self._fetch("lock_free_batches", {"after": after, "budget": budget},
                               tuple_row, c)
            if not seen:  # (the end of the keys: the ends a purge left behind)
                self._execute("delete_orphan_ends", None, c)
                return None, BatchSweepRow(0, 0)
            locked = [str(key) for key, free in seen if free]
            gone = BatchSweepRow(0, 0)
            if locked:
                [gone] = self._fetch("delete_ended_batches", {"batches": uuid_array(locked)},
                                     positional(BatchSweepRow), c)
            return str(seen[-1][0]), gone

        return self.db.run_transaction(body, what="a pass of the batch sweep")
