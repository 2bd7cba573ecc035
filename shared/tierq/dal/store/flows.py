"""Statements of flows, tasks that wait for other tasks (``sql/queries/flows.sql``,
migration 0018; ``tierq.logic.flows`` runs them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from uuid import UUID

import orjson
from psycopg.rows import scalar_row, tuple_row

from tierq.dal.postgres import uuid_array
from tierq.dal.store.base import Conn, positional
from tierq.dal.store.batches import BatchQueries
from tierq.dal.store.rows import HeldParentRow, ReleasedRow, SettledRow, WaitEdgeRow


class FlowQueries(BatchQueries):
    def flow_plans(self, conn: Conn) -> str:
        """Scans by key in ``conn``'s transaction until :meth:`plans_back` (see the
        query); the setting before."""
        return str(self._fetch("flow_plans", None, scalar_row, conn)[0])

    def plans_back(self, conn: Conn, before: str) -> None:
        """The setting :meth:`flow_plans` found, back in ``conn``'s transaction."""
        self._fetch("plans_back", {"before": before}, scalar_row, conn)

    def hold_parents(self, conn: Conn, parents: Sequence[str],
                     tenants: Sequence[str]) -> list[HeldParentRow]:
        """Count and lock the parents named (one entry per edge, with its child's tenant);
        the rows found (another tenant's task is not). A parent in its batch row is moved
        out first: a child's wait is counted on its parent's row."""
        self.move_out_of_batches(None, parents, tenants, conn=conn)
        return self._fetch("hold_parents", {"parents": uuid_array(parents),
                                            "tenants": list(tenants)},
                           positional(HeldParentRow), conn)

    def insert_edges(self, conn: Conn, parents: Sequence[str], children: Sequence[str],
                     queues: Sequence[str], positions: Sequence[int],
                     states: Sequence[str | None]) -> None:
        """The edges parent -> child (a parent's state when it is finished already)."""
        self._execute("insert_edges", {
            "parents": uuid_array(parents), "children": uuid_array(children),
            "queues": list(queues), "positions": list(positions), "states": list(states)},
            conn)

    def insert_waits(self, conn: Conn, children: Sequence[str], pending: Sequence[int],
                     on_failure: Sequence[str], wait_untils: Sequence[datetime | None],
                     failed: Sequence[str | None]) -> None:
        """Each new waiting task's count of parents not finished, and its rules."""
        self._execute("insert_waits", {
            "children": uuid_array(children), "pending": list(pending),
            "on_failure": list(on_failure), "wait_untils": list(wait_untils),
            "failed": list(failed)}, conn)

    def settle_parents(self, conn: Conn, ids: Sequence[str], states: Sequence[str],
                       limit: int) -> list[SettledRow]:
        """Settle at most ``limit`` edges of these finished parents; the children touched."""
        return self._fetch("settle_parents", {"ids": uuid_array(ids), "states": list(states),
                                              "limit": limit}, positional(SettledRow), conn)

    def release_waiting(self, conn: Conn, ids: Sequence[str], outcomes: Sequence[str],
                        errors: Sequence[str | None], now: datetime, max_result_bytes: int,
                        settled: Mapping[str, str]) -> list[ReleasedRow]:
        """Waiting tasks leave the wait, each by its outcome (``settled``: the final state of
        each parent settled just before, by id); the rows that did."""
        return self._fetch("release_waiting", {
            "ids": uuid_array(ids), "outcomes": list(outcomes), "errors": list(errors),
            "now": now, "max_result_bytes": max_result_bytes,
            "settled": orjson.dumps(settled).decode()}, positional(ReleasedRow), conn)

    def forget_waits(self, conn: Conn, ids: Sequence[str]) -> list[str]:
        """Drop the waits of tasks whose wait ends unreleased; the ids that had one."""
        return [str(i) for i in self._fetch("forget_waits", {"ids": uuid_array(ids)},
                                            scalar_row, conn)]

    def rearm_children(self, conn: Conn, ids: Sequence[str], now: datetime) -> list[str]:
        """Parents replayed: their failed edges open again; the children waiting again."""
        return [str(i) for i in self._fetch("rearm_children", {"ids": uuid_array(ids),
                                                               "now": now}, scalar_row, conn)]

    def expired_waits(self, conn: Conn, now: datetime, limit: int) -> list[str]:
        """Waiting tasks past their deadline, locked (skipping locked ones)."""
        return [str(i) for i in self._fetch("expired_waits", {"now": now, "limit": limit},
                                            scalar_row, conn)]

    def waits_of_tasks(self, queue: str, ids: Sequence[str],
                       tenant: str | None = None) -> list[WaitEdgeRow]:
        """The parents of these tasks of ``queue`` (and of ``tenant``, when given), in
        their ``after`` order."""
        return self._fetch("waits_of_tasks", {"queue": queue, "ids": uuid_array(ids),
                                              "tenant": tenant}, positional(WaitEdgeRow))

    def ack_keep_waited(self, conn: Conn, queue: str, now: datetime, ids: Sequence[str],
                        tenants: Sequence[str], results: Sequence[str | None],
                        attempts: Sequence[int]) -> list[str]:
        """Acked tasks that others wait on, kept done (with their result, or none), each
        when it is of the tenant given with it (batch members moved out first)."""
        self.move_out_of_batches(queue, ids, tenants, conn=conn)
        return self._fetch("ack_keep_waited", {
            "queue": queue, "now": now, "ids": uuid_array(ids), "tenants": list(tenants),
            "results": list(results), "attempts": list(attempts)}, scalar_row, conn)

    def waits_of_deleted(self, conn: Conn, limit: int) -> list[str]:
        """Tasks deleted while they had a wait (at most ``limit``)."""
        return [str(i) for i in self._fetch("waits_of_deleted", {"limit": limit},
                                            scalar_row, conn)]

    def waits_with_free_parents(self, conn: Conn, ids: Sequence[str]) -> list[str]:
        """Of these children (deleted tasks' waits), those whose parents no other
        transaction holds, their parents locked in ``conn``'s transaction (in id order,
        never waiting: ``lock_free_parents``); a parent with no row left holds nothing."""
        if not ids:
            return []
        edges = self._fetch("parents_of_waits", {"ids": uuid_array(ids)}, tuple_row, conn)
        parents = sorted({str(parent) for _, parent in edges})
        held: set[str] = set()
        if parents:
            locked = set(self._fetch("lock_free_parents", {"ids": uuid_array(parents)},
                                     scalar_row, conn))
            held = set(self._fetch("tasks_found", {"ids": uuid_array(parents)}, scalar_row,
                                   conn)) - locked
        blocked = {str(child) for child, parent in edges if str(parent) in held}
        return [i for i in ids if i not in blocked]

    def unsettled_parents_of_queue(self, conn: Conn, queue: str, limit: int) -> list[str]:
        """Purged parents of ``queue`` whose edges are not settled yet (at most ``limit``)."""
        return [str(i) for i in self._fetch("unsettled_parents_of_queue",
                                            {"queue": queue, "limit": limit}, scalar_row,
                                            conn)]

    def parents_of_task(self, queue: str, task_id: UUID,
                        tenant: str | None = None) -> str | None:
        """The parents a released task's claims hand out (JSON text), or None; None too
        for a task not of ``queue``, or not ``tenant``'s when it is given."""
        rows = self._fetch("task_parents", {"queue": queue, "id": task_id, "tenant": tenant},
                           scalar_row)
        return rows[0] if rows else None
