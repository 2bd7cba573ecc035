"""The contract every engine keeps: ``QueueEngine``, the queue's operations, and
``Deployment``, those operations with the deployment's shards named.

``Tierq`` (one PostgreSQL) and ``ShardedTierq`` (several) both subclass ``Deployment``, so
mypy checks each of them against it: an operation missing on either makes constructing it
an error ("cannot instantiate abstract class"), and a parameter or result that differs is
an incompatible override. A caller that needs only the queue takes a ``QueueEngine``; one
that works per shard (the idempotency keys' parts per shard, the scheduled ticks, the Glue
feeder) takes a ``Deployment`` and never asks which class it has: one database is a
deployment of one shard, named ``tierq.dal.shards.DEFAULT_SHARD``.

Outside the contract, on purpose:

| member | of | why |
| --- | --- | --- |
| ``from_env``, ``from_urls`` | each | constructors: built from each one's own inputs |
| ``job_config`` | ``Tierq`` | a job's config on one database (a shard's: via ``engines``) |
| ``migrate`` | both | schema administration: one database's versions, or each shard's |
| ``db``, ``warm``, ``ctx`` | ``Tierq`` | the engine's parts, for the layers below it |
| ``move_pair``, ``give_up_move`` | ``ShardedTierq`` | moves (``tierq.logic.pair_moves``) |
| ``homes``, ``sync_homes``, ``forget_homes`` | ``ShardedTierq`` | homes (``tierq.logic.homes``) |
| ``specs``, ``by_tag`` | ``ShardedTierq`` | the shard list and the ids' tags |
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar, cast
from uuid import UUID

# what the default methods below build or take as defaults (the others: annotations only)
from tierq.models.bounds import SLICE_MAX_ITEMS, SLICE_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable

    from tierq.config import Settings
    from tierq.core.warm_up import WarmedUp
    from tierq.engine import Tierq
    from tierq.logic.bulk import BulkLoad, BulkWriter, ShardedBulkLoad, ShardedBulkWriter
    from tierq.logic.claim import ClaimOutcome
    from tierq.logic.idempotency import Caller
    from tierq.maintenance.cold_to_warm import ColdToWarmSummary
    from tierq.maintenance.cron_tick import CronTickSummary
    from tierq.maintenance.delayed_mover import DelayedMoverSummary
    from tierq.maintenance.reaper import ReaperSummary
    from tierq.maintenance.registry import JobRun
    from tierq.models import (
        AckItem,
        AckResult,
        ClaimedTask,
        ClaimRequest,
        Enqueued,
        EnqueueOutcome,
        HeartbeatItem,
        HeartbeatResult,
        NackItem,
        NackResult,
        QueueSettings,
        QueueView,
        ReleaseItem,
        ReleaseResult,
        RunningLease,
        TaskView,
        TenantCounts,
        TenantQueueView,
    )
    from tierq.models.ack_claims import AckClaimResult
    from tierq.models.envelopes import PurgeResult, ReplayResult
    from tierq.models.flows import FlowIn, FlowResult
    from tierq.models.queue_update import QueueSettingsUpdate
    from tierq.models.schedules import ScheduleIn, ScheduleRemoved, ScheduleView
    from tierq.models.tasks import TaskIn
    from tierq.models.throughput import QueueThroughput

T = TypeVar("T")


class QueueEngine(Protocol):
    """Every operation on the queue, the same on one database and over shards: what an
    application (a worker, a producer, an admin tool) calls.

    The keyed operations (``enqueue``, ``dlq_replay``/``dlq_replay_slice``, ``claim``,
    ``claim_outcome``, ``ack``, ``nack``, ``release``, ``heartbeat``) take an idempotency
    key: a call repeated with the same ``idempotency_key`` and the same request gets the
    first call's answer (``idempotent_replay`` set on it) and changes nothing; with another
    request it is ``IdempotencyKeyReused``, while the first still runs
    ``IdempotencyInProgress`` (tierq.logic.idempotency). Keys are kept per ``caller``
    (``Caller``: admin or a tenant, and the token's subject; default ``Caller()``),
    operation and queue. ``body_fingerprint`` is what the key is bound to as the caller
    framed its request (the HTTP body's ``idempotency.fingerprint``); by default the
    fingerprint of the call's own arguments."""

    settings: Settings

    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- producers -----------------------------------------------------------------------

    def enqueue(self, queue: str, items: Sequence[TaskIn | Mapping[str, Any]], *,
                tenant: str | None = None, idempotency_key: str | None = None,
                caller: Caller | None = None,
                body_fingerprint: bytes | None = None) -> Enqueued:
        """Enqueue a batch (≤ 500); ``tenant`` is the default for tasks that name none.
        Keyed (see the class): the outcomes of the first call with the key."""
        ...

    def flow(self, flow: FlowIn | Mapping[str, Any], *,
             tenant: str | None = None, idempotency_key: str | None = None,
             caller: Caller | None = None,
             body_fingerprint: bytes | None = None) -> FlowResult:
        """Create a graph of tasks (``after`` naming refs or ids) all or nothing
        (tierq.logic.flows); ``tenant``, when given, is every task's. Keyed (see the
        class): the answer of the first call with the key, recorded in the flow's own
        transaction."""
        ...

    def warm_up(self, *, tune_collector: bool = True) -> WarmedUp:
        """Do now what the first enqueue, claim and ack would do once (import, generate and
        build what tierq defers for Lambda's cold starts): for a long-running process whose
        first calls should be as fast as its later ones (tierq.core.warm_up). With
        ``tune_collector``, CPython's garbage collector is set for a worker too
        (tierq.core.collector: about 30% less client CPU a task at claims of 400)."""
        from tierq.core.warm_up import warm_up

        return warm_up(tune_collector=tune_collector)

    def enqueue_one(self, queue: str, payload: Any, **fields: Any) -> EnqueueOutcome:
        """Enqueue one task (``fields``: the rest of its ``TaskIn``)."""
        from tierq.models.tasks import TaskIn  # (the task models: not every function's)

        return self.enqueue(queue, [TaskIn(payload=payload, **fields)])[0]

    def bulk_load(self, queue: str, *, rows: int, tenants: Iterable[str]
                  ) -> AbstractContextManager[BulkLoad | ShardedBulkLoad]:
        """Admit a bulk load of ``rows`` rows for these tenants of ``queue`` (tierq.logic.bulk);
        it ends when the block exits."""
        ...

    def bulk_writer(self, load: BulkLoad | ShardedBulkLoad
                    ) -> AbstractContextManager[BulkWriter | ShardedBulkWriter]:
        """A writer of ``load``'s rows."""
        ...

    def bulk_warm_up(self, queue: str, tenants: Iterable[str]) -> int:
        """Promote the first batch of what bulk loads wrote for these tenants; how many."""
        ...

    # -- workers -------------------------------------------------------------------------

    def claim(self, queue: str, request: ClaimRequest | None = None, *, max_bytes: int = 0,
              answer_by: float | None = None, idempotency_key: str | None = None,
              caller: Caller | None = None, body_fingerprint: bytes | None = None,
              **fields: Any) -> list[ClaimedTask]:
        """Lease up to ``request.max`` tasks. Keyed: a repeat gets the first claim's tasks
        whose leases are still held, with the same tokens, and leases nothing more."""
        ...

    def claim_outcome(self, queue: str, request: ClaimRequest | None = None, *,
                      max_bytes: int = 0, answer_by: float | None = None,
                      idempotency_key: str | None = None, caller: Caller | None = None,
                      body_fingerprint: bytes | None = None,
                      **fields: Any) -> ClaimOutcome:
        """``claim``, with when more may be had if the queue's limits cut it."""
        ...

    def replay_claim(self, queue: str, record: Any) -> list[ClaimedTask]:
        """The tasks of a kept claim record still leased with its tokens, rebuilt."""
        ...

    def give_back(self, queue: str, tasks: Sequence[ClaimedTask]) -> None:
        """Return claimed tasks that could not be answered, no attempt counted."""
        ...

    def ack(self, queue: str, items: Sequence[AckItem | ClaimedTask | Mapping[str, Any]], *,
            idempotency_key: str | None = None, caller: Caller | None = None,
            body_fingerprint: bytes | None = None) -> AckResult: ...

    def ack_and_claim(self, queue: str,
                      items: Sequence[AckItem | ClaimedTask | Mapping[str, Any]],
                      request: ClaimRequest | None = None, *, max_bytes: int = 0,
                      answer_by: float | None = None, idempotency_key: str | None = None,
                      caller: Caller | None = None, body_fingerprint: bytes | None = None,
                      **fields: Any) -> AckClaimResult:
        """Ack ``items``, then claim the next tasks, in one call (logic/ack_claim.py): a
        failed claim leaves the ack done and says why (``claim_error``). Keyed, a repeat
        answers the first answer again, its tasks still leased, and leases nothing more."""
        ...

    def nack(self, queue: str, items: Sequence[NackItem | Mapping[str, Any]], *,
             idempotency_key: str | None = None, caller: Caller | None = None,
             body_fingerprint: bytes | None = None) -> NackResult: ...

    def release(self, queue: str, items: Sequence[ReleaseItem | ClaimedTask | Mapping[str, Any]],
                *, idempotency_key: str | None = None, caller: Caller | None = None,
                body_fingerprint: bytes | None = None) -> ReleaseResult: ...

    def heartbeat(self, queue: str, items: Sequence[HeartbeatItem | Mapping[str, Any]], *,
                  idempotency_key: str | None = None, caller: Caller | None = None,
                  body_fingerprint: bytes | None = None) -> HeartbeatResult: ...

    # -- tasks and dead letters ----------------------------------------------------------

    def get_task(self, queue: str, task_id: UUID | str, *, wait_seconds: float = 0,
                 tenant: str | None = None) -> TaskView:
        """The task. With ``wait_seconds`` (0 to 20), once it is done, dead, cancelled or
        deleted, or after that long as it stands, woken by a message and not by polling
        PostgreSQL (tierq.logic.waits). ``tenant``: the caller's; another tenant's task is
        ``NotFound`` at once."""
        ...

    def cancel_task(self, queue: str, task_id: UUID | str, *,
                    tenant: str | None = None) -> TaskView:
        """Delete the task whatever its state (DELETE): gone, a GET after it is 404.
        ``tenant``: the caller's; another tenant's task is ``NotFound``."""
        ...

    def cancel(self, queue: str, task_id: UUID | str, *,
               tenant: str | None = None) -> TaskView:
        """Mark an unfinished task ``cancelled``, its row kept until retention ends
        (tierq.logic.tasks.cancel): out of its line at once, or, leased, its worker told by
        its next heartbeat or ack (their answers' ``cancelled``). ``tenant``: the caller's;
        another tenant's task is ``NotFound``. A done or dead task is ``TaskFinished``
        (409); one cancelled already is answered as it is."""
        ...

    def dlq_list(self, queue: str, *, tenant: str | None = None, limit: int = 100,
                 after: tuple[datetime, UUID] | None = None) -> list[TaskView]:
        """Dead letters, most recently dead first, before the position ``after``."""
        ...

    def dlq_replay(self, queue: str, *, ids: Sequence[UUID | str] = (),
                   all_dead: bool = False, idempotency_key: str | None = None,
                   caller: Caller | None = None,
                   body_fingerprint: bytes | None = None) -> tuple[list[UUID], list[UUID]]:
        """Make dead letters ready again, attempts reset, however many: (replayed,
        skipped)."""
        r = self.dlq_replay_slice(queue, ids=ids, all_dead=all_dead, max_items=None,
                                  seconds=None, idempotency_key=idempotency_key,
                                  caller=caller, body_fingerprint=body_fingerprint)
        return r.replayed, r.skipped

    def dlq_replay_slice(self, queue: str, *, ids: Sequence[UUID | str] = (),
                         all_dead: bool = False, tenant: str | None = None,
                         max_items: int | None = SLICE_MAX_ITEMS,
                         seconds: float | None = SLICE_SECONDS,
                         idempotency_key: str | None = None, caller: Caller | None = None,
                         body_fingerprint: bytes | None = None) -> ReplayResult:
        """Replay dead letters (of ``tenant`` only, when given) in a bounded slice: with
        ``all_dead``, at most ``max_items`` within about ``seconds`` (None: no bound),
        ``more`` set when some may be left. Keyed: the first call's answer."""
        ...

    def dlq_purge(self, queue: str, *, ids: Sequence[UUID | str] = (),
                  all_dead: bool = False) -> list[UUID]:
        """Delete dead letters, however many; the ids deleted."""
        return self.dlq_purge_slice(queue, ids=ids, all_dead=all_dead, max_items=None,
                                    seconds=None).purged

    def dlq_purge_slice(self, queue: str, *, ids: Sequence[UUID | str] = (),
                        all_dead: bool = False, tenant: str | None = None,
                        max_items: int | None = SLICE_MAX_ITEMS,
                        seconds: float | None = SLICE_SECONDS) -> PurgeResult:
        """Delete dead letters (of ``tenant`` only, when given), bounded like
        :meth:`dlq_replay_slice`. A purge repeated deletes nothing more: no key."""
        ...

    # -- queues and metrics --------------------------------------------------------------

    def queue_settings(self, queue: str) -> QueueSettings: ...

    def put_queue(self, queue: str,
                  update: QueueSettingsUpdate | Mapping[str, Any]) -> QueueSettings: ...

    def pause(self, queue: str) -> QueueSettings:
        return self.put_queue(queue, {"paused": True})

    def resume(self, queue: str) -> QueueSettings:
        return self.put_queue(queue, {"paused": False})

    def purge_queue(self, queue: str) -> int:
        """Delete every task of a queue, in every state; how many."""
        ...

    def get_queue(self, queue: str) -> QueueView: ...

    def tenant_queue(self, queue: str, tenant: str) -> TenantQueueView: ...

    def queue_known(self, queue: str) -> bool: ...

    def queue_views_after(self, after: str, *, limit: int) -> Iterator[QueueView]: ...

    def tenant_queues_after(self, after: str, *, limit: int,
                            tenant: str) -> Iterator[TenantQueueView]: ...

    def list_queues(self) -> list[QueueView]: ...

    def detailed_counts(self) -> list[TenantCounts]:
        """Counts of every (queue, tenant), in that order."""
        ...

    def running(self, queue: str | None = None) -> list[RunningLease]:
        """Every current lease (of one queue if given), oldest first."""
        ...

    def throughput(self, queue: str, tenant: str | None = None) -> QueueThroughput: ...

    # -- maintenance (one pass each; the jobs: tierq.maintenance.registry) ---------------

    def run_job(self, name: str) -> JobRun[Any]:
        """One pass of maintenance job ``name`` on every shard."""
        ...

    def run_cold_to_warm(self) -> ColdToWarmSummary:
        return cast("ColdToWarmSummary", self.run_job("cold_to_warm").summary())

    def run_delayed_mover(self) -> DelayedMoverSummary:
        return cast("DelayedMoverSummary", self.run_job("delayed_mover").summary())

    def run_reaper(self) -> ReaperSummary:
        return cast("ReaperSummary", self.run_job("reaper").summary())

    def run_cron_tick(self) -> CronTickSummary:
        return cast("CronTickSummary", self.run_job("cron_tick").summary())

    # -- cron schedules ------------------------------------------------------------------

    def put_schedule(self, name: str, body: ScheduleIn | Mapping[str, Any]) -> ScheduleView:
        ...

    def get_schedule(self, name: str, tenant: str | None = None) -> ScheduleView: ...

    def delete_schedule(self, name: str, tenant: str | None = None) -> ScheduleRemoved: ...

    def schedules_after(self, after: tuple[str, str] | None, *, limit: int,
                        tenant: str | None = None) -> Iterator[ScheduleView]: ...

    def list_schedules(self, tenant: str | None = None) -> list[ScheduleView]:
        """Every schedule, or those of one tenant, in (tenant, name) order."""
        ...


class Deployment(QueueEngine, Protocol):
    """A ``QueueEngine`` with its shards named, for what is read or written per shard: each
    shard's engine, which shard holds what, and a call on one shard under its deadline.
    One database is one shard, named ``DEFAULT_SHARD``, that holds everything."""

    @property
    def engines(self) -> Mapping[str, Tierq]:
        """Every shard's engine by name, the default shard's first."""
        ...

    @property
    def default_shard(self) -> str:
        """The default shard's name: where what belongs to no pair is kept (a feed's
        offsets, an idempotency key's binding)."""
        ...

    def on_shard(self, name: str, call: Callable[[Tierq], T], *, waits: float = 0.0) -> T:
        """``call`` with shard ``name``'s engine, under the shard's call deadline (``waits``:
        what the call waits for by design)."""
        ...

    def engine_of(self, queue: str, tenant: str, *, create: bool = True) -> Tierq | None:
        """The engine of the pair's shard (None: the pair has none and ``create`` is off)."""
        ...

    def shards_of_tasks(self, queue: str, tasks: Sequence[TaskIn],
                        tenant: str | None) -> dict[str, list[int]]:
        """The tasks' indexes grouped by the shards of their pairs."""
        ...

    def shards_for_selection(self, queue: str, tenant: str | None,
                             ids: Sequence[UUID]) -> dict[str, list[UUID]]:
        """Where a selection of dead letters is: {shard: the ids to ask it}."""
        ...

    def shard_of_flow(self, flow: FlowIn, tenant: str | None) -> str:
        """The one shard a flow's tasks live on; tasks whose pairs, or existing ids named in
        ``after``, live on different shards are 422 naming the field."""
        ...

    def after_pass(self, shard: str, summary: object) -> None:
        """What follows a maintenance pass run on shard ``shard`` by its own engine (as the
        scheduled ticks do; ``run_job`` does it itself)."""
        ...
