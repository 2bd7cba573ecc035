"""Ack, nack, release and heartbeat. Tokens are checked in Valkey first; Postgres records the
outcome; only then are the leases dropped — so a store failure in between loses nothing and
the worker may simply retry. A release is the exception: it takes its leases first (see
``release``)."""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import repeat
from operator import is_not
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson

from tierq.core.ids import attempt_of_token, tenant_of_token
from tierq.core.lazy import lazy_module
from tierq.dal.command_limit import per_call
from tierq.dal.lua_calls import PROGRESS_NO_ROOM
from tierq.dal.store.rows import AckedRow
from tierq.dal.task_store import Conn
from tierq.dal.warm_tier import (
    AnswersAlong,
    PairDrop,
    ScriptCall,
    lease_member,
    reservation_of,
    token_groups,
)
from tierq.errors import WarmTierFull, WarmTierUnavailable
from tierq.logic import batch_rows, limits, tenant_budget, waits
from tierq.logic.context import Context, from_ms, to_datetime, to_ms
from tierq.models.base import UUIDS
from tierq.models.leases import ClaimedTask

if TYPE_CHECKING:
    from tierq.logic import ack_gathering, admission, flows, groups
    from tierq.models import lease_outcomes
    from tierq.models.lease_outcomes import (
        AckItem,
        AckResult,
        HeartbeatItem,
        HeartbeatResult,
        NackItem,
        NackResult,
        Rejection,
        ReleaseItem,
        ReleaseResult,
    )
else:
    # the outcomes' models: the claim function's requests claim, few give tasks back; the
    # pushes of a give-back, a flow's waiters and a group's next task: by their first use
    lease_outcomes = lazy_module("tierq.models.lease_outcomes")
    admission = lazy_module("tierq.logic.admission")
    ack_gathering = lazy_module("tierq.logic.ack_gathering")
    flows = lazy_module("tierq.logic.flows")
    groups = lazy_module("tierq.logic.groups")

log = logging.getLogger(__name__)

# The most a task's last_error holds, in UTF-8 bytes: whatever a nack (over HTTP, from the
# dispatcher) or an expired lease records is cut to it (clip_error).
MAX_ERROR_BYTES = 2048


def clip_error(text: str) -> str:
    """``text`` cut to its first MAX_ERROR_BYTES bytes of UTF-8, on a character boundary (a
    character that would straddle the cut is left out); a lone surrogate, which UTF-8 cannot
    hold and no store takes, becomes ``?`` whatever the text's length."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= MAX_ERROR_BYTES:
        return raw.decode("utf-8")
    return raw[:MAX_ERROR_BYTES].decode("utf-8", "ignore")


@dataclass(slots=True)
class Verified:
    tenant: str
    id: str
    token: str
    attempt: int
    index: int
    member: str  # the lease as the warm tier holds it (warm_tier.lease_member)


def by_tenant(items: Sequence[AckItem | NackItem | ReleaseItem | ClaimedTask],
              rejected: list[Rejection]) -> dict[str, list[Verified]]:
    """The leases the items name, by tenant (from their tokens), not checked yet; an item
    whose token names no tenant, or a task named twice, is added to ``rejected``."""
    out: dict[str, list[Verified]] = {}
    claimed = ClaimedTask
    # the ids as text in one call, in Rust (``str`` of a UUID costs about 1 µs each); an id
    # that is no UUID (a model built without validation) is passed through as it is
    texts = UUIDS.dump_python([item.id for item in items], mode="json", warnings=False)
    if set(map(type, texts)) - {str}:  # (an id of another type: its text as str makes it)
        texts = [t if type(t) is str else str(item.id)
                 for t, item in zip(texts, items, strict=True)]
    # a task named twice is looked for only when two ids are equal (the usual batch has none)
    seen: set[str] | None = None if len(set(texts)) == len(texts) else set()
    for i, (task_id, item) in enumerate(zip(texts, items, strict=True)):
        token = item.lease_token
        if isinstance(item, claimed):
            # a claimed task names its tenant and attempt; its token is still checked
            # against that tenant's leases, so a changed token only fails
            tenant: str | None = item.tenant
            attempt = item.attempt
        else:
            tenant = tenant_of_token(token)
            attempt = attempt_of_token(token) or 0
        if tenant is None or (seen is not None and task_id in seen):
            rejected.append(lease_outcomes.Rejection(id=item.id, reason="not_owner"))
            continue
        if seen is not None:
            seen.add(task_id)
        # (the member as warm_tier.lease_member writes it, made here: a call less per item)
        verified = Verified(tenant, task_id, token, attempt, i, f"{task_id}|{token}")
        entries = out.get(tenant)
        if entries is None:
            out[tenant] = [verified]
        else:
            entries.append(verified)
    return out


def verify(ctx: Context, queue: str, items: Sequence[AckItem | NackItem | ClaimedTask],
           rejected: list[Rejection],
           progress: dict[str, tuple[int, str]] | None = None,
           tenants: dict[str, list[Verified]] | None = None) -> list[Verified]:
    """Which items hold a valid lease; the others are added to ``rejected`` (not_owner).
    Each valid lease is marked as ending in the same step (lua/lease_check.lua): a release
    of it takes nothing, so an ack or a nack and a release of one lease never both happen.
    ``progress``: filled with the progress the leases keep (``record_progress``), read in
    the same round trip. ``tenants``: the items' ``by_tenant``, made already (its
    rejections in ``rejected``)."""
    now_ms = to_ms(ctx.now())
    valid: list[Verified] = []
    if tenants is None:
        tenants = by_tenant(items, rejected)
    # (every tenant's check in one pipeline; with progress, a call per tenant)
    held_by = ctx.warm.verify_tenants(
        queue, {tenant: [v.member for v in entries] for tenant, entries in tenants.items()},
        now_ms=now_ms) if progress is None else {}
    for tenant, entries in tenants.items():
        if progress is None:
            held = held_by[tenant]
        else:
            held, kept = ctx.warm.verify_with_progress(
                queue, tenant, now_ms=now_ms, leases=[(v.id, v.token) for v in entries])
            progress.update(kept)
        if len(held) == len(entries) and all(held):  # (the usual case: every lease held)
            valid += entries
            continue
        for v, ok in zip(entries, held, strict=True):
            if ok:
                valid.append(v)
            else:
                rejected.append(lease_outcomes.Rejection(id=items[v.index].id, reason="not_owner"))
    return valid


def drop_leases(ctx: Context, queue: str, verified: Sequence[Verified],
                acked: set[str] | frozenset[str] = frozenset(),
                ended: Sequence[tuple[str, str, int]] = (), state: str = "done",
                pushes: admission.Pending | None = None,
                answers: AnswersAlong | None = None) -> None:
    """Drop these leases, every pair's in one pipeline (``WarmTier.release_pairs``: one
    round trip on a single server, one per master on a cluster). ``acked``: ids of those
    tasks (among ``verified``'s) just acked, counted with the drop. ``ended``: tasks
    (tenant, id, attempt) that ended in ``state``, whose waiters are told (logic/waits.py)
    in the round trip of the drops, after their pair's. ``pushes``: tasks made ready in a
    transaction committed already (groups released by the ack), each pair's push sent last
    in the round trip of the drops where it can be (``admission.push_along``);
    ``admission.finish`` reads their outcome afterwards. ``answers``: a committer's answers
    to the acks it committed and its pass, last in the same round trip
    (logic/ack_gathering.py)."""
    by_tenant: dict[str, list[str]] = {}
    for v in verified:
        members = by_tenant.get(v.tenant)
        if members is None:
            by_tenant[v.tenant] = [v.member]
        else:
            members.append(v.member)
    # of each tenant's, those acked (every one of them when all were)
    counted: dict[str, int]
    if len(acked) == len(verified):
        counted = {tenant: len(members) for tenant, members in by_tenant.items()}
    else:
        counted = defaultdict(int)
        for v in verified:
            if v.id in acked:
                counted[v.tenant] += 1
    marks: dict[str, list[tuple[str, str, int]]] = {}
    for tenant, task_id, attempt in ended:
        mark = (task_id, state, attempt)
        pair_marks = marks.get(tenant)
        if pair_marks is None:
            marks[tenant] = [mark]
        else:
            pair_marks.append(mark)
    calls = {tenant: waits.marker_call(queue, tenant, items)
             for tenant, items in marks.items() if tenant in by_tenant}
    # then their queue-wide reservations (after every drop): a reservation may outlive its
    # lease, never the reverse, so max_leased is never exceeded
    then: ScriptCall | None = None
    apart = False  # too many to give back in one call: after the drops, in several
    if verified and ctx.queue_settings.get(queue).max_leased:
        groups = token_groups([v.token for v in verified])
        apart = len(groups) > per_call(3 + 2)
        if not apart:
            then = ctx.warm.return_capacity_call(queue, limits.LEASES_POOL, groups)
    ctx.warm.release_pairs(queue, [
        PairDrop(tenant, members, counted.get(tenant, 0), calls.get(tenant),
                 None if pushes is None else admission.push_along(ctx, pushes, (queue, tenant)))
        for tenant, members in by_tenant.items()], then=then, answers=answers)
    unsent = {tenant for tenant in marks if calls.get(tenant) is None}
    if unsent:  # (their markers: apart, after the drops)
        waits.finished(ctx, queue, [(tenant, task_id, attempt)
                                    for tenant, task_id, attempt in ended
                                    if tenant in unsent], state)
    if apart:
        free_reservations(ctx, queue, [v.token for v in verified])


def free_reservations(ctx: Context, queue: str, tokens: Sequence[str], *,
                      conn: Conn | None = None) -> None:
    """Give back the queue-wide reservations (max_leased, logic/limits.py) of leases that
    ended. Only while the queue has max_leased: leases claimed without it hold none (and
    those of a limit cleared meanwhile end at their deadline). ``conn``: the caller's
    transaction's, where a settings cache miss reads the queue's row."""
    if tokens and ctx.queue_settings.get(queue, conn=conn).max_leased:
        ctx.warm.return_capacity(queue, limits.LEASES_POOL, tokens, tokens=True)


def ack(ctx: Context, queue: str, items: Sequence[AckItem | ClaimedTask]) -> AckResult:
    """Acknowledge leased tasks: deleted (or kept as done with their result) in Postgres in
    one statement, then their leases dropped. A claimed task passed as it is has no result.
    An ack that committed others' deletes with its own (logic/ack_gathering.py) answers
    them with its drop, or after whatever stopped it before. Within
    ``WarmTier.holding_drop`` (an ack whose drop rides with a claim, logic/ack_claim.py) it
    commits alone: a committer's answers go with its drop, which is then not held."""
    joined: list[ack_gathering.Joined] = []
    try:
        return _ack(ctx, queue, items, joined)
    finally:
        if joined and joined[0].along is not None:
            ack_gathering.after_drop(ctx, queue, joined[0])


def _ack(ctx: Context, queue: str, items: Sequence[AckItem | ClaimedTask],
         gathered: list[ack_gathering.Joined]) -> AckResult:
    """``ack``; ``gathered`` gets the ack's place among the pair's acks committed together,
    when it has one."""
    result = lease_outcomes.AckResult()
    # each item's result, read once (a ClaimedTask has none: asking pydantic for a missing
    # attribute is slow); None when no item can have one (claimed tasks acked as they are)
    ack_item = lease_outcomes.AckItem
    results = [i.result if isinstance(i, ack_item) else None for i in items] \
        if any(map(isinstance, items, repeat(ack_item))) else None
    # (a task kept with its result keeps its last progress: read with the check)
    kept: dict[str, tuple[int, str]] | None = \
        {} if results is not None and any(map(is_not, results, repeat(None))) else None
    relaxed = not ctx.settings.ack_synchronous_commit
    # (the items split by tenant once, their refusals recorded; one tenant's tasks without
    # results checked and joined to the pair's acks committed together in one call,
    # logic/ack_gathering.py)
    tenants = by_tenant(items, result.rejected)
    joined = ack_gathering.check_and_join(ctx, queue, items, result.rejected, tenants) \
        if len(tenants) == 1 and kept is None and ctx.settings.gathers_acks \
        and not relaxed and not ctx.warm.holding() else None
    if joined is None:
        valid = verify(ctx, queue, items, result.rejected, kept, tenants)
    else:
        gathered.append(joined)
        valid = joined.valid
    if not valid:
        result.cancelled = cancelled_of(ctx, queue, result.rejected, items)
        return result
    if kept is None or results is None:  # (no result among them: every task is deleted)
        plain = valid
        keep: list[tuple[Verified, Any]] = []
    else:
        plain = []
        keep = []
        for v in valid:
            value = results[v.index]
            if value is None:
                plain.append(v)
            else:
                keep.append((v, value))
    if keep:  # (kept done: its last progress with it; a plain ack deletes the row)
        record_progress(ctx, queue, [v for v, _ in keep], kept)
    done: set[str] = set()
    finished: list[AckedRow] = []
    if plain:
        attempts = [v.attempt for v in plain]
        ids = [v.id for v in plain]
        owners = [v.tenant for v in plain]  # (its lease's tenant: the statements check it)
        if joined is not None:  # (committed with the pair's acks that met it)
            finished += ack_gathering.delete_joined(ctx, queue, joined)
        else:  # (batch members ended, other rows deleted: logic/batch_rows.py)
            finished += batch_rows.finish_plain(ctx, queue, ids, owners, attempts,
                                                relaxed=relaxed)
    if keep:
        finished += ctx.store.ack_keep(
            queue, to_datetime(ctx.now()), [v.id for v, _ in keep],
            [v.tenant for v, _ in keep], [orjson.dumps(value).decode() for _, value in keep],
            [v.attempt for v, _ in keep], relaxed=relaxed)
    done.update([r.id for r in finished])
    if joined is not None and (len(done) < len(valid) or any([r.grp for r in finished])):
        # (PostgreSQL work follows before the drop: the acks it committed are answered now,
        # when it committed others')
        ack_gathering.answer_now(ctx, joined)
    if len(done) < len(valid):  # tasks that others wait on are kept and settled (flows)
        left = [v for v in valid if v.id not in done]
        waited = flows.ack_waited(
            ctx, queue, [v.id for v in left], [v.tenant for v in left],
            [None] * len(left) if results is None else [results[v.index] for v in left],
            [v.attempt for v in left])
        done.update(waited)
        tenant_of = {v.id: v.tenant for v in left}
        # (their groups, read by id)
        groups.after_finish_ids(ctx, queue, [(tenant_of[i], i) for i in waited])
    freed: groups.Freed | None = None
    if any([r.grp is not None for r in finished]):  # the next tasks of their groups go on
        owner_of = {v.id: v.tenant for v in valid}
        freed = groups.release_after_finish(ctx, queue, [(owner_of[r.id], r.grp)
                                                         for r in finished
                                                         if r.grp is not None])
    every = len(done) == len(valid)  # (the usual ack: each of them; done holds valid's ids)
    # (a committer's answers and pass ride with its drop: logic/ack_gathering.py)
    along = None if joined is None or joined.along is None or joined.along.sent \
        else joined.along
    try:  # (their push in the round trip of their pair's drop)
        drop_leases(ctx, queue, valid, acked=done,
                    ended=[(v.tenant, v.id, v.attempt) for v in valid
                           if every or v.id in done],
                    pushes=None if freed is None else freed.pending, answers=along)
    finally:
        groups.push_released(ctx, freed)
    if every:
        result.acked.extend([items[v.index].id for v in valid])
    else:
        acked = result.acked
        for v in valid:
            if v.id in done:
                acked.append(items[v.index].id)
            else:  # cancelled or rescheduled while it ran
                result.rejected.append(lease_outcomes.Rejection(
                    id=items[v.index].id, reason="not_found"))
    result.cancelled = cancelled_of(ctx, queue, result.rejected, items)
    return result


def cancelled_of(ctx: Context, queue: str, rejected: Sequence[Rejection],
                 items: Sequence[AckItem | NackItem | HeartbeatItem | ClaimedTask],
                 ) -> list[UUID]:
    """Of the rejected items, the tasks that were cancelled (logic/tasks.cancel): the
    ``cancelled`` list of an ack's, nack's or heartbeat's answer, beside ``rejected`` (a
    client that knows only the reasons acts as for a lost lease). A cancel drops the lease,
    so this is asked only when a lease was refused: one statement by primary key. Only a
    task of the tenant the item names (its token's, a claimed task's own) is reported: a
    caller that sends another tenant's task id with a token of its own learns nothing."""
    if not rejected:
        return []
    refused = {str(r.id) for r in rejected}
    pairs: dict[tuple[str, str], None] = {}
    for item in items:
        task_id = str(item.id)
        tenant = item.tenant if isinstance(item, ClaimedTask) \
            else tenant_of_token(item.lease_token)
        if task_id in refused and tenant is not None:
            pairs[(task_id, tenant)] = None
    found = ctx.store.cancelled_among(queue, list(pairs))
    return [UUID(task_id) for task_id in dict.fromkeys(str(r.id) for r in rejected)
            if task_id in found]


def nack(ctx: Context, queue: str, items: Sequence[NackItem]) -> NackResult:
    result = lease_outcomes.NackResult()
    kept: dict[str, tuple[int, str]] = {}  # (the leases' progress, read with the check)
    valid = verify(ctx, queue, items, result.rejected, kept)
    if not valid:
        result.cancelled = cancelled_of(ctx, queue, result.rejected, items)
        return result
    now = ctx.now()
    policy = ctx.queue_settings.get(queue).backoff.policy()
    retry_ats = []
    for v in valid:
        item = items[v.index]
        delay = item.retry_in_seconds
        retry_ats.append(now + (policy.delay(v.attempt) if delay is None else delay))
    outcomes = record_outcomes(
        ctx, queue, valid,
        errors=[items[v.index].error for v in valid],
        retry_ats=retry_ats,
        deads=[items[v.index].dead for v in valid],
        progress=kept,
    )
    for v in valid:
        state = outcomes.get(v.id)
        if state == "dead":
            result.dead.append(UUID(v.id))
        elif state == "delayed":
            result.retried.append(UUID(v.id))
        else:
            result.rejected.append(lease_outcomes.Rejection(id=UUID(v.id), reason="not_found"))
    result.cancelled = cancelled_of(ctx, queue, result.rejected, items)
    return result


def release(ctx: Context, queue: str,
            items: Sequence[ReleaseItem | ClaimedTask]) -> ReleaseResult:
    """Give leased tasks back unfinished: each returns to its old place in line (the front
    of its priority, as if never claimed), ready at once, and no attempt is counted, so a
    task given back at its last attempt is not dead-lettered. For work a worker took but
    did not start (shutting down, or claimed more than it could run); a task that failed
    is nacked instead.

    The leases are taken from Valkey first, atomically with their deadline check, and only
    leases nobody else is ending are taken:

    | the lease                             | the release | because                          |
    | ------------------------------------- | ----------- | -------------------------------- |
    | held, deadline ahead                  | takes it    |                                  |
    | listed by the reaper (deadline 0)     | not_owner   | its expiry re-queues the task    |
    | checked by an ack or a nack (marked)  | not_owner   | an acked task would run again    |

    A lease whose ack or nack failed past its check stays marked: a retry of the ack or
    nack ends it, or its deadline does (an attempt counted).

    Each task taken keeps a release mark in its pair's lease index until it is pushed again,
    so the reconciler leaves it to this release for its grace period (lua/lease_keys.lua).
    If Postgres then fails, the row is still warm and out of Valkey: the reconciler puts it
    back in line after its grace period, and the caller's retry is answered not_owner."""
    result = lease_outcomes.ReleaseResult()
    now = ctx.now()
    taken: list[Verified] = []
    for tenant, group in by_tenant(items, result.rejected).items():
        dropped = ctx.warm.take_back(queue, tenant, now_ms=to_ms(now),
                                     members=[v.member for v in group])
        for v in group:
            if v.member in dropped:
                taken.append(v)
            else:  # not held, expired, or listed by the reaper
                result.rejected.append(lease_outcomes.Rejection(
                    id=items[v.index].id, reason="not_owner"))
    if not taken:
        return result
    free_reservations(ctx, queue, [v.token for v in taken])
    rows = ctx.store.release_leased(queue, to_datetime(now), [v.id for v in taken],
                                    [v.tenant for v in taken], [v.attempt for v in taken])
    # Back in line as the oldest work of their line (they were at its front when claimed),
    # like rows the reconciler restores: into the warm set while it has room, whatever the
    # mode; what it refuses goes to the front of the cold line (its seq is kept).
    by_pair: dict[tuple[str, str], list[admission.PushItem]] = defaultdict(list)
    for row in rows:
        by_pair[(queue, row.tenant)].append(admission.row_push_item(row))
    # (its leases were taken back as of `now`, and their rows written with it)
    ticket = admission.Ticket(token=f"release-{uuid.uuid4().hex}", since_ms=to_ms(now))
    admission.dispatch(ctx, ticket, by_pair, kind="restore")
    found = {str(r.id) for r in rows}
    for v in taken:
        if v.id in found:
            result.released.append(UUID(v.id))
        else:  # cancelled (or its attempt recorded) while it was leased
            result.rejected.append(lease_outcomes.Rejection(
                id=items[v.index].id, reason="not_found"))
    return result


def record_outcomes(ctx: Context, queue: str, leases: Sequence[Verified], *,
                    errors: Sequence[str], retry_ats: Sequence[float],
                    deads: Sequence[bool],
                    progress: dict[str, tuple[int, str]] | None = None) -> dict[str, str]:
    """Record failed attempts (nack, lease expiry): dead at max_attempts or when asked,
    otherwise delayed until the retry time. Then drop the leases, and only then make the
    retries due now ready (the back of the line). Returns id -> 'dead' | 'delayed' for the
    rows found. Every failed attempt is recorded here, so here each error is cut to the
    most ``last_error`` holds (clip_error). ``progress``: the leases' progress, when the
    caller read it already (``verify``); else it is read here (``record_progress``)."""
    now = ctx.now()
    clipped = [clip_error(e) for e in errors]
    record_progress(ctx, queue, leases, progress)
    rows = ctx.store.lease_outcomes(
        queue, to_datetime(now), [v.id for v in leases], [v.tenant for v in leases],
        [v.attempt for v in leases], clipped, [to_datetime(t) for t in retry_ats], list(deads))
    if len(rows) < len(leases):  # tasks that others wait on: with their settlement (flows)
        found = {str(r.id) for r in rows}
        left = [i for i, v in enumerate(leases) if v.id not in found]
        rows = rows + flows.record_waited(
            ctx, queue, [leases[i].id for i in left], [leases[i].tenant for i in left],
            [leases[i].attempt for i in left],
            [clipped[i] for i in left], [to_datetime(retry_ats[i]) for i in left],
            [deads[i] for i in left])
    attempts = {v.id: v.attempt for v in leases}
    drop_leases(ctx, queue, leases, ended=[(r.tenant, str(r.id), attempts.get(str(r.id), 0))
                                           for r in rows if r.state == "dead"], state="dead")
    due = [admission.Target(str(r.id), queue, r.tenant) for r in rows
           if r.state == "delayed" and r.run_at.timestamp() <= now]
    admission.ready_now(ctx, due)
    # the dead leave their groups: the next tasks go on (a retry stays its group's head)
    groups.after_finish(ctx, queue, [(r.tenant, r.grp) for r in rows
                                     if r.state == "dead" and r.grp is not None])
    return {str(r.id): r.state for r in rows}


def heartbeat(ctx: Context, queue: str, items: Sequence[HeartbeatItem]) -> HeartbeatResult:
    result = lease_outcomes.HeartbeatResult()
    qs = ctx.queue_settings.get(queue)
    by_tenant: dict[str, list[HeartbeatItem]] = defaultdict(list)
    for item in items:
        tenant = tenant_of_token(item.lease_token)
        if tenant is None:
            result.rejected.append(lease_outcomes.Rejection(id=item.id, reason="not_owner"))
        else:
            by_tenant[tenant].append(item)
    now_ms = to_ms(ctx.now())
    for tenant, group in by_tenant.items():
        extend_ms = [(i.extend_seconds or qs.lease_seconds) * 1000 for i in group]
        # the leases held now: only theirs are extended and, should the lease end before
        # its extension, given back (a token sent with another task's id names a lease
        # that still runs: its reservation must stay)
        owned = [True] * len(group)
        if qs.max_leased:
            owned = ctx.warm.verify(queue, tenant, now_ms=now_ms, members=[
                lease_member(str(i.id), i.lease_token) for i in group])
            # the reservations first (never shortened): a lease never outlives its own
            ctx.warm.extend_capacity(queue, limits.LEASES_POOL, now_ms=now_ms, deadlines=[
                (reservation_of(i.lease_token), now_ms + ms)
                for i, ms, mine in zip(group, extend_ms, owned, strict=True) if mine])
        deadlines = ctx.warm.extend(queue, tenant, now_ms=now_ms, leases=[
            (str(i.id), i.lease_token, ms) for i, ms in zip(group, extend_ms, strict=True)
        ])
        keep_progress(ctx, queue, tenant, now_ms, group, deadlines)
        lost: list[str] = []
        for item, deadline, mine in zip(group, deadlines, owned, strict=True):
            if deadline:
                result.extended.append(lease_outcomes.LeaseExtended(id=item.id,
                                                     lease_expires_at=from_ms(deadline)))
            else:
                result.rejected.append(lease_outcomes.Rejection(id=item.id, reason="not_owner"))
                if mine:
                    lost.append(item.lease_token)
        if lost:
            # extended above for a lease that had ended: give it back at once
            free_reservations(ctx, queue, lost)
    result.cancelled = cancelled_of(ctx, queue, result.rejected, items)
    return result


def keep_progress(ctx: Context, queue: str, tenant: str, now_ms: int,
                  items: Sequence[HeartbeatItem], deadlines: Sequence[int]) -> None:
    """Keep the progress the heartbeat's items carry with their leases, those just extended
    (lua/lease_progress.lua), within the tenant's share of the warm tier as a push is
    (logic/tenant_budget.py): asked first, then, short, with a grant from the tenant's
    ledger. Progress that does not fit, or comes at Valkey's maximum memory, is dropped,
    logged: the extension stands, and the next heartbeat carries the handler's next
    progress."""
    carried = [(lease_member(str(item.id), item.lease_token),
                orjson.dumps(item.progress).decode())
               for item, deadline in zip(items, deadlines, strict=True)
               if deadline and item.progress is not None]
    if not carried:
        return
    share, limit = tenant_budget.share(ctx, queue, tenant)
    try:
        codes, short = ctx.warm.keep_progress(queue, tenant, now_ms=now_ms, items=carried,
                                              share=share)
        if short:
            asked = [item for item, code in zip(carried, codes, strict=True) if code is None]
            granted = tenant_budget.grant(ctx, queue, tenant, short, limit)
            try:
                codes, _ = ctx.warm.keep_progress(
                    queue, tenant, now_ms=now_ms, items=asked,
                    share=replace(share, bound="strict", grant=granted))
            except WarmTierFull:
                # refused at its first write (the allotment's): the grant is the ledger's
                # again (not after WarmTierUnavailable, when it may have run: an entry left
                # high counts against the tenant only, until a reclaim)
                if granted:
                    tenant_budget.cancel(ctx, queue, tenant, granted)
                raise
        refused = sum(1 for code in codes if code == PROGRESS_NO_ROOM)
        if refused:
            log.warning("progress of %d lease(s) of %r/%r not kept: its tenant's share of "
                        "the warm tier is full", refused, queue, tenant)
    except (WarmTierFull, WarmTierUnavailable) as exc:
        # (the extensions stand: progress is the lease's extra, never its heartbeat's error)
        log.warning("progress of %d lease(s) of %r/%r not kept: %s", len(carried), queue,
                    tenant, "the warm tier is full" if isinstance(exc, WarmTierFull)
                    else "the warm tier did not answer")


def progress_of(ctx: Context, queue: str,
                leases: Sequence[Verified]) -> dict[str, tuple[int, str]]:
    """The progress kept with these leases: id -> (when it came, ms; its JSON text)."""
    by_pair: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for v in leases:
        by_pair[v.tenant].append((v.id, v.token))
    out: dict[str, tuple[int, str]] = {}
    for tenant, pairs in by_pair.items():
        out.update(ctx.warm.progress_of(queue, tenant, pairs))
    return out


def record_progress(ctx: Context, queue: str, leases: Sequence[Verified],
                    kept: dict[str, tuple[int, str]] | None = None) -> None:
    """Write the progress kept with these leases (``kept``, when read already: id -> (ms,
    JSON text)) to their tasks' rows (the attempt each names, while the row is still leased
    by it), before the attempt's outcome is recorded and the lease, with its progress,
    dropped: the last progress outlives the lease."""
    if kept is None:
        kept = progress_of(ctx, queue, leases)
    else:
        mine = {v.id for v in leases}
        kept = {i: p for i, p in kept.items() if i in mine}
    if not kept:
        return
    attempts = {v.id: v.attempt for v in leases}
    tenants = {v.id: v.tenant for v in leases}
    ids = list(kept)
    ctx.store.write_progress(queue, ids, [tenants[i] for i in ids], [attempts[i] for i in ids],
                             [kept[i][1] for i in ids], [from_ms(kept[i][0]) for i in ids])
