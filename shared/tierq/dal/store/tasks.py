"""Task rows and their transitions (``sql/queries/engine.sql``, first part): enqueue, the
delayed mover, admission, acks and failed attempts, promotion, reconciliation, retention,
one task, dead letters."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict, cast
from uuid import UUID

from psycopg.rows import scalar_row, tuple_row

from tierq.core.batch_ids import batch_of
from tierq.dal.postgres import int_array, text_array, uuid_array
from tierq.dal.store.base import Conn, first_and_keyed, positional
from tierq.dal.store.batches import BatchQueries
from tierq.dal.store.rows import (
    AckedRow,
    DeadKeyRow,
    DueRow,
    LiveKeyRow,
    OutcomeRow,
    Pair,
    PromotedRow,
    ReadyRow,
    ReplacedRow,
    RestoreRow,
    SeqPosition,
    TaskRow,
)

NEVER = datetime.min.replace(tzinfo=UTC)  # before every state_since


class TaskColumns(TypedDict):
    """A batch of new tasks, one array literal (or JSON array) per column, in batch order
    (``tierq.logic.enqueue.row_columns``)."""

    ids: str
    tenants: str
    priorities: str
    payloads: str
    states: str
    run_ats: str
    max_attempts: str
    grps: str  # a JSON array: each task's group, or null
    traces: str  # a JSON array: each task's trace context's JSON text, or null ([]: none)
    timeouts: str  # an int array: each task's time limit, or NULL ({}: none has one)
    keys: NotRequired[str]


class UniformColumns(TypedDict):
    """A batch of new tasks that share every column but their id, tenant, priority, payload
    and key: those as in ``TaskColumns`` (``keys`` only for a batch with some), the rest one
    value each (``tierq.logic.enqueue.uniform_columns``)."""

    ids: str
    tenants: str
    priorities: str
    payloads: str
    state: str
    run_at: float
    max_attempts: int
    timeout: int | None
    keys: NotRequired[str]  # a JSON array: each task's key, or null (some have one)


class TaskQueries(BatchQueries):
    # -- enqueue --------------------------------------------------------------------------

    def insert_tasks(self, queue: str, now: datetime, columns: TaskColumns, *,
                     conn: Conn | None = None) -> dict[str, int]:
        """Insert a batch with keys; {id: seq} of the rows inserted (the others met a live
        task's key)."""
        rows = self._fetch("insert_tasks", {"queue": queue, "now": now, **columns}, tuple_row,
                           conn)
        return dict(rows)

    def insert_tasks_keyless(self, queue: str, now: datetime, columns: TaskColumns, *,
                             conn: Conn | None = None) -> tuple[int, int]:
        """Insert a batch without keys; (seq of its first row, rows inserted)."""
        [(first, count)] = self._fetch(
            "insert_tasks_keyless", {"queue": queue, "now": now, **columns},
            tuple_row, conn)
        return first, count

    def insert_tasks_uniform(self, queue: str, now: datetime, columns: UniformColumns, *,
                             conn: Conn | None = None) -> tuple[int, int]:
        """``insert_tasks_keyless`` for a uniform batch (``UniformColumns``)."""
        [(first, count)] = self._fetch(
            "insert_tasks_uniform", {"queue": queue, "now": now, **columns},
            tuple_row, conn)
        return first, count

    def insert_tasks_uniform_keyed(self, queue: str, now: datetime, columns: UniformColumns,
                                   *, conn: Conn | None = None) -> tuple[int, dict[str, int]]:
        """``insert_tasks`` for a uniform batch with keys: (seq of its first row, {id: seq}
        of the keyed rows inserted); every row without a key is inserted."""
        return first_and_keyed(self._fetch("insert_tasks_uniform_keyed",
                                           {"queue": queue, "now": now, **columns},
                                           tuple_row, conn))

    def task_seq_position(self) -> SeqPosition:
        """How far tierq_task_seq has come (places in line: core/ordering.py)."""
        [position] = self._fetch("task_seq_position", None, positional(SeqPosition))
        return position

    def live_by_keys(self, queue: str, tenants: Sequence[str],
                     keys: Sequence[str | None]) -> list[LiveKeyRow]:
        return self._fetch("live_by_keys", {"queue": queue, "tenants": tenants, "keys": keys},
                           positional(LiveKeyRow))

    def replace_tasks(self, now: datetime, ids: Sequence[str], payloads: Sequence[str],
                      priorities: Sequence[int], run_ats: Sequence[datetime | None],
                      max_attempts: Sequence[int],
                      timeouts: Sequence[int | None]) -> list[ReplacedRow]:
        """Update live tasks in place; the rows that changed."""
        return self._fetch("replace_tasks", {
            "now": now, "ids": ids, "payloads": payloads, "priorities": priorities,
            "run_ats": run_ats, "max_attempts": max_attempts, "timeouts": list(timeouts)},
            positional(ReplacedRow))

    # -- admission ------------------------------------------------------------------------

    def mark_cold(self, ids: Iterable[str], now: datetime, *, conn: Conn | None = None) -> None:
        """Warm rows the warm tier refused go (back) to the cold line, keeping their seq
        (batch members moved out first)."""
        ids = list(ids)
        self.move_out_of_batches(None, ids, None, conn=conn)
        self._execute("mark_cold", {"ids": uuid_array(ids), "now": now}, conn)

    def make_ready(self, conn: Conn, ids: Iterable[str], states: Sequence[str],
                   from_states: Sequence[str], now: datetime) -> list[ReadyRow]:
        """Tasks in ``from_states`` become ready in ``states`` (warm or cold), each with a
        new seq in the order given."""
        return self._fetch("make_ready", {
            "ids": uuid_array(ids), "states": states, "from_states": from_states, "now": now,
        }, positional(ReadyRow), conn)

    def pairs_come_due(self, conn: Conn, after: tuple[datetime, int], now: datetime,
                       rows: int) -> tuple[list[Pair], tuple[datetime, int] | None, bool]:
        """The pairs of the first ``rows`` delayed rows due after ``after`` (a row's
        (run_at, seq)) up to ``now``; the last of those rows (None: none due); whether
        there were ``rows`` of them (more may be due)."""
        found = cast(list[tuple[str, str, datetime, int, int]], self._fetch(
            "pairs_come_due", {"after_run_at": after[0], "after_seq": after[1], "now": now,
                               "rows": rows}, tuple_row, conn))
        if not found:
            return [], None, False
        _, _, run_at, seq, looked = found[0]
        return [(q, t) for q, t, _, _, _ in found], (run_at, seq), looked >= rows

    def lock_due_of_pairs(self, conn: Conn, now: datetime,
                          shares: Sequence[tuple[Pair, int, DueRow | None]]) -> list[DueRow]:
        """The delayed mover's rows of a batch (locked, skipping locked rows): for each
        (pair, n, last) of ``shares``, up to n of the pair's due rows after ``last`` (the
        last row of it the batch took, or None), oldest due first."""
        return self._fetch("lock_due_of_pairs", {
            "now": now, "queues": [p[0] for p, _, _ in shares],
            "tenants": [p[1] for p, _, _ in shares], "limits": [n for _, n, _ in shares],
            "after_run_ats": [r.run_at if r else None for _, _, r in shares],
            "after_seqs": [r.seq if r else None for _, _, r in shares]},
            positional(DueRow), conn)

    # -- leases ---------------------------------------------------------------------------

    # (Each statement here settles a row only when it is of the tenant given with it: its
    # lease's, whatever the caller checked before.)

    def ack_delete(self, queue: str, ids: Iterable[str], tenants: Sequence[str], attempt: int,
                   *, relaxed: bool = False) -> list[AckedRow]:
        """Delete acked tasks whose leases all are of ``attempt`` and of one tenant (each
        of ``tenants``, checked as a set); the rows deleted."""
        return self._fetch("ack_delete", {"queue": queue, "ids": uuid_array(ids),
                                          "tenant_set": text_array(sorted(set(tenants))),
                                          "attempt": attempt}, positional(AckedRow),
                           relaxed=relaxed)

    def ack_delete_by_attempt(self, queue: str, ids: Iterable[str], tenants: Sequence[str],
                              attempts: Sequence[int], *,
                              relaxed: bool = False) -> list[AckedRow]:
        """``ack_delete`` with a tenant and an attempt per task."""
        return self._fetch("ack_delete_by_attempt", {
            "queue": queue, "ids": uuid_array(ids), "tenants": text_array(tenants),
            "attempts": int_array(attempts)}, positional(AckedRow), relaxed=relaxed)

    def ack_keep(self, queue: str, now: datetime, ids: Iterable[str], tenants: Sequence[str],
                 results: Sequence[str], attempts: Sequence[int], *,
                 relaxed: bool = False) -> list[AckedRow]:
        """Acked tasks kept done with their results (JSON text); the rows kept (batch
        members moved out first)."""
        ids = list(ids)
        self.move_out_of_batches(queue, ids, tenants)
        return self._fetch("ack_keep", {
            "queue": queue, "now": now, "ids": uuid_array(ids), "tenants": text_array(tenants),
            "results": results, "attempts": int_array(attempts)}, positional(AckedRow),
            relaxed=relaxed)

    def write_progress(self, queue: str, ids: Sequence[str], tenants: Sequence[str],
                       attempts: Sequence[int], progress: Sequence[str],
                       progress_at: Sequence[datetime]) -> int:
        """Write the last progress (JSON text) of leases whose attempt ends to their rows,
        those still leased for that attempt (batch members moved out first); how many
        were."""
        self.move_out_of_batches(queue, ids, tenants)
        return self._execute("write_progress", {
            "queue": queue, "ids": uuid_array(ids), "tenants": list(tenants),
            "attempts": list(attempts), "progress": list(progress),
            "progress_at": list(progress_at)})

    def lease_outcomes(self, queue: str, now: datetime, ids: Iterable[str],
                       tenants: Sequence[str], attempts: Sequence[int], errors: Sequence[str],
                       retry_ats: Sequence[datetime], deads: Sequence[bool], *,
                       waited: bool = False, conn: Conn | None = None) -> list[OutcomeRow]:
        """Record failed attempts: each task delayed until its retry, or dead. Tasks that
        others wait on are left out unless ``waited`` (logic/flows.py settles them in the
        same transaction). Batch members are moved out first."""
        ids = list(ids)
        self.move_out_of_batches(queue, ids, tenants, conn=conn)
        return self._fetch("lease_outcomes", {
            "queue": queue, "now": now, "ids": uuid_array(ids), "tenants": list(tenants),
            "attempts": attempts, "errors": errors, "retry_ats": retry_ats, "deads": deads,
            "waited": waited}, positional(OutcomeRow), conn)

    def release_leased(self, queue: str, now: datetime, ids: Iterable[str],
                       tenants: Sequence[str], attempts: Sequence[int]) -> list[ReadyRow]:
        """Leased tasks given back return to line in their old place (batch members moved
        out first)."""
        ids = list(ids)
        self.move_out_of_batches(queue, ids, tenants)
        return self._fetch("release_leased", {
            "queue": queue, "now": now, "ids": uuid_array(ids), "tenants": list(tenants),
            "attempts": attempts}, positional(ReadyRow))

    # -- cold -> warm ---------------------------------------------------------------------

    def try_pair_lock(self, conn: Conn, queue: str, tenant: str) -> bool:
        """Take the pair's promotion lock (a session lock on ``conn``) if free."""
        [locked] = self._fetch("try_pair_lock", {"queue": queue, "tenant": tenant},
                               scalar_row, conn)
        return bool(locked)

    def release_pair_lock(self, conn: Conn, queue: str, tenant: str) -> None:
        self._fetch("release_pair_lock", {"queue": queue, "tenant": tenant}, scalar_row, conn)

    def local_lock_timeout(self, conn: Conn, timeout: str) -> None:
        """The lock timeout of ``conn``'s open transaction (e.g. ``"200ms"``)."""
        self._fetch("local_lock_timeout", {"timeout": timeout}, scalar_row, conn)

    def promote_cold(self, conn: Conn, queue: str, tenant: str, limit: int,
                     now: datetime) -> list[PromotedRow]:
        """Mark the oldest ``limit`` cold rows of the pair warm; their push items."""
        return self._fetch("promote_cold", {"queue": queue, "tenant": tenant, "limit": limit,
                                            "now": now}, positional(PromotedRow), conn)

    def has_cold(self, queue: str, tenant: str) -> bool:
        [found] = self._fetch("has_cold", {"queue": queue, "tenant": tenant}, scalar_row)
        return bool(found)

    # -- reconciliation and retention -----------------------------------------------------

    def warm_suspects(self, queue: str, tenant: str, before: datetime, limit: int,
                      after: datetime = NEVER) -> list[tuple[UUID, datetime]]:
        """(id, state_since) of the warm rows older than ``before`` (Valkey should know
        them) of the next ``limit`` rows' state_since values after ``after``, in that
        order: ``limit`` rows, or more when the last state_since has more rows."""
        return self._fetch("warm_suspects", {"queue": queue, "tenant": tenant,
                                             "before": before, "limit": limit,
                                             "after": after}, tuple_row)

    def take_over_for_restore(self, ids: Sequence[str], before: datetime, now: datetime,
                              conn: Conn | None = None) -> list[RestoreRow]:
        """The rows of ``ids`` still warm and older than ``before`` (locked ones skipped),
        their state_since moved to ``now``: the reconciler's to push again."""
        return self._fetch("take_over_for_restore",
                           {"ids": uuid_array(ids), "before": before, "now": now},
                           positional(RestoreRow), conn)

    def purge_done_before(self, queue: str, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` done rows of the queue finished before ``before``."""
        return self._execute("purge_done_before",
                             {"queue": queue, "before": before, "limit": limit})

    def purge_cancelled_before(self, queue: str, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` cancelled rows of the queue cancelled before ``before``."""
        return self._execute("purge_cancelled_before",
                             {"queue": queue, "before": before, "limit": limit})

    def purge_dead_before(self, queue: str, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` dead rows of the queue finished before ``before``."""
        return self._execute("purge_dead_before",
                             {"queue": queue, "before": before, "limit": limit})

    # -- one task -------------------------------------------------------------------------

    def task_by_id(self, queue: str, task_id: UUID,
                   tenant: str | None = None) -> TaskRow | None:
        """The task's row, when it is ``tenant``'s (None: any tenant's); a member still in
        its batch row as the row it would have."""
        member = batch_of(task_id)
        rows = self._fetch("task_by_id", {
            "queue": queue, "id": task_id, "tenant": tenant,
            "batch": None if member is None else member[0],
            "place": None if member is None else member[1]}, positional(TaskRow))
        return rows[0] if rows else None

    def cancel_task(self, queue: str, task_id: UUID, tenant: str | None = None, *,
                    conn: Conn | None = None) -> TaskRow | None:
        """Delete the task whatever its state, when it is ``tenant``'s (None: any
        tenant's); the row deleted (a batch member moved out first)."""
        self.move_out_of_batches(queue, [str(task_id)], [tenant], conn=conn)
        rows = self._fetch("cancel_task", {"queue": queue, "id": task_id, "tenant": tenant},
                           positional(TaskRow), conn)
        return rows[0] if rows else None

    def cancel_mark(self, queue: str, task_id: UUID, tenant: str | None, now: datetime, *,
                    conn: Conn | None = None) -> TaskRow | None:
        """Mark the unfinished task cancelled (of ``tenant`` when given); the row with the
        state it had before, or None (not found, another tenant's, or finished). A batch
        member is moved out first."""
        self.move_out_of_batches(queue, [str(task_id)], [tenant], conn=conn)
        rows = self._fetch("cancel_mark", {"queue": queue, "id": task_id, "tenant": tenant,
                                           "now": now}, positional(TaskRow), conn)
        return rows[0] if rows else None

    def cancelled_progress(self, queue: str, task_id: UUID | str, attempt: int,
                           progress: str, progress_at: datetime) -> int:
        """Write the last progress (JSON text) of the lease of ``attempt`` a cancel ended to
        the cancelled task's row, unless it holds a later one; how many rows were."""
        return self._execute("cancelled_progress", {
            "queue": queue, "id": task_id, "attempt": attempt, "progress": progress,
            "progress_at": progress_at})

    def cancelled_among(self, queue: str, leases: Sequence[tuple[str, str]]) -> set[str]:
        """Which of these (id, tenant) tasks of the queue are cancelled: the ids of those
        that are, and are that tenant's."""
        if not leases:
            return set()
        return {r[0] for r in self._fetch("cancelled_among", {
            "queue": queue, "ids": [i for i, _ in leases],
            "tenants": [t for _, t in leases]}, tuple_row)}

    def purge_queue_tasks(self, queue: str) -> int:
        """Delete every task of the queue, its batch rows' too, in one transaction; how
        many. The batch rows go first, each once the move that holds it has committed,
        so the rows such a move made are deleted by the last statement."""
        def body(conn: Conn) -> int:
            batches = self._fetch("purge_queue_batches", {"queue": queue}, tuple_row, conn)
            members = sum(int(tasks) for _, tasks in batches)
            if batches:
                [ended] = self._fetch("purge_batch_ends",
                                      {"batches": uuid_array(k for k, _ in batches)},
                                      scalar_row, conn)
                members -= int(ended)
            return members + self._execute("purge_queue_tasks", {"queue": queue}, conn)

        return self.db.run_transaction(body, what="a purge of a queue")

    # -- dead letters ---------------------------------------------------------------------

    def dlq_page(self, queue: str, tenant: str | None, after: datetime | str, after_id: str,
                 limit: int) -> list[TaskRow]:
        """Dead letters (of ``tenant`` when given) before (after, after_id), newest first."""
        params: dict[str, Any] = {"queue": queue, "tenant": tenant, "limit": limit,
                                  "after": after, "after_id": after_id}
        if tenant is None:
            return self._fetch("dlq_page", params, positional(TaskRow))
        return self._fetch("dlq_page_of_tenant", params, positional(TaskRow))

    def lock_dead(self, conn: Conn, queue: str, tenant: str | None, all_dead: bool,
                  ids: Sequence[str], limit: int) -> list[DeadKeyRow]:
        """Dead rows to replay whose key no live task holds, locked, oldest first."""
        return self._fetch("lock_dead", {"queue": queue, "tenant": tenant, "all": all_dead,
                                          "ids": ids, "limit": limit},
                           positional(DeadKeyRow), conn)

    def reset_dead(self, conn: Conn, ids: Sequence[str], now: datetime) -> list[UUID]:
        """Reset locked dead rows to delayed, but those whose key a task holds now; the ids
        reset."""
        return self._fetch("reset_dead", {"ids": ids, "now": now}, scalar_row, conn)

    def purge_dead(self, queue: str, tenant: str | None, all_dead: bool, ids: Sequence[str],
                   limit: int) -> list[UUID]:
        """Delete up to ``limit`` dead rows; their ids."""
        return self._fetch("purge_dead", {"queue": queue, "tenant": tenant, "all": all_dead,
                                           "ids": ids, "limit": limit}, scalar_row)
