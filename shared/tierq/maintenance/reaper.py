"""reaper: expired leases, lost warm rows, old finished rows and idle pairs.

| what                                              | becomes                                  |
| ------------------------------------------------- | ---------------------------------------- |
| an expired lease                                  | back of its line with the attempt        |
|                                                   | counted; dead letter at max_attempts     |
| a lease at its attempt's time limit               | failed as by a nack (``timeout``: the    |
|                                                   | queue's backoff; dead at max_attempts)   |
| a warm row Valkey lost (older than the grace)     | pushed again                             |
| a done, cancelled or dead row past its queue's    | purged                                   |
| retention                                         |                                          |
| a pair idle past the pair retention, no row left  | forgotten                                |
| an entry of a pair's running-lease index whose    | removed, one slice of the index per      |
| lease has ended                                   | visit after a cursor in the pair's meta  |
| a group with held tasks and nothing active        | released (logic/groups.py)               |
| a replacement kept for a push (``newer``) or a    | dropped, by the index of lapses, though  |
| tombstone (``gone``), lapsed                      | its pair went idle (``sweep_lapses``)    |
| a big payload's object no task with a row names   | deleted (logic/payloads.py)              |
| a deleted payload object's key past its days      | forgotten (logic/payloads.py)            |
| a batch row whose every member has ended (acked   | deleted with its ends, one slice after a |
| or moved out: migration 0030)                     | cursor per statement (``sweep_batches``) |

Each part walks only what has work: pairs with warm rows (every ready task and every lease
in Valkey has one), queues with done or dead rows, and one slice of the registry for the
idle pairs. Walks go in slices after a cursor saved in PostgreSQL and stop once the pass's
time budget is spent (each part makes progress every pass); the next pass goes on after
the last item visited, so nothing starves (``tierq.logic.pairs.walk``). The lapsed entries
are found by the index of lapses in Valkey, one slice of the pairs it says are due a pass.
A pair whose Valkey master does not answer is logged, listed in ``failed`` and passed over:
the pairs after it are still served (``tierq.maintenance.pair_failures``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import redis
from pydantic import Field, ValidationError

from tierq.core.batch_ids import member_id
from tierq.core.lazy import lazy_module
from tierq.dal.shards import shard_tag
from tierq.dal.store.batches import FIRST_KEY
from tierq.dal.store.tasks import NEVER
from tierq.dal.warm_tier import LAPSE_SWEEP_EVERY_MS, lease_member
from tierq.errors import DatabaseTimedOut, WarmTierFull, WarmTierUnavailable
from tierq.logic import (
    admission,
    batch_rows,
    flows,
    groups,
    idempotency,
    pairs,
    payloads,
    time_limits,
)
from tierq.logic.admission import Ticket
from tierq.logic.context import Context, to_datetime, to_ms
from tierq.maintenance.pair_failures import PairFailures, note_ready_tenants, refused
from tierq.maintenance.registry import MaintenanceJob, SlicedWalkConfig

if TYPE_CHECKING:
    from tierq.logic import leases
else:  # (the lease path, with the lease and task models: by the first expired lease)
    leases = lazy_module("tierq.logic.leases")

log = logging.getLogger(__name__)


class ReaperConfig(SlicedWalkConfig):
    """``TIERQ_REAPER_<FIELD>``: the pass's budget, timeouts and slice, and its batches."""

    expired_batch: int = Field(default=500, ge=1, le=10_000)  # leases listed per Lua call
    reconcile_batch: int = Field(default=5000, ge=1, le=100_000)  # warm rows checked per pair
    purge_batch: int = Field(default=5000, ge=1, le=100_000)  # rows deleted per statement
    forget_slice: int = Field(default=1000, ge=1, le=100_000)  # registry rows read per pass
    groups_slice: int = Field(default=500, ge=1, le=10_000)  # groups with held tasks per pass
    # pairs of the index of lapses swept per pass (lapsed `newer` entries and tombstones)
    lapse_slice: int = Field(default=500, ge=1, le=10_000)
    idempotency_purge_batches: int = Field(default=4, ge=1, le=1000)  # of expired keys
    # how often the reaper's scheduled tick emits the per-queue gauges (the alarms' and the
    # dashboard's data: tierq.maintenance.gauges)
    gauges_every_seconds: float = Field(default=60.0, gt=0, le=3600)
    # big payloads' recorded objects read per slice, and slices per pass (logic/payloads.py)
    payload_slice: int = Field(default=1000, ge=1, le=10_000)
    payload_slices: int = Field(default=4, ge=1, le=1000)
    # days a deleted object's key is remembered (refused as "was deleted", then as
    # unknown); a day at least, far longer than a failed delete takes to restore its key
    payload_tombstone_days: float = Field(default=payloads.TOMBSTONE_DAYS, ge=1, le=3650)
    # batch rows looked at per statement of the batch sweep, and statements per pass
    batch_slice: int = Field(default=500, ge=1, le=10_000)
    batch_slices: int = Field(default=4, ge=1, le=1000)

LEASES_WALK = "reaper.pairs"
PURGE_WALK = "reaper.purge"
FORGET_WALK = "reaper.forget"
GROUPS_WALK = "reaper.groups"
BATCHES_WALK = "reaper.batches"


@dataclass
class ReaperSummary:
    expired: int = 0  # leases listed past their deadline (timed out ones too)
    timed_out: int = 0  # of those, attempts that reached their time limit
    requeued: int = 0
    dead: int = 0
    restored: int = 0
    purged: int = 0
    dead_by_queue: dict[str, int] = field(default_factory=dict)  # lease expiries that died
    pairs: int = 0  # pairs with warm rows visited (leases, reconciliation)
    slices: int = 0  # slices read by the pair walk
    completed: bool = False  # the pair walk got round every pair with warm rows
    purge_queues: int = 0  # queues with finished rows visited
    # queues whose purge statement PostgreSQL cancelled at the pass's timeout (a finished
    # row held by another transaction), or whose stored settings are refused: tried again
    # next pass, the others purged
    purge_failed: list[str] = field(default_factory=list)
    # waits of purged dead letters kept at the pass's last look, a parent's row held by
    # another transaction (the other waits are forgotten; these after a later purge of
    # dead letters)
    waits_kept: int = 0
    forgotten: list[str] = field(default_factory=list)  # "queue|tenant" of forgotten pairs
    groups_released: int = 0  # held tasks of stalled groups released (logic/groups.py)
    # "queue|tenant|group" of stalled groups passed over: a group row another transaction
    # holds, or a release that failed (tried again when the sweep comes round)
    groups_failed: list[str] = field(default_factory=list)
    payloads_deleted: int = 0  # big payloads' objects deleted (logic/payloads.py)
    payloads_failed: int = 0  # objects the store did not delete (tried again next round)
    payload_tombstones_forgotten: int = 0  # deleted objects' keys past their days, removed
    batches_swept: int = 0  # batch rows deleted, every member ended (sweep_batches)
    batch_tasks_swept: int = 0  # their members
    # pairs whose lapsed `newer` entries and tombstones were dropped (sweep_lapses), and
    # "queue|tenant" of those whose master failed (tried again a minute later)
    lapses_swept: int = 0
    lapses_failed: list[str] = field(default_factory=list)
    # "queue|tenant" whose Valkey failed, whose statement timed out, whose keys a script
    # refused or whose queue's stored settings are refused (tried next pass)
    failed: list[str] = field(default_factory=list)
    # queues whose ready-tenant index Valkey refused an entry (a key in a state no script
    # expects: logged as an error; its pairs are entered again next pass)
    ready_index_failed: list[str] = field(default_factory=list)


def run(ctx: Context, config: ReaperConfig | None = None, **overrides: Any) -> ReaperSummary:
    """One pass under its config's timeouts (``JOB.run``)."""
    return JOB.run(ctx, config, **overrides)


def run_pass(ctx: Context, config: ReaperConfig) -> ReaperSummary:
    summary = ReaperSummary()
    budget = pairs.Budget(config.budget_seconds)
    cursors = pairs.load_cursors(ctx.store)
    failures = PairFailures("reaper", ctx, summary.failed)
    # (first: a batch row whose members all ended keeps its pairs in the walk, which would
    # touch them as busy, and from the forget; swept now, they are idle as rows acked are)
    sweep_batches(ctx, summary, budget, config, cursors)
    reap_pairs(ctx, summary, budget, config, cursors, failures)
    purge_queues(ctx, summary, budget, config, cursors)
    forget_idle(ctx, summary, config.forget_slice, cursors)
    sweep_lapses(ctx, summary, config.lapse_slice)
    sweep_groups(ctx, summary, config.groups_slice, cursors)
    sweep_payloads(ctx, summary, budget, config)
    # Idempotency-Keys past TIERQ_IDEMPOTENCY_TTL_SECONDS
    idempotency.purge_expired(ctx, max_batches=config.idempotency_purge_batches)
    return summary


def sweep_payloads(ctx: Context, summary: ReaperSummary, budget: pairs.Budget,
                   config: ReaperConfig) -> None:
    """Delete big payloads' objects that no task needs any more. The store not answering
    is logged and leaves them for a later pass; the rest of the pass is done."""
    if budget.spent:
        return
    swept = payloads.sweep(ctx, config.payload_slice, config.payload_slices,
                           config.payload_tombstone_days)
    summary.payloads_deleted += swept.deleted
    summary.payloads_failed += swept.failed
    summary.payload_tombstones_forgotten += swept.forgotten


def sweep_batches(ctx: Context, summary: ReaperSummary, budget: pairs.Budget,
                  config: ReaperConfig, cursors: dict[str, pairs.Pair]) -> None:
    """Delete the batch rows whose every member has ended, with their ends: up to
    ``batch_slices`` statements of ``batch_slice`` rows each, in key order after the walk's
    cursor (kept as (key, "")), wrapping round at the end. A batch row an ack or a move
    holds is passed over and looked at again next time round; a statement that meets a
    row lock past ``SWEEP_LOCK_TIMEOUT`` (a purge holding its rows) ends the sweep, not the
    pass. Each statement reads ``batch_slice`` batch rows at most, whatever their tenants."""
    saved = cursors.get(BATCHES_WALK, pairs.START)[0]
    after = saved or FIRST_KEY
    for _ in range(config.batch_slices):
        if budget.spent:
            break
        try:
            last, gone = ctx.store.sweep_batches(after, config.batch_slice)
        except DatabaseTimedOut as exc:  # (the pass's other parts go on; swept next pass)
            log.warning("reaper: PostgreSQL timed out sweeping batch rows after %s; the "
                        "next pass goes on from there: %s", after, exc.detail or exc.message,
                        extra={"job": "reaper"})
            break
        summary.batches_swept += gone.batches
        summary.batch_tasks_swept += gone.tasks
        if last is None:  # (none after the cursor: the next statement starts again)
            after = FIRST_KEY
            break
        after = last
    if after != (saved or FIRST_KEY):
        pairs.save_cursor(ctx.store, BATCHES_WALK, (after, ""))


def reap_pairs(ctx: Context, summary: ReaperSummary, budget: pairs.Budget,
               config: ReaperConfig, cursors: dict[str, pairs.Pair],
               failures: PairFailures) -> None:
    """Expire leases and reconcile, pair by pair, over the pairs with warm rows."""
    limit = config.slice_size
    stats = pairs.WalkStats()
    # (no batch row anywhere: no pair's members to reconcile, and no statement a pair)
    members = ctx.store.has_batch_rows()

    def fetch(after: pairs.Pair) -> list[pairs.Pair]:
        return ctx.store.walk_warm_pairs(after, limit)

    for chunk in pairs.walk(ctx.store, LEASES_WALK, fetch, lambda pair: pair, budget, stats,
                            cursors, limit):
        visited: list[pairs.Pair] = []
        for queue, tenant in chunk:
            finished = reap_pair(ctx, failures, queue, tenant, summary, budget, config,
                                 members=members)
            # out of time inside this pair still counts as its turn: the next pass goes on
            # after it, so a pair that keeps more leases expiring than a pass can expire
            # never holds back the pairs after it (it is served again next round)
            visited.append((queue, tenant))
            if not finished or budget.spent:
                break
        stats.items.extend(visited)
        ctx.pairs.warm_round_now.update(visited)
        touch(ctx, visited)
        note_ready(ctx, visited, summary.ready_index_failed)
    summary.pairs, summary.slices, summary.completed = stats.visited, stats.slices, \
        stats.completed
    if stats.completed:
        # pairs whose warm rows are all gone since the last round: one last visit
        for queue, tenant in sorted(ctx.pairs.warm_round_before - ctx.pairs.warm_round_now):
            try:
                if not failures.skip((queue, tenant)) and not lives_elsewhere(ctx, queue,
                                                                              tenant):
                    expire_leases(ctx, queue, tenant, summary, config)
            except DatabaseTimedOut as exc:
                failures.timed_out((queue, tenant), exc)
            except WarmTierUnavailable as exc:
                failures.record((queue, tenant), exc)
            except redis.ResponseError as exc:
                failures.broken((queue, tenant), exc)
            except ValidationError as exc:
                failures.refused_settings((queue, tenant), exc)
        ctx.pairs.warm_round_before = ctx.pairs.warm_round_now
        ctx.pairs.warm_round_now = set()


def lives_elsewhere(ctx: Context, queue: str, tenant: str) -> bool:
    """Whether the pair's home is another shard now (a move switched it: logic/pair_moves.py).
    The pair's Valkey keys are shared by every shard, so its leases there are the new
    home's tasks': this shard would list them, find no row to record their attempts on and
    drop them, and the new home's reaper would not count those attempts (the reconciler
    puts the tasks back after its grace). One read of this shard's copy of the home, at
    every visit of a sharded deployment's pair: a walk that read the pairs before a move's
    switch (which drops the pair's batch pairs rows here) may still name a pair moved
    away."""
    if ctx.id_tag is None:
        return False
    state = ctx.store.home_state(queue, tenant)
    return state is not None and shard_tag(state.shard) != ctx.id_tag


def reap_pair(ctx: Context, failures: PairFailures, queue: str, tenant: str,
              summary: ReaperSummary, budget: pairs.Budget, config: ReaperConfig, *,
              members: bool = True) -> bool:
    """Expire the pair's leases and reconcile it; False when out of time inside it. A pair
    whose master fails (now or earlier in the pass), whose statement PostgreSQL cancels at
    the pass's timeout, whose keys a script refuses or whose queue's stored settings the
    settings model refuses, is listed as failed and done with."""
    if failures.skip((queue, tenant)):
        return True
    try:
        # (a sharded deployment's pair may be found by a batch row that still holds other
        # tenants' tasks after it moved away: its leases are the new home's)
        if lives_elsewhere(ctx, queue, tenant):
            return True
        if not expire_leases(ctx, queue, tenant, summary, config, budget):
            return False
        cursors = ctx.warm.reaper_cursors(queue, tenant)
        reconcile(ctx, queue, tenant, summary, config, cursors.reconcile_after,
                  members_after=cursors.members_after if members else None)
        # one slice of its running-lease index
        ctx.warm.prune_started(queue, tenant, cursors.started_after)
    except DatabaseTimedOut as exc:  # a row held or a slow statement: the others go on
        failures.timed_out((queue, tenant), exc)
    except WarmTierUnavailable as exc:  # its master is down: the others go on
        failures.record((queue, tenant), exc)
    except redis.ResponseError as exc:  # its keys in a state no script expects
        failures.broken((queue, tenant), exc)
    except ValidationError as exc:  # its queue's stored settings refused
        failures.refused_settings((queue, tenant), exc)
    return True


def note_ready(ctx: Context, visited: Sequence[pairs.Pair], failed: list[str]) -> None:
    """Enter the visited pairs that hold ready tasks in their queues' ready-tenant indexes
    (logic/ready_tenants.py: the backstop that bounds the index's lag to one pass); one
    pipeline of counts per queue. Best-effort: the next pass tries again. A pair whose
    count is an error reply is left out, not its queue's other pairs; a queue whose index
    Valkey refuses (a key of the wrong type) is logged and listed in ``failed``, and the
    other queues and the pass go on (a reply for the whole server ends the pass)."""
    by_queue: dict[str, list[str]] = {}
    for queue, tenant in visited:
        by_queue.setdefault(queue, []).append(tenant)
    for queue, tenants in by_queue.items():
        try:
            counts = ctx.warm.ready_counts_each(queue, tenants)
        except Exception:  # (a master down)
            log.warning("counting the ready tasks of %r's pairs failed; the next pass enters "
                        "them", queue, exc_info=True)
            continue
        note_ready_tenants(ctx, "reaper", queue,
                           [t for t, n in zip(tenants, counts, strict=True) if n], failed)


def touch(ctx: Context, busy: Sequence[pairs.Pair]) -> None:
    """Record that these pairs were busy now (at most once per refresh interval each), so
    that a pair's idle time counts from its last work, not from its last registration. A
    pair whose registry row another transaction holds is left for the next pass: waiting
    for it would end the pass at the lock timeout, before the walk saved its cursor, and so
    every pass at the same slice while the row is held."""
    if not busy:
        return
    now = ctx.now()
    ctx.store.touch_pairs(busy, to_datetime(now),
                          to_datetime(now - pairs.refresh_seconds(ctx.settings)))


def purge_queues(ctx: Context, summary: ReaperSummary, budget: pairs.Budget,
                 config: ReaperConfig, cursors: dict[str, pairs.Pair]) -> None:
    """Retention: only the queues that have done or dead rows. A queue whose statement
    PostgreSQL cancels at the pass's timeout (or whose stored settings are refused) is
    listed in ``purge_failed`` and passed over, as a pair is in the lease walk: one held row
    (or one bad settings row) would otherwise end every pass there,
    before the other queues' retention and the pass's later parts (idle pairs, stalled
    groups, payloads, idempotency keys). Running out of time inside a queue ends its turn
    too: the next pass goes on after it, so a queue whose backlog outlasts a pass's budget
    never holds back the queues after it (it is purged on when the walk comes round)."""
    limit = config.slice_size
    stats = pairs.WalkStats()

    def fetch(after: pairs.Pair) -> list[pairs.Pair]:
        return [(queue, "") for queue in ctx.store.walk_finished_queues(after[0], limit)]

    for chunk in pairs.walk(ctx.store, PURGE_WALK, fetch, lambda item: item, budget, stats,
                            cursors, limit):
        for queue, _ in chunk:
            try:
                finished = purge(ctx, queue, summary, config, budget)
            except DatabaseTimedOut as exc:  # a row held: the other queues and parts go on
                log.warning("reaper: PostgreSQL timed out purging queue %r; it is tried "
                            "again next pass: %s", queue, exc.detail or exc.message,
                            extra={"job": "reaper", "queue": queue})
                summary.purge_failed.append(queue)
                finished = True
            except ValidationError as exc:  # its stored settings refused: for an operator
                log.error("reaper: the stored settings of queue %r are refused, so its "
                          "retention is passed over until they are fixed: %s", queue,
                          refused(exc), extra={"job": "reaper", "queue": queue})
                summary.purge_failed.append(queue)
                finished = True
            # out of time inside this queue still counts as its turn (as a pair's in
            # reap_pairs): the next pass goes on after it
            stats.items.append((queue, ""))
            if not finished or budget.spent:
                break
    summary.purge_queues = stats.visited


def forget_idle(ctx: Context, summary: ReaperSummary, forget_slice: int,
                cursors: dict[str, pairs.Pair]) -> None:
    """One slice of the registry per pass: pairs nobody registered or saw busy for the pair
    retention, with no row of any kind left, are deleted. The walk wraps round at the end.
    A pair whose registry row another transaction holds is kept until the walk comes round
    again: the others of its slice are forgotten, and the pass goes on."""
    after = cursors.get(FORGET_WALK, pairs.START)
    before = to_datetime(ctx.now() - ctx.settings.pair_retention_seconds)
    rows = ctx.store.forget_idle_pairs(after, forget_slice, before)
    gone = [(r.queue, r.tenant) for r in rows if r.forgotten]
    summary.forgotten.extend(f"{q}|{t}" for q, t in gone)
    ctx.pairs.forget_local(gone)
    for pair in gone:
        ctx.modes.pop(pair, None)
    ends = [r for r in rows if not r.forgotten]  # the slice's last pair, if it read any
    last = (ends[0].queue, ends[0].tenant) \
        if ends and ends[0].slice_rows == forget_slice else pairs.START
    if last != after:
        pairs.save_cursor(ctx.store, FORGET_WALK, last)


def sweep_lapses(ctx: Context, summary: ReaperSummary, lapse_slice: int) -> None:
    """Drop the lapsed replacements kept for pushes and the lapsed tombstones of the pairs
    the index of lapses says are due (lua/pair_sweep.lua, lua/lapse_index.lua), one slice
    per pass: a pair that went idle keeps neither past its lapse, and its tenant's share
    gets their room back.

    ==================================  ===================================================
    the pair after its sweep            its entry in the index
    ==================================  ===================================================
    holds nothing more                  taken out
    holds entries not lapsed yet        moved to the first one's lapse, at least
                                        LAPSE_SWEEP_EVERY_MS on
    holds more lapsed ones (the limit)  due again at once: the next pass goes on
    its master failed                   moved LAPSE_SWEEP_EVERY_MS on (``lapses_failed``)
    ==================================  ===================================================

    An entry is moved only while it is as the pass read it, so a pair noted meanwhile (a
    key made again) stays in. The index not answering is logged and left to the next pass."""
    now_ms = to_ms(ctx.now())
    later = now_ms + LAPSE_SWEEP_EVERY_MS
    try:
        due = ctx.warm.due_lapses(now_ms, lapse_slice)
        if not due:
            return
        replies = ctx.warm.sweep_pairs([(q, t) for q, t, _ in due], now_ms=now_ms)
        moves: list[tuple[str, str, int, int | None]] = []
        for (queue, tenant, seen), reply in zip(due, replies, strict=True):
            if isinstance(reply, Exception):
                log.warning("reaper: sweeping the lapsed entries of %r/%r failed; tried "
                            "again in %d s: %s", queue, tenant, LAPSE_SWEEP_EVERY_MS // 1000,
                            reply, extra={"job": "reaper", "queue": queue})
                summary.lapses_failed.append(f"{queue}|{tenant}")
                moves.append((queue, tenant, seen, later))
                continue
            summary.lapses_swept += 1
            if reply.more:
                moves.append((queue, tenant, seen, now_ms))
            elif reply.first_ms:
                moves.append((queue, tenant, seen, max(reply.first_ms, later)))
            else:
                moves.append((queue, tenant, seen, None))
        ctx.warm.reschedule_lapses(moves)
    except (WarmTierUnavailable, WarmTierFull):
        log.warning("reaper: the index of lapses did not answer; the next pass sweeps",
                    exc_info=True, extra={"job": "reaper"})


def sweep_groups(ctx: Context, summary: ReaperSummary, groups_slice: int,
                 cursors: dict[str, pairs.Pair]) -> None:
    """One slice of the groups with held tasks per pass: those with nothing active are
    released (a release that did not run). A group whose row another transaction holds is
    listed in ``groups_failed`` and passed over, not waited for: the slice's other groups
    are released. The cursor keeps (queue, "tenant|group"): a tenant's name has no ``|``.
    The walk wraps round at the end."""
    queue, joined = cursors.get(GROUPS_WALK, pairs.START)
    tenant, _, grp = joined.partition("|")
    swept = groups.sweep(ctx, (queue, tenant, grp), groups_slice)
    summary.groups_released += swept.released
    summary.groups_failed.extend(swept.failed)
    after = swept.after
    last = pairs.START if after is None else (after[0], f"{after[1]}|{after[2]}")
    if last != (queue, joined):
        pairs.save_cursor(ctx.store, GROUPS_WALK, last)


def expire_leases(ctx: Context, queue: str, tenant: str, summary: ReaperSummary,
                  config: ReaperConfig, budget: pairs.Budget | None = None) -> bool:
    """Expire the pair's leases past their deadline, in batches; returns False when the
    budget ran out with more batches to go (at least one batch is done)."""
    while True:
        expired = ctx.warm.expired(queue, tenant, now_ms=to_ms(ctx.now()),
                                   limit=config.expired_batch)
        if not expired:
            return True
        record_expired(ctx, queue, tenant, expired, summary)
        if len(expired) < config.expired_batch:
            return True
        if budget is not None and budget.spent:
            return False


def record_expired(ctx: Context, queue: str, tenant: str,
                   listed: Sequence[tuple[str, str, int]], summary: ReaperSummary) -> None:
    """Record the listed leases ``(id, token, attempt)`` as failed attempts, then drop
    them: those that reached their attempt's time limit fail as a nack would (``timeout``,
    retried after the queue's backoff: logic/time_limits.py), the others expired (back of
    the line at once). Another pass may have listed the same leases: the outcome statement
    only takes an attempt not recorded yet, so only one pass counts and re-queues each."""
    now = ctx.now()
    timed_out, expired = time_limits.split(ctx, queue, tenant, to_ms(now), listed)
    states: dict[str, str] = {}
    if expired:
        held = [leases.Verified(tenant, task_id, token, attempt, i, lease_member(task_id, token))
                for i, (task_id, token, attempt) in enumerate(expired)]
        states.update(leases.record_outcomes(
            ctx, queue, held,
            errors=[f"lease expired (attempt {v.attempt})" for v in held],
            retry_ats=[now] * len(held),
            deads=[False] * len(held),
        ))
    if timed_out:
        held = [leases.Verified(tenant, task_id, token, attempt, i, lease_member(task_id, token))
                for i, (task_id, token, attempt) in enumerate(timed_out)]
        policy = ctx.queue_settings.get(queue).backoff.policy()
        timed = leases.record_outcomes(
            ctx, queue, held,
            errors=[time_limits.error_text(v.attempt, None) for v in held],
            retry_ats=[now + policy.delay(v.attempt) for v in held],
            deads=[False] * len(held),
        )
        summary.timed_out += len(timed)
        states.update(timed)
    summary.expired += len(states)
    dead = sum(1 for s in states.values() if s == "dead")
    summary.dead += dead
    if dead:
        summary.dead_by_queue[queue] = summary.dead_by_queue.get(queue, 0) + dead
    summary.requeued += sum(1 for s in states.values() if s == "delayed")


def reconcile(ctx: Context, queue: str, tenant: str, summary: ReaperSummary,
              config: ReaperConfig, cursor: str, *,
              members_after: str | None = "") -> None:
    """Re-push warm rows that neither the ready set nor the lease set knows, one slice of
    the pair's warm rows per pass after ``cursor``, kept in the pair's meta (a pair of many
    leases is checked all through, a slice at a time; each Valkey call looks up its ids
    only). Rows Valkey lost are taken over first: ``missing`` raises the pair's fence to
    the cutoff, so a late push of an admission older than it writes nothing
    (``LatePush``), and ``take_over_for_restore`` commits their state_since as now, so no
    other pass takes them again within the grace. Then they are pushed (kind restore).
    ``members_after`` (None: the deployment has no batch rows): the cursor over the pair's
    batch rows, for ``reconcile_members``."""
    now = ctx.now()
    before = now - ctx.settings.reconcile_grace_seconds
    after = parse_cursor(cursor)
    suspects = ctx.store.warm_suspects(queue, tenant, to_datetime(before),
                                       config.reconcile_batch, after)
    # the next pass goes on after this slice, or starts over once a slice comes back short
    cursor = suspects[-1][1].isoformat() if len(suspects) >= config.reconcile_batch else ""
    ids = [str(i) for i, _ in suspects]
    lost = ctx.warm.missing(queue, tenant, ids, fence_ms=to_ms(before), cursor=cursor)
    if lost is None:  # leases of an older tierq not all indexed yet: a visit's slices first
        if not ctx.warm.index_leases(queue, tenant):
            return  # the next pass goes on
        lost = ctx.warm.missing(queue, tenant, ids, fence_ms=to_ms(before), cursor=cursor)
    if lost:
        restore(ctx, queue, tenant, lost, before, now, summary)
    if members_after is not None:  # (the pair's batch rows' members, when any exists)
        reconcile_members(ctx, queue, tenant, summary, config, before, now, members_after)


def restore(ctx: Context, queue: str, tenant: str, lost: Sequence[str], before: float,
            now: float, summary: ReaperSummary) -> None:
    """Take over the warm rows ``lost`` (older than ``before``) and push those Valkey still
    has not, in line order (kind restore)."""
    rows = ctx.store.take_over_for_restore(lost, to_datetime(before), to_datetime(now))
    still_lost = set(ctx.warm.missing(queue, tenant, [str(r.id) for r in rows],
                                      fence_ms=to_ms(before)) or ())
    items = sorted((admission.row_push_item(r) for r in rows if str(r.id) in still_lost),
                   key=lambda item: item[1])  # line order: a refusal refuses the rest
    if not items:
        return
    ticket = Ticket(token=f"restore-{uuid.uuid4().hex}", since_ms=to_ms(now))
    admission.dispatch(ctx, ticket, {(queue, tenant): items}, kind="restore")
    summary.restored += len(items)


def reconcile_members(ctx: Context, queue: str, tenant: str, summary: ReaperSummary,
                      config: ReaperConfig, before: float, now: float, cursor: str) -> None:
    """Re-push the members of the pair's batch rows (migration 0030) that neither the ready
    set nor the lease set knows, one slice of its batch rows made before ``before`` per
    pass, after ``cursor`` (a batch key kept in the pair's meta, ``members_after``; '':
    from the first), of about ``reconcile_batch`` places: those lost are moved out into
    ``tierq_tasks`` (warm since their batch was made, so older than the cutoff), then
    taken over and pushed as the warm rows are."""
    suspects, more = ctx.store.batch_suspects(
        queue, tenant, to_datetime(before), parse_batch_cursor(cursor) or FIRST_KEY,
        config.reconcile_batch, config.reconcile_batch)
    # (at most reconcile_batch members a pass: the batch rows up to that many, one at least)
    kept: list[tuple[str, list[int]]] = []
    members = 0
    for key, places in suspects:
        if kept and members + len(places) > config.reconcile_batch:
            break
        kept.append((key, places))
        members += len(places)
    # the next pass goes on after this slice, or starts over after the pair's last one
    after = kept[-1][0] if kept and (more or len(kept) < len(suspects)) else ""
    ids = [member_id(key, p) for key, places in kept for p in places]
    if not ids and after == cursor:
        return  # (nothing to ask, nothing to keep: no round trip)
    lost = ctx.warm.missing(queue, tenant, ids, fence_ms=to_ms(before), cursor=after,
                            cursor_field="members_after")
    if not lost:  # (None: its lease index not complete yet, as reconcile waits for)
        return
    batch_rows.move_out(ctx, queue, lost, [tenant] * len(lost))
    restore(ctx, queue, tenant, lost, before, now, summary)


def parse_batch_cursor(text: str) -> str:
    """The members' reconciler's cursor (a batch key); '' (the pair's first batch row) for
    text that is not a uuid."""
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return ""


def parse_cursor(text: str) -> datetime:
    """The reconciler's cursor (a state_since, ISO 8601); the start of the pair's rows for
    '' or text that is not one."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return NEVER


def purge(ctx: Context, queue: str, summary: ReaperSummary, config: ReaperConfig,
          budget: pairs.Budget | None = None) -> bool:
    """Delete the queue's done, cancelled and dead rows past its retention, in batches;
    returns False when the budget ran out with more to delete (at least one batch is
    done)."""
    retention = ctx.queue_settings.get(queue).retention_seconds
    before = to_datetime(ctx.now() - retention)
    for purge_before, dead in ((ctx.store.purge_done_before, False),
                               (ctx.store.purge_cancelled_before, False),
                               (ctx.store.purge_dead_before, True)):
        while True:
            deleted = purge_before(queue, before, config.purge_batch)
            summary.purged += max(0, deleted)
            if dead and deleted > 0:  # a dead child's wait goes with it (logic/flows.py)
                # (each look sees every deleted task's waits: the last one's count holds)
                summary.waits_kept = flows.forget_deleted_unless_held(ctx)[1]
            if deleted < config.purge_batch:
                break
            if budget is not None and budget.spent:
                return False
    return True


JOB = MaintenanceJob(
    name="reaper", run_pass=run_pass, config=ReaperConfig, schedule_setting="reaper_every",
    summary=ReaperSummary,
    description="expire leases, re-push what Valkey lost, purge past retention, forget idle "
                "pairs, sweep ended batch rows")
