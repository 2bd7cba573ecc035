"""Idempotent claims: a claim repeated with the same ``Idempotency-Key`` gets the tasks of the
first answer again, without leasing more.

A claim's answer can weigh up to 6 MB, so its key's record (in Valkey, in the key's own slot,
see :mod:`tierq.logic.idempotency`) keeps only what the answer needs that PostgreSQL does not
hold (:func:`record_of`): per task its id, tenant, lease token, attempt and enqueue instant,
and a digest of the content it was handed out with. A repeat rebuilds the answer
(:func:`replay`) from the task rows and the leased sets:

| a task of the first answer                          | in the repeat's answer            |
| --------------------------------------------------- | --------------------------------- |
| still leased with that token, content unchanged     | as the first answer gave it       |
| acked, nacked, released, expired or cancelled since | left out                          |
| its content changed since (an enqueue with          | left out, and given back through  |
| ``on_conflict: replace`` while it was leased)       | the release path: its place in    |
|                                                     | line, no attempt counted          |

A task that comes back has the first answer's lease token, attempt, payload, key,
priority, max_attempts and enqueued_at. Its payload is the same JSON value, though an
object's keys may come in PostgreSQL's jsonb order, as they do for any task that waited
cold. Its ``lease_expires_at`` is the lease's current deadline: the first answer's, unless a
heartbeat extended it since (the worker then learns the deadline that holds).

A changed task cannot be answered as it was; giving it back keeps it from being stranded.
The comparison is of JSON values (a digest of the canonical JSON, object keys sorted). One
case reads as a change although nothing changed: a float of 1e16 or more that was never
cold (jsonb writes it out as an integer); its task is then given back the same way.

The rebuilt tasks are a subset of the first answer's with the same content, so the answer
stays within the claim's response budget: the first was charged each task's JSON text plus
a bound on its fields at their longest (logic/claim_budget.TASK_FIELDS_COST), which covers a
deadline written with more digits.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from tierq.dal.warm_tier import lease_member
from tierq.logic import time_limits
from tierq.logic.claim import ClaimOutcome, give_back
from tierq.logic.context import Context, from_ms, to_ms
from tierq.logic.idempotency import KeyedCall, once_in_valkey
from tierq.models.leases import CLAIMED_TASKS, ClaimedTask, ClaimRequest

if TYPE_CHECKING:
    from tierq.contract import Deployment

DIGEST_BYTES = 8


def claim_once(deployment: Deployment, queue: str, request: ClaimRequest, *, max_bytes: int,
               answer_by: float | None, call: KeyedCall) -> ClaimOutcome:
    """A claim under an idempotency key: the first leases (its record, in Valkey, kept at
    most as long as its leases: :func:`record_of`, :func:`record_seconds`); a repeat gets the
    first answer's tasks still leased (:func:`replay`, on each pair's home) and leases
    nothing more. When the record cannot be made, the tasks go back to their places."""
    ctx = deployment.engines[deployment.default_shard].ctx

    def replayed(kept: Any) -> ClaimOutcome:
        return ClaimOutcome(deployment.replay_claim(queue, kept), idempotent_replay=True)

    outcome, _ = once_in_valkey(
        ctx, call,
        lambda: deployment.claim_outcome(queue, request, max_bytes=max_bytes,
                                         answer_by=answer_by),
        load=replayed,
        record=lambda got: (record_of(got.tasks),
                            record_seconds(ctx, queue, request, got.tasks)),
        undo=lambda got: deployment.give_back(queue, got.tasks))
    return outcome


def content_digest(key: str | None, priority: int, max_attempts: int, payload: Any) -> str:
    """What a task was handed out with, hashed: its payload in canonical JSON (object keys
    sorted, as PostgreSQL's jsonb may reorder them) with its key, priority and max_attempts."""
    canonical = orjson.dumps([key, priority, max_attempts, payload],
                             option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(canonical, digest_size=DIGEST_BYTES).hexdigest()


def record_of(tasks: Sequence[ClaimedTask]) -> dict[str, Any]:
    """The small part of a claim's answer kept with its key: per task, in answer order,
    [id, tenant, lease token, attempt, enqueued_at (epoch ms), content digest]."""
    return {"tasks": [
        [str(t.id), t.tenant, t.lease_token, t.attempt, to_ms_exact(t.enqueued_at.timestamp()),
         content_digest(t.key, t.priority, t.max_attempts, t.payload)]
        for t in tasks
    ]}


def record_seconds(ctx: Context, queue: str, request: ClaimRequest,
                   tasks: Sequence[ClaimedTask]) -> float:
    """How long a claim's record is kept: until its last lease ends (past it a repeat is a
    new claim); for an empty answer, the lease the claim would have given."""
    if tasks:
        last = max(t.lease_expires_at for t in tasks).timestamp()
        return max(0.001, last - ctx.now())
    return float(request.lease_seconds or ctx.queue_settings.get(queue).lease_seconds)


def to_ms_exact(seconds: float) -> int:
    # enqueued_at is from_ms(<ms>): rounding (not truncation) gives those ms back exactly
    return round(seconds * 1000)


def replay(ctx: Context, queue: str, record: Any) -> list[ClaimedTask]:
    """The first answer's tasks still leased with its tokens, rebuilt (see the module)."""
    entries: list[list[Any]] = record["tasks"]
    if not entries:
        return []
    now_ms = to_ms(ctx.now())
    deadlines: dict[str, int] = {}
    by_tenant: dict[str, list[list[Any]]] = defaultdict(list)
    for entry in entries:
        by_tenant[entry[1]].append(entry)
    for tenant, of_tenant in by_tenant.items():
        found = ctx.warm.lease_deadlines(
            queue, tenant, [lease_member(e[0], e[2]) for e in of_tenant])
        for entry, deadline in zip(of_tenant, found, strict=True):
            # 0: the reaper is expiring it; at or before now: expired
            if deadline is not None and deadline > now_ms:
                deadlines[entry[0]] = deadline
    if not deadlines:
        return []
    tenant_of = {entry[0]: entry[1] for entry in entries}
    ids = list(deadlines)
    rows = {r.id: r for r in ctx.store.claimed_tasks_by_ids(
        queue, ids, [tenant_of[i] for i in ids])}
    fields: list[dict[str, Any]] = []
    changed: list[tuple[str, str]] = []
    for task_id, tenant, token, attempt, created_ms, digest in entries:
        deadline = deadlines.get(task_id)
        row = rows.get(task_id)
        if deadline is None or row is None or row.tenant != tenant or row.state != "warm":
            continue  # settled, expired or cancelled since: not this claim's now
        payload = orjson.loads(row.payload)
        if content_digest(row.key, row.priority, row.max_attempts, payload) != digest:
            changed.append((task_id, token))
            continue
        fields.append({
            "id": task_id,
            "queue": queue,
            "tenant": tenant,
            "key": row.key,
            "priority": row.priority,
            "payload": payload,
            "attempt": attempt,
            "max_attempts": row.max_attempts,
            "lease_token": token,
            "lease_expires_at": from_ms(deadline),
            "redelivered": attempt > 1,
            "enqueued_at": from_ms(created_ms),
            "parents": None if row.parents is None else orjson.loads(row.parents),
            "group": row.grp,
            "timeout_seconds": time_limits.effective(
                row.timeout_seconds, ctx.queue_settings.get(queue).timeout_seconds),
            "trace": None if row.trace is None else orjson.loads(row.trace),
        })
    # content changed while leased: not answerable as first given, so back in line with no
    # attempt counted
    give_back(ctx, queue, changed)
    return CLAIMED_TASKS.validate_python(fields)
