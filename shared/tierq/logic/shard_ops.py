"""The operations a deployment runs in one part per shard and answers once: enqueues (the
tasks grouped by their pairs' homes), dead-letter replays and purges (by the ids' tags),
each keyed where it takes an idempotency key (tierq.logic.idempotency). Both engines call
these with themselves (``tierq.contract.Deployment``): one database is the deployment of
one shard, so the grouping is written once.

| operation | its parts | with a key, a part begun by an earlier owner |
| --- | --- | --- |
| :func:`enqueue` | the homes of the tasks' pairs | resumes from its record |
| :func:`replay_dead` | where the ids' tags say; all: every shard | answers what it committed |
| :func:`purge_dead` | as :func:`replay_dead` | (no key: a repeat deletes nothing more) |
| :func:`flow` | the one shard of its pairs | answers what it committed |

Each part's record is written in the transactions that write its tasks (enqueue: the
insert's; replay: each batch's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from tierq.dal.task_store import Conn
from tierq.logic import dlq
from tierq.logic import enqueue as enqueue_logic
from tierq.logic import flows as flows_logic
from tierq.logic.context import Context
from tierq.logic.idempotency import Caller, KeyedCall, PgClaim, keyed_call, once_per_shard
from tierq.models.envelopes import PurgeResult, ReplayResult
from tierq.models.flows import FlowIn, FlowResult
from tierq.models.tasks import Enqueued, EnqueueOutcome, TaskIn

if TYPE_CHECKING:
    from tierq.contract import Deployment


def enqueue(deployment: Deployment, queue: str, tasks: Sequence[TaskIn], tenant: str | None,
            call: KeyedCall | None) -> Enqueued:
    """Enqueue ``tasks`` (``tenant``: the default of those that name none) on their pairs'
    homes, once per key: the outcomes in call order."""
    groups = deployment.shards_of_tasks(queue, tasks, tenant)
    if call is None and len(groups) == 1:
        (shard, _), = groups.items()
        return Enqueued(deployment.on_shard(shard, lambda engine: enqueue_logic.enqueue(
            engine.ctx, queue, list(tasks), tenant)))

    def work(shard: str, claim: PgClaim | None) -> list[EnqueueOutcome]:
        part = [tasks[i] for i in groups[shard]]
        if claim is None:
            return deployment.on_shard(shard, lambda engine: enqueue_logic.enqueue(
                engine.ctx, queue, part, tenant))
        return deployment.on_shard(shard, lambda engine: enqueue_once(
            engine.ctx, queue, part, tenant, claim))

    parts, replayed = once_per_shard(deployment, call, list(groups), work,
                                     load=load_outcomes, dump=dump_outcomes)
    ordered: list[EnqueueOutcome | None] = [None] * len(tasks)
    for shard, part in parts.items():
        for index, outcome in zip(groups[shard], part, strict=True):
            ordered[index] = outcome
    answer = Enqueued(o for o in ordered if o is not None)
    answer.idempotent_replay = replayed
    return answer


def dump_outcomes(outcomes: list[EnqueueOutcome]) -> Any:
    """A part's outcomes as their record keeps them: ``{"tasks": [outcome, ...]}``."""
    return {"tasks": [o.model_dump(mode="json") for o in outcomes]}


def load_outcomes(kept: Any) -> list[EnqueueOutcome]:
    """The outcomes a record keeps: ``{"tasks": [...]}``, or one outcome alone (as a
    single-task HTTP request's record on one database held it)."""
    if isinstance(kept, dict) and "tasks" in kept:
        return [EnqueueOutcome.model_validate(o) for o in kept["tasks"]]
    return [EnqueueOutcome.model_validate(kept)]


def enqueue_once(ctx: Context, queue: str, tasks: list[TaskIn], tenant: str | None,
                 claim: PgClaim) -> list[EnqueueOutcome]:
    """Enqueue under an idempotency claim: each transaction that inserts tasks records their
    outcomes under the key, and the tasks an earlier owner of the key committed (it died
    before it answered) are not enqueued again."""
    earlier = (claim.committed or {}).get("outcomes") or {}
    recorded: dict[int, dict[str, Any]] = {int(i): o for i, o in earlier.items()}
    todo = [i for i in range(len(tasks)) if i not in recorded]

    def record(conn: Conn, round_: dict[int, dict[str, Any] | None]) -> None:
        merge_round(recorded, todo, round_)
        claim.record(conn, {"outcomes": {str(i): o for i, o in recorded.items()}})

    outcomes: dict[int, EnqueueOutcome] = {
        i: EnqueueOutcome.model_validate(o) for i, o in recorded.items()}
    if todo:
        fresh = enqueue_logic.enqueue(ctx, queue, [tasks[i] for i in todo], tenant,
                                      record=record)
        outcomes.update(zip(todo, fresh, strict=True))
    return [outcomes[i] for i in range(len(tasks))]


def merge_round(recorded: dict[int, dict[str, Any]], todo: Sequence[int],
                round_: dict[int, dict[str, Any] | None]) -> None:
    """Fold one insert round's report (``enqueue.RoundRecorder``: by index into ``todo``,
    an outcome or None) into the outcomes recorded so far: a task not created loses what an
    earlier, rolled-back run of its round said, so a record never names a task that is not
    in the database."""
    for i, outcome in round_.items():
        if outcome is None:
            recorded.pop(todo[i], None)
        else:
            recorded[todo[i]] = outcome


def enqueue_body(tasks: Sequence[TaskIn], tenant: str | None) -> Any:
    """What an enqueue asks, for its key's fingerprint when the caller gives none."""
    return {"tasks": [t.model_dump(mode="json") for t in tasks], "tenant": tenant}


def replay_dead(deployment: Deployment, queue: str, *, ids: Sequence[UUID | str],
                all_dead: bool, tenant: str | None, max_items: int | None,
                seconds: float | None, idempotency_key: str | None, caller: Caller | None,
                body_fingerprint: bytes | None) -> ReplayResult:
    """Make dead letters ready again on the shards that hold them, once per key, each
    shard's part bounded by ``max_items`` and its share of ``seconds`` (None: unbounded)."""
    wanted = [UUID(str(i)) for i in ids]
    call = keyed_call("dlq_replay", queue, idempotency_key, caller, body_fingerprint,
                      lambda: {"ids": [str(i) for i in wanted], "all": all_dead,
                               "tenant": tenant, "max_items": max_items, "seconds": seconds})
    where = deployment.shards_for_selection(queue, tenant, wanted)
    share = None if seconds is None else seconds / max(1, len(where))

    def work(shard: str, claim: PgClaim | None) -> ReplayResult:
        if claim is not None and claim.committed is not None:
            # an earlier call with this key replayed these, then died before it answered
            return ReplayResult.model_validate(claim.committed)

        def record(conn: Conn, part: dlq.Slice) -> None:
            if claim is not None:
                claim.record(conn, replay_result(part).model_dump(mode="json"))

        part = deployment.on_shard(shard, lambda engine: dlq.replay_slice(
            engine.ctx, queue, ids=where[shard], all_dead=all_dead, tenant=tenant,
            max_items=max_items, seconds=share, record=None if claim is None else record))
        return replay_result(part)

    parts, replayed = once_per_shard(
        deployment, call, list(where), work, load=ReplayResult.model_validate,
        dump=lambda part: part.model_dump(mode="json"))
    if len(parts) == 1:
        answer = next(iter(parts.values()))
    else:
        done = [i for part in parts.values() for i in part.replayed]
        answer = ReplayResult(replayed=done, skipped=not_done(wanted, parts, done),
                              more=any(part.more for part in parts.values()))
    return answer.as_replay() if replayed else answer


def replay_result(part: dlq.Slice) -> ReplayResult:
    return ReplayResult(replayed=part.done, skipped=part.skipped, more=part.more)


def not_done(ids: Sequence[UUID], parts: dict[str, ReplayResult],
             done: list[UUID]) -> list[UUID]:
    """The skipped ids of the parts (an id asked of every shard is skipped by those that do
    not hold it): those no shard replayed, once each, in the call's order; with no ids
    (all of them), the parts' own skips."""
    finished = set(done)
    if not ids:
        return [i for part in parts.values() for i in part.skipped if i not in finished]
    return [i for i in dict.fromkeys(ids) if i not in finished]


def purge_dead(deployment: Deployment, queue: str, *, ids: Sequence[UUID | str],
               all_dead: bool, tenant: str | None, max_items: int | None,
               seconds: float | None) -> PurgeResult:
    """Delete dead letters on the shards that hold them, shard after shard, each part
    bounded like :func:`replay_dead`'s."""
    where = deployment.shards_for_selection(queue, tenant, [UUID(str(i)) for i in ids])
    share = None if seconds is None else seconds / max(1, len(where))
    purged: list[UUID] = []
    more = False
    for shard, part_ids in where.items():
        part = deployment.on_shard(shard, lambda engine, part_ids=part_ids: dlq.purge_slice(  # type: ignore[misc]
            engine.ctx, queue, ids=part_ids, all_dead=all_dead, tenant=tenant,
            max_items=max_items, seconds=share))
        purged.extend(part.done)
        more = more or part.more
    return PurgeResult(purged=purged, more=more)


# the "queue" part of a flow's idempotency record: a flow spans queues
FLOW_SCOPE = "-"


def flow(deployment: Deployment, model: FlowIn, tenant: str | None,
         call: KeyedCall | None) -> FlowResult:
    """Create ``model``'s tasks on the one shard of its pairs, once per key: the key's
    record is written in the flow's own transaction there."""
    shard = deployment.shard_of_flow(model, tenant)

    def work(on: str, claim: PgClaim | None) -> FlowResult:
        if claim is not None and claim.committed:  # an earlier owner committed it, then died
            return FlowResult.model_validate(claim.committed)
        record = None if claim is None else (
            lambda conn, result: claim.record(conn, result.model_dump(mode="json")))
        return deployment.on_shard(on, lambda engine: flows_logic.create_flow(
            engine.ctx, model, tenant, record=record))

    parts, replayed = once_per_shard(deployment, call, [shard], work,
                                     load=FlowResult.model_validate,
                                     dump=lambda result: result.model_dump(mode="json"))
    result = parts[shard]
    return result.as_replay() if replayed else result


def flow_body(model: FlowIn, tenant: str | None) -> Any:
    """What a flow asks, for its key's fingerprint when the caller gives none."""
    return {"tenant": tenant, "flow": model.model_dump(mode="json")}
