"""Enqueue: validate, one multi-row INSERT … ON CONFLICT per batch, then admission of the
ready tasks (warm tier or cold line). Outcome per task: created / updated / ignored."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

import orjson

from tierq.core.ids import uuid7_strings
from tierq.core.json_text import NUL_ESCAPE, has_nul
from tierq.core.lazy import lazy_module
from tierq.core.ordering import Place, place
from tierq.core.pointers import looks_like_pointer
from tierq.dal.shards import tag_ids
from tierq.dal.store.rows import LiveKeyRow
from tierq.dal.task_store import Conn, TaskColumns, UniformColumns
from tierq.dal.warm_tier import AdmittedSize
from tierq.errors import InvalidInput, PayloadTooLarge
from tierq.logic import admission, batch_rows, flows, groups, tiering
from tierq.logic.admission import PushItem, Target, plain_blob, task_blob
from tierq.logic.context import Context, Pair, to_datetime, to_ms
from tierq.logic.homes import require_here
from tierq.logic.tasks import gone_ttl_ms
from tierq.models.base import UUIDS, made
from tierq.models.names import DEFAULT_TENANT
from tierq.models.tasks import MAX_DELAY_SECONDS, EnqueueOutcome, TaskIn

if TYPE_CHECKING:
    from tierq.logic import payloads
else:  # (big payloads' checks and records: by the first task whose payload is a pointer)
    payloads = lazy_module("tierq.logic.payloads")

MAX_BATCH = 500
# insert_tasks numbers a batch's rows from one value of tierq_task_seq, which steps by 512
# (migration 0004): a batch must not be longer
SEQ_BLOCK = 512
assert MAX_BATCH <= SEQ_BLOCK
INSERT_RETRIES = 3

# Called in the transaction that inserts a round of tasks, with every task of the round by
# index: its outcome when created, None when not. A round run again (a deadlock's victim)
# reports all of its tasks again, so its last report replaces what an earlier run said.
RoundRecorder = Callable[[Conn, dict[int, dict[str, Any] | None]], None]


@dataclass(slots=True)
class Prepared:
    index: int
    id: str
    tenant: str
    key: str | None
    priority: int
    payload_json: bytes
    run_at_explicit: bool
    run_at_s: float
    max_attempts: int
    on_conflict: str
    ready: bool
    state: str = ""
    # a task that waits (`after`, logic/flows.py): its parents' ids (a list; none: empty),
    # its rules
    after: list[str] | tuple[()] = ()
    on_parent_failure: str = "dead"
    wait_until: float | None = None
    # how errors name it (``where``); None: ``tasks[<index>]``
    label: str | None = None
    # its group (logic/groups.py), or None
    group: str | None = None
    # its own time limit of an attempt (logic/time_limits.py), or None
    timeout_seconds: int | None = None
    # its trace context as stored (models/traces.py), or None
    trace: bytes | None = None
    # the big payload's object its payload points at (logic/payloads.py), or None
    object_key: str | None = None
    # its blob for the warm tier, made by ``_sizes`` for a task without a group (whose
    # blob needs no seq) so that ``_warm_items`` makes it once; None: not made
    blob: bytes | None = None

    @property
    def where(self) -> str:
        """How errors name the task: ``tasks[i]``, ``task`` alone, or as the caller said."""
        return f"tasks[{self.index}]" if self.label is None else self.label


def prepare(ctx: Context, queue: str, tasks: Sequence[TaskIn], now: float,
            default_tenant: str | None = None, *,
            fields: Sequence[str] | None = None) -> list[Prepared]:
    """Turn validated models into rows; raises (writing nothing) on what pydantic cannot see:
    payload size, schedules beyond a year, a waiting task's key or parents. ``fields``:
    how errors name each task (by default ``tasks[i]``, or ``task`` for one).

    One pass, the common task's work only: a payload is checked as a pointer only when it
    is a list whose first item names the pointer's class, and a task's name in errors is
    made only when one is raised."""
    n = len(tasks)
    if n > MAX_BATCH:
        raise InvalidInput.field("tasks", f"at most {MAX_BATCH} tasks per request, got {n}")
    max_attempts = ctx.queue_settings.get(queue).max_attempts
    limit = ctx.settings.max_payload_bytes
    tenant_default = default_tenant or DEFAULT_TENANT
    dumps = orjson.dumps
    out: list[Prepared] = []
    append = out.append
    ids = uuid7_strings(n)
    if ctx.id_tag is not None:  # a shard's ids tell it (dal/shards.py)
        ids = tag_ids(ids, ctx.id_tag)
    alone = "task" if n == 1 and fields is None else None

    pointers = False  # (whether a payload points at a big payload's object)
    for i, (task_id, task) in enumerate(zip(ids, tasks, strict=True)):
        fields_of = task.__dict__  # (a validated model's fields: read as a dict, faster)
        payload = fields_of["payload"]
        label = alone if fields is None else fields[i]
        try:
            payload_json = dumps(payload)
        except TypeError as exc:
            raise InvalidInput.field(f"{_named(i, label)}.payload",
                                     f"not JSON-serialisable: {exc}") from exc
        if NUL_ESCAPE in payload_json and has_nul(payload_json):
            raise InvalidInput.field(
                f"{_named(i, label)}.payload",
                "contains a NUL character (\\u0000), which cannot be stored")
        if len(payload_json) > limit:
            where = _named(i, label)
            raise PayloadTooLarge(
                f"{where}.payload is {len(payload_json)} bytes once serialised; "
                f"the limit is {limit}",
                details=[{"field": f"{where}.payload", "message": "too large"}],
            )
        tenant = fields_of["tenant"] or tenant_default
        # a pointer to a big payload (a JSON array, core/pointers.py): this deployment's
        # bucket, the task's tenant's prefix
        object_key = None
        if isinstance(payload, (list, tuple)) and looks_like_pointer(payload):
            object_key = payloads.check(ctx, _named(i, label), tenant, payload)
            pointers = True
        run_at_given, delay = fields_of["run_at"], fields_of["delay_seconds"]
        if run_at_given is not None:
            run_at = run_at_given.timestamp()
            if run_at - now > MAX_DELAY_SECONDS:
                raise InvalidInput.field(f"{_named(i, label)}.run_at",
                                         "must be within a year from now")
        elif delay:
            run_at = now + delay
        else:
            run_at = now
        trace = fields_of["trace"]
        prepared = Prepared(  # (every field in order: faster than by name)
            i, task_id, tenant, fields_of["key"], fields_of["priority"], payload_json,
            run_at_given is not None or delay is not None, run_at,
            fields_of["max_attempts"] or max_attempts, fields_of["on_conflict"], run_at <= now,
            "", (), "dead", None, label, fields_of["group"], fields_of["timeout_seconds"],
            None if trace is None else trace.stored(), object_key,
        )
        after = fields_of["after"]
        if after:
            if task.group is not None:
                raise InvalidInput.field(f"{prepared.where}.group",
                                         "a task that waits (after) cannot have a group")
            if task.key is not None:
                raise InvalidInput.field(f"{prepared.where}.key",
                                         "a task that waits (after) cannot have a key")
            prepared.after = [str(parent) for parent in after]
            flows.check_after(ctx, prepared.where, prepared.after)
            prepared.ready = False
            prepared.on_parent_failure = task.on_parent_failure
            if task.wait_timeout_seconds is not None:
                prepared.wait_until = now + task.wait_timeout_seconds
        elif fields_of["wait_timeout_seconds"] is not None:
            raise InvalidInput.field(f"{prepared.where}.wait_timeout_seconds",
                                     "only for a task that waits (after)")
        append(prepared)
    if pointers:
        payloads.precheck(ctx, [(p.object_key, p.where) for p in out if p.object_key])
    return out


def _named(index: int, label: str | None) -> str:
    """How errors name task ``index`` (``Prepared.where``)."""
    return f"tasks[{index}]" if label is None else label


def enqueue(ctx: Context, queue: str, tasks: Sequence[TaskIn],
            default_tenant: str | None = None, *,
            record: RoundRecorder | None = None) -> list[EnqueueOutcome]:
    """``record``, when given, is called in each transaction that inserts tasks, with their
    outcomes by index in ``tasks`` (an idempotency record is written there)."""
    now = ctx.now()
    prepared = prepare(ctx, queue, tasks, now, default_tenant)
    if not prepared:
        return []
    outcomes: dict[int, EnqueueOutcome] = {}

    # Duplicates inside one request: the first occurrence is the task; a later "replace"
    # overrides its content, a later "ignore" is ignored.
    primary: dict[tuple[str, str], Prepared] = {}
    unique: list[Prepared] = []
    followers: list[tuple[Prepared, Prepared]] = []
    for p in prepared:
        if p.key is None:
            unique.append(p)
            continue
        first = primary.get((p.tenant, p.key))
        if first is None:
            primary[(p.tenant, p.key)] = p
            unique.append(p)
            continue
        followers.append((p, first))
        if p.on_conflict == "replace":
            first.payload_json, first.priority = p.payload_json, p.priority
            first.object_key = p.object_key
            first.max_attempts, first.on_conflict = p.max_attempts, "replace"
            first.timeout_seconds = p.timeout_seconds
            if p.run_at_explicit:
                first.run_at_s, first.ready, first.run_at_explicit = p.run_at_s, p.ready, True

    for tenant in ctx.pairs.ensure(queue, {p.tenant for p in unique}):
        # first sight of this (queue, tenant) in this process: a queue without cold work
        # starts (or, after Valkey lost its data, returns) in warm mode
        tiering.refill(ctx, queue, tenant)
    pending = list(unique)
    for _ in range(INSERT_RETRIES):
        if not pending:
            break
        pending = _insert_round(ctx, queue, pending, now, outcomes, record)

    for p in pending:  # conflicted each round yet never found live: report as ignored
        outcomes[p.index] = EnqueueOutcome(id=UUID(p.id), outcome="ignored", state="cold",
                                           tenant=p.tenant, key=p.key)
    for follower, first in followers:
        base = outcomes[first.index]
        outcome = "updated" if follower.on_conflict == "replace" else "ignored"
        outcomes[follower.index] = base.model_copy(update={"outcome": outcome})
    ctx.warm.throughput.record_enqueued(  # the chart's counts (dal/throughput.py)
        queue, [o.tenant for o in outcomes.values() if o.outcome == "created"])
    return [outcomes[p.index] for p in prepared]


# The most payload bytes of a keyed batch insert_tasks_uniform_keyed takes: it keeps the
# batch's rows once more (read by both of its inserts), which past the server's work_mem
# (4 MB by default) are written to a temporary file.
UNIFORM_KEYED_MAX_BYTES = 1 << 20


def insert_columns(batch: Sequence[Prepared], *, keyed: bool
                   ) -> TaskColumns | UniformColumns:
    """The batch's columns for its insert: ``uniform_columns`` where they apply, else
    ``row_columns``."""
    uniform = uniform_columns(batch, keyed=keyed)
    if uniform is not None:
        return uniform
    return row_columns(batch, keyed=keyed)


def uniform_columns(batch: Sequence[Prepared], *, keyed: bool = False
                    ) -> UniformColumns | None:
    """The columns of a batch whose tasks share their state, run_at, max_attempts and time
    limit and have no group nor trace context (insert_tasks_uniform, or with ``keyed``
    insert_tasks_uniform_keyed: one value each for those); None for any other batch, and
    for a keyed one whose payloads pass ``UNIFORM_KEYED_MAX_BYTES``."""
    if not batch:
        return None
    if keyed and sum(len(p.payload_json) for p in batch) > UNIFORM_KEYED_MAX_BYTES:
        return None
    first = batch[0]
    state, run_at, attempts, limit = (first.state, first.run_at_s, first.max_attempts,
                                      first.timeout_seconds)
    for p in batch:
        if p.state != state or p.run_at_s != run_at or p.max_attempts != attempts \
                or p.timeout_seconds != limit or p.group is not None or p.trace is not None:
            return None
    columns: UniformColumns = {
        "ids": "{" + ",".join([p.id for p in batch]) + "}",
        "tenants": orjson.dumps([p.tenant for p in batch]).decode(),
        "priorities": "{" + ",".join(map(str, [p.priority for p in batch])) + "}",
        "payloads": (b"[" + b",".join([p.payload_json for p in batch]) + b"]").decode(),
        "state": state, "run_at": run_at, "max_attempts": attempts, "timeout": limit,
    }
    if keyed:
        columns["keys"] = orjson.dumps([p.key for p in batch]).decode()
    return columns


def row_columns(batch: Sequence[Prepared], *, keyed: bool) -> TaskColumns:
    """The batch's columns as insert_tasks takes them: array literals where every value is a
    number, a uuid or a state word; JSON arrays for names, keys and payloads."""
    run_ats = [p.run_at_s for p in batch]
    texts = {at: repr(at) for at in set(run_ats)}  # (most tasks of a batch share theirs)
    traces = [p.trace for p in batch]
    limits = [p.timeout_seconds for p in batch]
    columns: TaskColumns = {
        "ids": "{" + ",".join([p.id for p in batch]) + "}",
        "tenants": orjson.dumps([p.tenant for p in batch]).decode(),
        "priorities": "{" + ",".join(map(str, [p.priority for p in batch])) + "}",
        "payloads": (b"[" + b",".join([p.payload_json for p in batch]) + b"]").decode(),
        "states": "{" + ",".join([p.state for p in batch]) + "}",
        "run_ats": "{" + ",".join(map(texts.__getitem__, run_ats)) + "}",
        "max_attempts": "{" + ",".join(map(str, [p.max_attempts for p in batch])) + "}",
        "grps": orjson.dumps([p.group for p in batch]).decode(),
        # (a batch without trace contexts passes none: SQL pads the column with nulls)
        "traces": orjson.dumps([None if trace is None else trace.decode()
                                for trace in traces]).decode()
                  if traces.count(None) < len(batch) else "[]",
        # (a batch without time limits passes none: SQL pads the column with nulls)
        "timeouts": "{" + ",".join(["NULL" if limit is None else str(limit)
                                    for limit in limits]) + "}"
                    if limits.count(None) < len(batch) else "{}",
    }
    if keyed:
        columns["keys"] = orjson.dumps([p.key for p in batch]).decode()
    return columns


def _insert_round(ctx: Context, queue: str, batch: list[Prepared], now: float,
                  outcomes: dict[int, EnqueueOutcome],
                  record: RoundRecorder | None = None) -> list[Prepared]:
    """Insert; admit the created ready rows; resolve conflicts. Returns the tasks to retry
    (their conflicting task finished in between)."""
    ready_pairs = {(queue, p.tenant) for p in batch if p.ready}
    ticket = admission.begin(ctx, ready_pairs, since=now,  # (its rows' state_since)
                             sizes=_sizes(queue, batch, int(now * 1000)))
    try:
        ready_state = {tenant: ticket.state_for((queue, tenant)) for _, tenant in ready_pairs}
        keyed = False
        # whether a task waits, has a group or a big payload's object (its transaction
        # writes more than the rows)
        more = record is not None
        for p in batch:
            if p.after:
                p.state = "waiting"
                more = True
            else:
                p.state = ready_state[p.tenant] if p.ready else "delayed"
            if p.key is not None:
                keyed = True
            if p.group is not None or p.object_key:
                more = True
        released = flows.Released()
        group_released = groups.Released(queue)
        if more:
            seqs, warm_items, released, group_released = _insert_recorded(
                ctx, queue, batch, now, insert_columns(batch, keyed=keyed), keyed, record)
        else:
            # (a batch admitted warm: its keyless tasks one batch row where the setting
            # says so, logic/batch_rows.py)
            batch_row = batch_rows.take(ctx, batch)
            seqs, warm_items = _insert(
                ctx, queue, batch, now,
                insert_columns(batch, keyed=keyed) if batch_row is None else batch_row, keyed)
    except BaseException:
        admission.close(ctx, ticket)
        raise
    if len(seqs) == len(batch):  # (every task inserted: no key met a live task's)
        created, conflicts = batch, []
    else:
        created = [p for p in batch if p.id in seqs]
        conflicts = [p for p in batch if p.id not in seqs]
    # (made from their values, every one of its field's type: models.base.made)
    for p, outcome in zip(created, made(EnqueueOutcome, [
        {"id": task_id, "outcome": "created", "state": p.state, "tenant": p.tenant,
         "key": p.key}
        for p, task_id in zip(created, UUIDS.validate_python([p.id for p in created]),
                              strict=True)
    ]), strict=True):
        outcomes[p.index] = outcome
    # (ids made just now; the pairs' pushes in one round trip)
    refused = admission.dispatch(ctx, ticket, warm_items, kind="new", together=True)
    if refused:
        for p in batch:
            if p.id in refused:
                outcomes[p.index].state = "cold"
    if released.rows:  # waiting tasks whose parents were all finished: ready (or dead)
        states = flows.finish(ctx, released)
        for p in created:
            state = states.get(p.id)
            if state is not None:
                outcomes[p.index].state = state  # type: ignore[assignment]
    if group_released.rows:  # held tasks of groups given room by a conflict
        states = groups.finish(ctx, group_released)
        for p in created:
            state = states.get(p.id)
            if state is not None:
                outcomes[p.index].state = state  # type: ignore[assignment]
    if not conflicts:
        return []
    return _resolve_conflicts(ctx, queue, conflicts, now, outcomes)


# The seq a grouped task's blob names ("gs") is known only once its row is inserted: its
# size is taken at the widest a seq (a bigint) can be, so a blob is never larger than sized.
SEQ_BOUND = 2**63 - 1
# What a blob of attempt 0 starts with, before its count of escapes (task_blob).
_BLOB_HEAD = len(b'0|{"e":')


def _sizes(queue: str, batch: Sequence[Prepared], created_ms: int) -> dict[Pair, AdmittedSize]:
    """What the batch will push into each pair (admission.begin: a warm set that could not
    take its first task turns cold before the insert, and the pair's rows are written
    cold): the blob of its first ready task, its ready tasks, and their bytes. Each blob is
    sized as ``_warm_items`` will make it, never under. A task without a group has its
    blob made here (kept in ``Prepared.blob`` for ``_warm_items``): its exact bytes. A
    grouped task's blob names its seq, known only once its row is inserted: it is sized as
    the blob of its shape (key, priority, attempts, group, time limit, trace) made once
    without a payload, plus its payload and the digits the payload's escapes may add to
    the count ``e``, those digits and the seq taken at their widest (a few bytes over at
    most)."""
    shapes: dict[tuple[Any, ...], tuple[int, int]] = {}  # (bytes, escapes) without payload
    by_tenant: dict[str, list[int]] = {}  # [first task's bytes, tasks, bytes]
    for p in batch:
        if not p.ready:
            continue
        if p.group is None:
            if p.key is None and p.timeout_seconds is None and p.trace is None:
                blob = plain_blob(p.payload_json, p.priority, p.max_attempts, created_ms)
            else:
                blob = task_blob(0, p.payload_json, p.key, p.priority, p.max_attempts,
                                 created_ms, timeout_seconds=p.timeout_seconds,
                                 trace_json=p.trace)
            p.blob = blob
            size = len(blob)
        else:
            shape = (p.key, p.priority, p.max_attempts, p.group, p.timeout_seconds, p.trace)
            empty = shapes.get(shape)
            if empty is None:
                blob = task_blob(0, b"", p.key, p.priority, p.max_attempts, created_ms,
                                 group=p.group, seq=SEQ_BOUND,
                                 timeout_seconds=p.timeout_seconds, trace_json=p.trace)
                empty = shapes[shape] = (len(blob),
                                         int(blob[_BLOB_HEAD:blob.index(b",", _BLOB_HEAD)]))
            own = len(p.payload_json)
            size = empty[0] + own + len(str(empty[1] + own)) - len(str(empty[1]))
        counts = by_tenant.get(p.tenant)
        if counts is None:
            by_tenant[p.tenant] = [size, 1, size]
        else:
            counts[1] += 1
            counts[2] += size
    return {(queue, tenant): (first, tasks, total)
            for tenant, (first, tasks, total) in by_tenant.items()}


Inserted = tuple[dict[str, int], dict[Pair, list[PushItem]]]


def _insert(ctx: Context, queue: str, batch: list[Prepared], now: float,
            columns: TaskColumns | UniformColumns | batch_rows.BatchRow, keyed: bool,
            conn: Conn | None = None) -> Inserted:
    """Insert the batch: {id: seq} of the rows inserted, and the push items of those created
    warm.

    With keys, the rows not inserted met a live task's key; without, every row is inserted,
    numbered in batch order. The push items are made before the caller's transaction
    commits. Without one, the statement commits itself: every seq tierq_task_seq hands out
    has a place, so making them cannot fail. On a shard of a sharded deployment, the insert
    runs in a transaction that first holds the pairs' homes there (a pair moved off this
    shard meanwhile raises PairMoving, writing nothing). A ``BatchRow`` (``batch_rows.take``)
    writes the batch's keyless tasks as one batch row, its keyed ones as rows (a keyed task
    that met a live task's key is not written)."""
    if ctx.id_tag is not None:
        if conn is None:
            with ctx.db.transaction() as own:
                return _insert(ctx, queue, batch, now, columns, keyed, own)
        require_here(ctx.store, conn, queue, [p.tenant for p in batch])
    if isinstance(columns, batch_rows.BatchRow):
        first, seqs = ctx.store.insert_batch(queue, to_datetime(now), columns.columns,
                                             conn=conn)
        seqs.update((batch[n].id, first + n) for n in columns.places)
        return seqs, _warm_items(queue, batch, seqs, int(now * 1000))
    if "state" in columns and keyed:
        first, seqs = ctx.store.insert_tasks_uniform_keyed(
            queue, to_datetime(now), cast(UniformColumns, columns), conn=conn)
        seqs.update((p.id, first + i) for i, p in enumerate(batch) if p.key is None)
        return seqs, _warm_items(queue, batch, seqs, int(now * 1000))
    if "state" in columns:
        first, count = ctx.store.insert_tasks_uniform(
            queue, to_datetime(now), cast(UniformColumns, columns), conn=conn)
    elif keyed:
        seqs = ctx.store.insert_tasks(queue, to_datetime(now), columns, conn=conn)
    else:
        first, count = ctx.store.insert_tasks_keyless(queue, to_datetime(now), columns,
                                                      conn=conn)
    if not keyed:
        if count != len(batch):
            raise RuntimeError(f"inserted {count} of {len(batch)} tasks")
        seqs = {p.id: first + i for i, p in enumerate(batch)}
    return seqs, _warm_items(queue, batch, seqs, int(now * 1000))


def _warm_items(queue: str, batch: list[Prepared], seqs: dict[str, int],
                created_ms: int) -> dict[Pair, list[PushItem]]:
    """The push items of the batch's tasks created warm (their places from their seqs;
    their blobs as ``_sizes`` made them, else made here)."""
    items: dict[Pair, list[PushItem]] = {}
    tenant, pushes = None, None
    for p in batch:
        seq = seqs.get(p.id)
        if seq is None or p.state != "warm":
            continue
        blob = p.blob
        if blob is None:
            blob = task_blob(0, p.payload_json, p.key, p.priority, p.max_attempts, created_ms,
                             group=p.group, seq=seq, timeout_seconds=p.timeout_seconds,
                             trace_json=p.trace)
        if p.tenant != tenant or pushes is None:
            tenant = p.tenant
            pushes = items.setdefault((queue, tenant), [])
        pushes.append((p.id, place(p.priority, seq, p.id), blob))
    return items


def waits_of(batch: Sequence[Prepared], created: set[str] | dict[str, int]) -> list[flows.Wait]:
    """The waits of the batch's waiting tasks that were created."""
    return [flows.Wait(p.id, p.tenant, list(p.after), p.on_parent_failure,
                       None if p.wait_until is None else to_datetime(p.wait_until), p.where)
            for p in batch if p.after and p.id in created]


def _insert_recorded(ctx: Context, queue: str, batch: list[Prepared], now: float,
                     columns: TaskColumns | UniformColumns, keyed: bool,
                     record: RoundRecorder | None
                     ) -> tuple[dict[str, int], dict[Pair, list[PushItem]], flows.Released,
                                groups.Released]:
    """The round's insert, the waits of its waiting tasks (logic/flows.py), its tasks'
    places in their groups (logic/groups.py: active or held) and the caller's record of
    it, in one transaction (run again should it be a deadlock's victim: holding the
    parents it names, it may meet a release that holds them in the other order)."""
    states = {p.id: p.state for p in batch}

    def body(conn: Conn) -> tuple[dict[str, int], dict[Pair, list[PushItem]], flows.Released,
                                  groups.Released]:
        for p in batch:  # (as before a run that rolled back)
            p.state = states[p.id]
        placed = columns
        if any(p.group is not None for p in batch):
            groups.place(ctx, conn, queue, batch)  # (some become held)
            placed = insert_columns(batch, keyed=keyed)
        seqs, items = _insert(ctx, queue, batch, now, placed, keyed, conn)
        # big payloads' objects: recorded with their tasks, refused if deleted meanwhile
        objects = [(p.object_key, p.id, p.tenant, p.where)
                   for p in batch if p.object_key and p.id in seqs]
        if objects:
            payloads.use(ctx, conn, objects)
        group_released = groups.count_placed(ctx, conn, queue, batch, seqs)
        by_id = {str(row.id): "delayed" for row in group_released.rows}  # (a conflict left room)
        released = flows.add_waits(ctx, conn, waits_of(batch, seqs))
        by_id.update({str(row.id): row.state for row in released.rows})
        for p in batch:  # released at once, or left the wait at once (parents finished)
            p.state = by_id.get(p.id, p.state)
        if record is not None:
            record(conn, {p.index: {"id": p.id, "outcome": "created", "state": p.state,
                                    "tenant": p.tenant, "key": p.key}
                          if p.id in seqs else None for p in batch})
        return seqs, items, released, group_released

    return ctx.db.run_transaction(body, what="an enqueue")


def _resolve_conflicts(ctx: Context, queue: str, conflicts: list[Prepared], now: float,
                       outcomes: dict[int, EnqueueOutcome]) -> list[Prepared]:
    live = {(r.tenant, r.key): r for r in ctx.store.live_by_keys(
        queue, [p.tenant for p in conflicts], [p.key for p in conflicts])}
    retry: list[Prepared] = []
    to_replace: list[tuple[Prepared, LiveKeyRow]] = []
    for p in conflicts:
        existing = live.get((p.tenant, p.key or ""))
        if existing is None:
            retry.append(p)
        elif p.on_conflict == "replace":
            to_replace.append((p, existing))
        else:
            outcomes[p.index] = EnqueueOutcome(id=existing.id, outcome="ignored",
                                               state=existing.state, tenant=p.tenant, key=p.key)
    if to_replace:
        _replace(ctx, queue, to_replace, now, outcomes)
    return retry


def _replace(ctx: Context, queue: str, items: list[tuple[Prepared, LiveKeyRow]],
             now: float, outcomes: dict[int, EnqueueOutcome]) -> None:
    """Update live tasks in place: same id, same seq (docs/architecture.md §8, guarantee 5)."""
    # a new payload's object recorded first with the task it replaces into (which exists,
    # so the object is kept even should the replace not happen)
    objects = [(p.object_key, str(e.id), p.tenant, p.where) for p, e in items if p.object_key]
    if objects:
        payloads.use_now(ctx, objects)
    rows = ctx.store.replace_tasks(
        to_datetime(now), [str(e.id) for _, e in items],
        [p.payload_json.decode() for p, _ in items], [p.priority for p, _ in items],
        [to_datetime(p.run_at_s) if p.run_at_explicit else None for p, _ in items],
        [p.max_attempts for p, _ in items], [p.timeout_seconds for p, _ in items])
    updated = {str(r.id): r for r in rows}
    now_ready: list[Target] = []
    warm_updates: dict[str, list[tuple[str, Place, bytes]]] = defaultdict(list)
    to_remove: dict[str, list[Place]] = defaultdict(list)
    due_ms: dict[str, list[tuple[str, int]]] = defaultdict(list)  # (id, due ms) taken out
    sooner: dict[str, list[tuple[str, int]]] = defaultdict(list)  # (id, due ms) per tenant
    for p, existing in items:
        row = updated.get(str(existing.id))
        if row is None:
            outcomes[p.index] = EnqueueOutcome(id=existing.id, outcome="ignored",
                                               state=existing.state, tenant=p.tenant, key=p.key)
            continue
        state = row.state
        if existing.state == "delayed":
            # (an earlier replace into the future may have left a tombstone lapsing later)
            sooner[p.tenant].append((str(row.id), to_ms(row.run_at.timestamp()) - 1))
        if state == "delayed" and existing.state in ("warm", "cold"):
            # rescheduled into the future
            to_remove[p.tenant].append(place(row.priority, row.seq, str(row.id)))
            due_ms[p.tenant].append((str(row.id), to_ms(row.run_at.timestamp())))
        elif state == "delayed" and row.run_at <= to_datetime(now):
            # (compared as stored: a run_at of now, rounded to the microsecond, may be past
            # the float it came from)
            now_ready.append(Target(str(row.id), queue, p.tenant))
        elif state == "warm":
            warm_updates[p.tenant].append(admission.row_push_item(row))
        outcomes[p.index] = EnqueueOutcome(id=row.id, outcome="updated", state=state,
                                           tenant=p.tenant, key=p.key)
    now_ms = to_ms(now)
    longest = gone_ttl_ms(ctx.settings)
    for tenant, places in to_remove.items():
        # a leased task rescheduled loses its lease: its queue-wide reservation goes back.
        # Each tombstone lapses just before its task is due (a push that read it as ready
        # before this replace committed leaves it out; the push that finds it due passes):
        # written for the latest, then lowered to each task's own when they differ.
        dues = due_ms[tenant]
        latest = max(due for _, due in dues)
        ttl = max(1, min(longest, latest - 1 - now_ms))
        _, ended = ctx.warm.remove_leased(queue, tenant, places, gone_ms=now_ms,
                                          gone_ttl_ms=ttl)
        if any(due != latest for _, due in dues):
            sooner[tenant] += [(task_id, due - 1) for task_id, due in dues]
        if ended:
            from tierq.logic.leases import free_reservations  # (not on every enqueue's path)
            free_reservations(ctx, queue, [lease.token for lease in ended])
    for tenant, lapses in sooner.items():
        ctx.warm.lower_tombstones(queue, tenant, lapses)
    cold: set[str] = set()
    for tenant, pushes in warm_updates.items():
        cold.update(admission.update_warm(ctx, (queue, tenant), pushes))
    if cold:  # (past the pair's allotment: out of the warm tier, waiting cold)
        for p, existing in items:
            if str(existing.id) in cold:
                outcomes[p.index].state = "cold"
    if now_ready:
        states = {str(r.id): r.state for r in admission.ready_now(ctx, now_ready)}
        for p, existing in items:
            ready_state = states.get(str(existing.id))
            if ready_state is not None:
                outcomes[p.index].state = ready_state


def insert_flow(ctx: Context, batches: dict[str, list[Prepared]], ordered: list[Prepared],
                now: float, record: Callable[[Conn, dict[str, str]], None] | None = None
                ) -> dict[str, str]:
    """A flow's tasks (``batches``: by queue, without keys) inserted and their waits
    written in one transaction, then admitted; each task's state by id. ``record(conn,
    states)``, when given, runs in that transaction."""
    for queue, batch in batches.items():
        for tenant in ctx.pairs.ensure(queue, {p.tenant for p in batch}):
            tiering.refill(ctx, queue, tenant)
    ready_pairs = {(queue, p.tenant) for queue, batch in batches.items() for p in batch
                   if p.ready and not p.after}
    ticket = admission.begin(ctx, ready_pairs, since=now)
    warm: dict[Pair, list[PushItem]] = {}
    try:
        for queue, batch in batches.items():
            for p in batch:
                p.state = ("waiting" if p.after else
                           ticket.state_for((queue, p.tenant)) if p.ready else "delayed")
        def body(conn: Conn) -> tuple[dict[str, str], flows.Released]:
            warm.clear()  # (a run before this one rolled back)
            for queue, batch in batches.items():
                for start in range(0, len(batch), MAX_BATCH):
                    part = batch[start:start + MAX_BATCH]
                    _, items = _insert(ctx, queue, part, now, insert_columns(part, keyed=False),
                                       False, conn)
                    for pair, pushes in items.items():
                        warm.setdefault(pair, []).extend(pushes)
            objects = [(p.object_key, p.id, p.tenant, p.where) for p in ordered if p.object_key]
            if objects:
                payloads.use(ctx, conn, objects)
            released = flows.add_waits(ctx, conn, waits_of(ordered, {p.id for p in ordered}))
            states = {p.id: p.state for p in ordered}
            states.update({str(r.id): r.state for r in released.rows})
            if record is not None:
                record(conn, states)
            return states, released

        # (run again should it be a deadlock's victim, as _insert_recorded)
        states, released = ctx.db.run_transaction(body, what="a flow")
    except BaseException:
        admission.close(ctx, ticket)
        raise
    for task_id in admission.dispatch(ctx, ticket, warm, kind="new"):
        states[task_id] = "cold"
    states.update(flows.finish(ctx, released))
    for queue, batch in batches.items():  # the chart's counts (dal/throughput.py)
        ctx.warm.throughput.record_enqueued(queue, [p.tenant for p in batch])
    return states
