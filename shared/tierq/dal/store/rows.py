"""The rows the store returns: one NamedTuple per shape of result, its fields the
statement's columns in order (``positional`` checks them once per statement; the
statements name their columns, so a column a migration adds changes none of these).
tests/integration/test_store_columns.py describes each statement against the migrated
schema.

The annotations are evaluated at import, not kept as strings (no ``from __future__ import
annotations``): ``NamedTuple`` compiles each string annotation, a third of what defining
these classes costs a function's cold start."""

from datetime import datetime
from typing import Literal, NamedTuple
from uuid import UUID

Pair = tuple[str, str]  # (queue, tenant)
StoredState = Literal["waiting", "held", "delayed", "cold", "warm", "dead",
                      "done", "cancelled"]  # tierq_tasks.state
LiveState = Literal["delayed", "cold", "warm"]  # a task still to run (its key is taken)
# a task still to run that holds its key: a live one, or one held in its group
KeyedState = Literal["held", "delayed", "cold", "warm"]


class DueRow(NamedTuple):
    """A delayed task now due (the delayed mover's batch)."""

    id: UUID
    queue: str
    tenant: str


class ReadyRow(NamedTuple):
    """A task made ready or given back, with what the warm tier keeps of it."""

    id: UUID
    queue: str
    tenant: str
    key: str | None
    state: StoredState
    seq: int
    priority: int
    payload: str  # JSON text
    attempts: int
    max_attempts: int
    created_at: datetime
    parents: str | None  # JSON text: a released task's parents (logic/flows.py)
    grp: str | None  # its group (logic/groups.py)
    timeout_seconds: int | None  # its time limit (logic/time_limits.py)
    trace: str | None  # JSON text: its trace context (models/traces.py)


class ReplacedRow(NamedTuple):
    """A live task updated in place (on_conflict = replace)."""

    id: UUID
    tenant: str
    key: str | None
    state: KeyedState
    seq: int
    priority: int
    payload: str
    attempts: int
    max_attempts: int
    created_at: datetime
    run_at: datetime
    grp: str | None  # its group (logic/groups.py)
    timeout_seconds: int | None  # its time limit (logic/time_limits.py)
    trace: str | None  # JSON text: its trace context (models/traces.py)


class RestoreRow(NamedTuple):
    """A warm row the reconciler pushes again."""

    id: UUID
    key: str | None
    seq: int
    priority: int
    payload: str
    attempts: int
    max_attempts: int
    created_at: datetime
    parents: str | None  # JSON text: a released task's parents (logic/flows.py)
    grp: str | None  # its group (logic/groups.py)
    timeout_seconds: int | None  # its time limit (logic/time_limits.py)
    trace: str | None  # JSON text: its trace context (models/traces.py)


class LiveKeyRow(NamedTuple):
    """The live task holding a (tenant, key)."""

    id: UUID
    tenant: str
    key: str
    state: KeyedState


class OutcomeRow(NamedTuple):
    """A failed attempt recorded: the task is delayed (a retry) or dead."""

    id: UUID
    tenant: str
    state: Literal["delayed", "dead"]
    run_at: datetime
    grp: str | None  # its group (logic/groups.py)


class SeqPosition(NamedTuple):
    """Where tierq_task_seq stands: the last value it handed out (0 before the first) and
    the last it can."""

    last_value: int
    max_value: int


class PromotedRow(NamedTuple):
    """A cold task marked warm, ready to push: its id, priority and seq (its place in the
    ready set: core/ordering.py) and blob."""

    id: str
    priority: int
    seq: int
    blob: str


class DeadKeyRow(NamedTuple):
    """A dead letter locked for a replay."""

    id: UUID
    tenant: str
    key: str | None


class TaskRow(NamedTuple):
    """A whole ``tierq_tasks`` row."""

    id: UUID
    queue: str
    tenant: str
    key: str | None
    priority: int
    payload: str
    state: StoredState
    run_at: datetime
    run_at_initially: datetime
    attempts: int
    max_attempts: int
    seq: int
    created_at: datetime
    ready_since: datetime | None
    state_since: datetime
    finished_at: datetime | None
    last_error: str | None
    result: str | None
    grp: str | None  # its group (logic/groups.py)
    progress: str | None  # its last attempt's progress (JSON text), if any
    progress_at: datetime | None  # when that progress came
    trace: str | None  # JSON text: its trace context (models/traces.py)
    timeout_seconds: int | None  # its time limit (logic/time_limits.py)


class QueueSettingsRow(NamedTuple):
    """A whole ``tierq_queues`` row: NULL means the deployment's default."""

    queue: str
    warm_max: int | None
    lease_seconds: int | None
    max_attempts: int | None
    backoff_kind: str | None
    backoff_base_seconds: float | None
    backoff_cap_seconds: float | None
    backoff_jitter: float | None
    retention_seconds: int | None
    paused: bool
    created_at: datetime
    updated_at: datetime
    warm_max_bytes: int | None
    max_leased: int | None
    rate_per_second: float | None
    rate_burst: int | None
    tenant_max_leased: int | None
    tenant_rate_per_second: float | None
    tenant_rate_burst: int | None
    consumer: str | None  # the jsonb object as its text
    group_max_leased: int | None
    timeout_seconds: int | None  # the queue's time limit of an attempt (migration 0021)


class ClaimedTaskRow(NamedTuple):
    """What a replayed claim rebuilds a task from."""

    id: str
    tenant: str
    key: str | None
    priority: int
    payload: str
    max_attempts: int
    state: str
    parents: str | None  # JSON text: a released task's parents (logic/flows.py)
    grp: str | None  # its group (logic/groups.py)
    timeout_seconds: int | None  # its time limit (logic/time_limits.py)
    trace: str | None  # JSON text: its trace context (models/traces.py)


class MarkedPair(NamedTuple):
    """A pair of the mover's walk; ``marked``: recorded in cold mode."""

    queue: str
    tenant: str
    marked: bool


class CursorRow(NamedTuple):
    walk: str
    queue: str
    tenant: str


class ForgetRow(NamedTuple):
    """A forgotten pair (``forgotten``), or the slice's last pair with the rows it read."""

    queue: str
    tenant: str
    forgotten: bool
    slice_rows: int | None


class PairStateCounts(NamedTuple):
    queue: str
    tenant: str
    waiting: int
    held: int
    cold: int
    delayed: int
    dead: int
    groups: int  # groups with work (tierq_groups)
    oldest_head: datetime | None  # the earliest head_since of those groups


class PairOldestReady(NamedTuple):
    queue: str
    tenant: str
    oldest: datetime | None


class StateTotals(NamedTuple):
    """A queue's waiting, held, cold, delayed and dead tasks (every tenant)."""

    waiting: int
    held: int
    cold: int
    delayed: int
    dead: int


class ReadyTenant(NamedTuple):
    """A tenant of a queue with ready work, and whether it has cold rows."""

    tenant: str
    cold: bool


class IdempotencyRecord(NamedTuple):
    fingerprint: bytes
    done: bool
    status: int | None
    response: str | None
    lease_until: datetime
    expires_at: datetime


class ClaimedKey(NamedTuple):
    """An Idempotency-Key taken: what an earlier owner had committed under it, if any."""

    response: str | None


class ScheduleRow(NamedTuple):
    """A whole ``tierq_schedules`` row."""

    name: str
    queue: str
    tenant: str
    payload: str
    priority: int
    cron: str | None
    every_ms: int | None
    daily_times: list[str] | None
    timezone: str
    horizon: int
    enabled: bool
    config_hash: str
    installed_hash: str | None
    installed_through_ms: int | None
    last_tick_at: datetime | None
    created_at: datetime
    updated_at: datetime


class ScheduleDue(NamedTuple):
    """A schedule (or a removed schedule's remnant) the tick has work for, and since when."""

    tick_at_ms: int
    tenant: str
    name: str
    queue: str | None  # None: a remnant
    enabled: bool


class PendingOccurrence(NamedTuple):
    """An occurrence's task never claimed, locked for withdrawal."""

    id: UUID
    queue: str
    tenant: str
    state: LiveState
    priority: int
    seq: int  # (with the priority, its place in a ready set: core/ordering.py)


class LiveOccurrence(NamedTuple):
    """An installed occurrence of a schedule whose task is live; ``total``: how many the
    schedule has."""

    schedule_tenant: str
    schedule: str
    config_hash: str
    fire_at_ms: int
    task_id: UUID
    key: str  # an occurrence's task always has its key
    state: LiveState
    attempts: int
    queue: str
    tenant: str
    total: int


class FeedOffsetRow(NamedTuple):
    source: str
    part: str
    rows_done: int
    last_value: str | None


class BacklogCounts(NamedTuple):
    """A queue's cold and delayed rows, each counted up to a cap."""

    cold: int
    delayed: int


class HomeRow(NamedTuple):
    """A pair's home shard (a page of the homes, copied into a new shard) and the shard it
    is moving to, if it is."""

    queue: str
    tenant: str
    shard: str
    moving_to: str | None = None


class HomeState(NamedTuple):
    """A pair's home as one shard records it: the home, and the shard it is moving to
    (None: not moving; the home itself: moved, not yet open for new work)."""

    shard: str
    moving_to: str | None


class PairLeftRow(NamedTuple):
    """What of a pair a shard still holds that a move waits for."""

    delayed: int
    cold: int
    warm: int
    dead: int
    schedules: int
    delayed_until: datetime | None = None  # the last delayed task's run_at

    @property
    def total(self) -> int:
        return self.delayed + self.cold + self.warm + self.dead + self.schedules


class ShardIdentityRow(NamedTuple):
    """Which shard a database is, and since when its copy of the homes is complete."""

    name: str
    homes_complete: datetime | None


class HeldParentRow(NamedTuple):
    """A parent named by waiting tasks, counted and locked (flows: hold_parents)."""

    id: UUID
    tenant: str
    queue: str
    state: StoredState
    waiters: int


class SettledRow(NamedTuple):
    """A waiting task whose parents were settled (flows: settle_parents): its count of
    parents left, its rule, a failed parent and that parent's state (when settled here),
    and how many of its edges were settled."""

    child: UUID
    pending: int
    on_parent_failure: Literal["dead", "run"]
    failed_parent: UUID | None
    failed_state: str | None
    settled: int


class ReleasedRow(NamedTuple):
    """A task that left its wait (flows: release_waiting): delayed (to be made ready when
    its run_at has come) or dead."""

    id: UUID
    queue: str
    tenant: str
    state: Literal["delayed", "dead"]
    run_at: datetime
    outcome: Literal["ready", "dead", "timeout"]


class WaitEdgeRow(NamedTuple):
    """One parent of a waiting task, and its state so far (None: not finished)."""

    child: UUID
    parent: UUID
    parent_queue: str
    parent_state: str | None


class AckedRow(NamedTuple):
    """A task an ack finished: its id and group (None: none)."""

    id: str
    grp: str | None


class GroupCountRow(NamedTuple):
    """A group locked (lock_groups): its count of active tasks as the lock found it."""

    tenant: str
    grp: str
    active: int


class GroupReleasedRow(NamedTuple):
    """A held task a release made active: ready (warm or cold) or delayed until its
    run_at; with its blob for the warm tier, built in SQL (as promote_cold's)."""

    id: str
    tenant: str
    state: StoredState
    seq: int
    priority: int
    run_at: datetime
    blob: str  # logic/admission.task_blob's layout


class GroupedTaskRow(NamedTuple):
    """A task of a group: its id, tenant and group."""

    id: str
    tenant: str
    grp: str


class HeldGroupRow(NamedTuple):
    """A group with held tasks (the reaper's sweep): whether nothing of it is active."""

    queue: str
    tenant: str
    grp: str
    stalled: bool
