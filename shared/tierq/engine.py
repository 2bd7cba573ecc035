"""``Tierq``: the engine over one PostgreSQL and one Valkey, which every Lambda function, CLI
command and Spark job calls (over several PostgreSQL shards: ``tierq.sharded``; both keep
the contract of ``tierq.contract``).

    tq = Tierq.from_env()                      # DATABASE_URL, VALKEY_URL, TIERQ_*
    tq.enqueue("emails", [TaskIn(payload={"to": "a@b.c"})])
    for task in tq.claim("emails", ClaimRequest(max=10)):
        ...
        tq.ack("emails", [task])   # or AckItem(id=..., lease_token=..., result=...)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

from pydantic import BaseModel, TypeAdapter

from tierq.config import Settings, get_settings
from tierq.contract import Deployment
from tierq.core.lazy import lazy_module
from tierq.dal import connect
from tierq.dal.postgres import Database
from tierq.dal.shards import DEFAULT_SHARD
from tierq.dal.warm_tier import WarmTier
from tierq.logic import queues
from tierq.logic.context import Clock, Context, SystemClock
from tierq.models.base import Replayable, adapter_on_first_call, deferred_adapter
from tierq.models.bounds import SLICE_MAX_ITEMS, SLICE_SECONDS

if TYPE_CHECKING:
    from tierq.core.warm_up import WarmedUp
    from tierq.dal import migrate
    from tierq.logic import (
        ack_claim,
        claim_replay,
        dispatch,
        dlq,
        enqueue,
        idempotency,
        leases,
        schedules,
        shard_ops,
        tasks,
        waits,
    )
    from tierq.logic import bulk as bulk_logic
    from tierq.logic import claim as claim_logic
    from tierq.logic import flows as flows_logic
    from tierq.logic import throughput as throughput_logic
    from tierq.logic.idempotency import Caller
    from tierq.maintenance import registry
    from tierq.maintenance.registry import JobConfig, JobRun
    from tierq.models import (
        AckItem,
        AckResult,
        ClaimedTask,
        ClaimRequest,
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
    from tierq.models import flows as flow_models
    from tierq.models import leases as lease_models
    from tierq.models import tasks as task_models
    from tierq.models.ack_claims import AckClaimResult
    from tierq.models.envelopes import PurgeResult, ReplayResult
    from tierq.models.flows import FlowIn, FlowResult
    from tierq.models.queue_update import QueueSettingsUpdate
    from tierq.models.schedules import ScheduleIn, ScheduleRemoved, ScheduleView
    from tierq.models.tasks import Enqueued, TaskIn
    from tierq.models.throughput import QueueThroughput
else:
    # What only some operations use is imported by the first of them (tierq.core.lazy): the
    # enqueue function never imports the claim path, the dispatcher or the schedules.
    migrate = lazy_module("tierq.dal.migrate")
    bulk_logic = lazy_module("tierq.logic.bulk")
    ack_claim = lazy_module("tierq.logic.ack_claim")
    claim_logic = lazy_module("tierq.logic.claim")
    claim_replay = lazy_module("tierq.logic.claim_replay")
    enqueue = lazy_module("tierq.logic.enqueue")
    dispatch = lazy_module("tierq.logic.dispatch")
    dlq = lazy_module("tierq.logic.dlq")
    flows_logic = lazy_module("tierq.logic.flows")
    idempotency = lazy_module("tierq.logic.idempotency")
    shard_ops = lazy_module("tierq.logic.shard_ops")
    flow_models = lazy_module("tierq.models.flows")
    leases = lazy_module("tierq.logic.leases")
    schedules = lazy_module("tierq.logic.schedules")
    throughput_logic = lazy_module("tierq.logic.throughput")
    tasks = lazy_module("tierq.logic.tasks")
    waits = lazy_module("tierq.logic.waits")
    registry = lazy_module("tierq.maintenance.registry")
    lease_models = lazy_module("tierq.models.leases")
    task_models = lazy_module("tierq.models.tasks")  # (a scheduled function makes no task)

ModelT = TypeVar("ModelT", bound=BaseModel)
ResultT = TypeVar("ResultT", bound=Replayable)  # a keyed operation's answer
T = TypeVar("T")
QUEUE_VIEWS_CHUNK = 20  # queues (schedules) read per statement while a page fills

# A batch of mappings is validated as one list: in Rust, faster than one model at a time,
# and errors name the item's index. Each is made by its first call, with its models (the
# scheduled functions make no task, the enqueue function no nack).
@adapter_on_first_call
def _tasks_in() -> TypeAdapter[list[TaskIn]]:
    return deferred_adapter(list[task_models.TaskIn])


@adapter_on_first_call
def _nacks() -> TypeAdapter[list[NackItem]]:
    return deferred_adapter(list[lease_models.NackItem])


@adapter_on_first_call
def _heartbeats() -> TypeAdapter[list[HeartbeatItem]]:
    return deferred_adapter(list[lease_models.HeartbeatItem])


def _models(cls: type[ModelT], batch: TypeAdapter[list[ModelT]],
            items: Sequence[ModelT | Mapping[str, Any]]) -> list[ModelT]:
    """Models of ``cls`` from models or plain mappings (``batch`` validates a list of them).
    ``items`` is read once more after the check: an iterator is made a list first."""
    items = _listed(items)
    if items and not any(map(isinstance, items, itertools.repeat(cls))):
        return batch.validate_python(items)
    return [i if isinstance(i, cls) else cls.model_validate(i) for i in items]


def _listed(items: Iterable[T]) -> Sequence[T]:
    """``items`` as a sequence (a generator would be used up by a first pass over it)."""
    return items if isinstance(items, list | tuple) else list(items)


class Tierq(Deployment):
    """The two-tier queue over one PostgreSQL and one Valkey: a deployment of one shard,
    ``DEFAULT_SHARD``."""

    def __init__(self, *, database_url: str | None = None, valkey_url: str | None = None,
                 settings: Settings | None = None, clock: Clock | None = None,
                 db: Database | None = None, warm: WarmTier | None = None,
                 resolve_url: Callable[[bool], str] | None = None) -> None:
        """``resolve_url(fresh)``: the URL of each new connection, when the login can change
        under a running process (a rotated secret; by default, on AWS, the secret of
        DB_SECRET_ARN when no ``database_url`` is given)."""
        self.settings = settings or get_settings()
        pooled = self.settings.db_behind_pooler  # (RDS Proxy on AWS: TIERQ_DB_POOLER)
        self.db = db or Database(database_url or connect.database_url(self.settings),
                                 max_size=self.settings.db_pool_max,
                                 timeout=self.settings.db_pool_timeout,
                                 prepare=not pooled,
                                 statement_timeout_ms=self.settings.statement_timeout_ms,
                                 lock_timeout_ms=self.settings.lock_timeout_ms,
                                 resolve_url=resolve_url or (
                                     None if database_url else self._secret_url()),
                                 # timeouts on the session where no proxy is pinned by it
                                 session_settings=not pooled)
        self.warm = warm or WarmTier.from_url(valkey_url or connect.valkey_url(self.settings),
                                              cluster=self.settings.valkey_cluster,
                                              credential_provider=connect.valkey_credentials(
                                                  self.settings))
        self.ctx = Context(self.db, self.warm, self.settings, clock or SystemClock())
        # each maintenance job's config, read on its first pass (a bad value fails the pass
        # with the variable named, not every function of the deployment)
        self.job_configs: dict[str, JobConfig] = {}

    def _secret_url(self) -> Callable[[bool], str] | None:
        """On AWS, each new connection takes its login from the secret (a rotation changes
        it; see Database)."""
        settings = self.settings
        if not settings.db_secret_arn:
            return None
        return lambda fresh: connect.database_url(settings, fresh=fresh)

    @classmethod
    def from_env(cls) -> Tierq:
        return cls()

    def close(self) -> None:
        self.db.close()
        self.warm.close()

    def warm_up(self, *, tune_collector: bool = True) -> WarmedUp:
        """``Deployment.warm_up``, and every script of the warm tier read and registered
        (``dal/warm_tier.Scripts``: else each on its first call, a file read and a hash
        inside a claim or an ack); no call to a server."""
        self.warm.scripts.register_all()
        return super().warm_up(tune_collector=tune_collector)

    def migrate(self) -> list[str]:
        """Apply pending SQL migrations; returns the versions applied now."""
        return migrate.migrate(self.db.url,
                               lock_timeout_ms=self.settings.migrate_lock_timeout_ms,
                               lock_attempts=self.settings.migrate_lock_attempts,
                               runner_wait_seconds=self.settings.migrate_runner_wait_seconds)

    # -- producers -----------------------------------------------------------------------

    def enqueue(self, queue: str, items: Sequence[TaskIn | Mapping[str, Any]], *,
                tenant: str | None = None, idempotency_key: str | None = None,
                caller: Caller | None = None,
                body_fingerprint: bytes | None = None) -> Enqueued:
        """Enqueue a batch (≤ 500). ``tenant`` is the default for tasks that name none; with
        ``idempotency_key``, once per key (``tierq.contract.QueueEngine``)."""
        tasks = _models(task_models.TaskIn, _tasks_in(), items)
        if idempotency_key is None:
            return task_models.Enqueued(enqueue.enqueue(self.ctx, queue, tasks, tenant))
        call = idempotency.keyed_call("enqueue", queue, idempotency_key, caller, body_fingerprint,
                          lambda: shard_ops.enqueue_body(tasks, tenant))
        return shard_ops.enqueue(self, queue, tasks, tenant, call)

    def flow(self, flow: FlowIn | Mapping[str, Any], *,
             tenant: str | None = None, idempotency_key: str | None = None,
             caller: Caller | None = None,
             body_fingerprint: bytes | None = None) -> FlowResult:
        """Create a graph of tasks all or nothing (tierq.logic.flows)."""
        model = flow if isinstance(flow, flow_models.FlowIn) \
            else flow_models.FlowIn.model_validate(flow)
        call = idempotency.keyed_call("flow", shard_ops.FLOW_SCOPE, idempotency_key, caller,
                          body_fingerprint, lambda: shard_ops.flow_body(model, tenant))
        return shard_ops.flow(self, model, tenant, call)

    # -- bulk loads (logic/bulk.py; the Glue feeder drives them) --------------------------

    def bulk_load(self, queue: str, *, rows: int,
                  tenants: Iterable[str]) -> AbstractContextManager[bulk_logic.BulkLoad]:
        """Admit a bulk load of ``rows`` rows for these tenants of ``queue`` (their pairs
        turn cold, the load registered in flight) and reserve its places in line::

            with tq.bulk_load("q", rows=n, tenants=["_"]) as load:   # one process
                with tq.bulk_writer(load) as writer:                  # any number
                    writer.write(copy_text, tenants=["_"])
            tq.bulk_warm_up("q", ["_"])

        The admission ends when the block exits: after the last writer has committed."""
        return bulk_logic.load(self.ctx, queue, rows, tenants)

    def bulk_writer(self, load: bulk_logic.BulkLoad | bulk_logic.ShardedBulkLoad
                    ) -> AbstractContextManager[bulk_logic.BulkWriter]:
        """A writer of ``load``'s rows on a pooled connection of its own (one short
        transaction per ``write``). A load over several shards needs the engine over them:
        ValueError."""
        if isinstance(load, bulk_logic.ShardedBulkLoad):
            raise ValueError(f"a load over shards ({sorted(load.loads)}) cannot be written "
                             "through one database: the stores' TIERQ_SHARD_URLS name one "
                             "shard or none")
        return bulk_logic.writer(self.ctx, load)

    def bulk_warm_up(self, queue: str, tenants: Iterable[str]) -> int:
        """Promote the first batch of what bulk loads wrote for these tenants (the cold ->
        warm mover would do it on its next pass); returns how many tasks went warm."""
        return bulk_logic.warm_up(self.ctx, queue, tenants)

    # -- workers -------------------------------------------------------------------------

    def claim(self, queue: str, request: ClaimRequest | None = None, *, max_bytes: int = 0,
              answer_by: float | None = None, idempotency_key: str | None = None,
              caller: Caller | None = None, body_fingerprint: bytes | None = None,
              **fields: Any) -> list[ClaimedTask]:
        """Lease up to ``max`` tasks. ``max_bytes`` (0: none) caps what the tasks cost in a
        Lambda response (logic/claim.py); ``answer_by`` (a ``time.monotonic()`` instant) is
        when the claim must return: it polls, refills and pops only while it can."""
        if idempotency_key is not None:
            return self.claim_outcome(queue, request, max_bytes=max_bytes, answer_by=answer_by,
                                      idempotency_key=idempotency_key, caller=caller,
                                      body_fingerprint=body_fingerprint, **fields).tasks
        return claim_logic.claim(self.ctx, queue, request or lease_models.ClaimRequest(**fields),
                                 max_bytes=max_bytes, answer_by=answer_by)

    def claim_outcome(self, queue: str, request: ClaimRequest | None = None, *,
                      max_bytes: int = 0, answer_by: float | None = None,
                      idempotency_key: str | None = None, caller: Caller | None = None,
                      body_fingerprint: bytes | None = None,
                      **fields: Any) -> claim_logic.ClaimOutcome:
        """``claim``, with ``retry_after_ms``: when more may be had if the queue's limits
        (max_leased, rate, tenant_max_leased, tenant_rate) cut the claim, else None."""
        request = request or lease_models.ClaimRequest(**fields)
        if idempotency_key is not None:
            call = idempotency.keyed_call("claim", queue, idempotency_key, caller,
                                          body_fingerprint,
                                          lambda: request.model_dump(mode="json"))
            assert call is not None
            return claim_replay.claim_once(self, queue, request, max_bytes=max_bytes,
                                           answer_by=answer_by, call=call)
        return claim_logic.claim_outcome(self.ctx, queue, request,
                                         max_bytes=max_bytes, answer_by=answer_by)

    def replay_claim(self, queue: str, record: Any) -> list[ClaimedTask]:
        """The tasks of a kept claim record (``claim_replay.record_of``) still leased with
        its tokens, rebuilt: the answer to a repeated claim with an Idempotency-Key."""
        return claim_replay.replay(self.ctx, queue, record)

    def give_back(self, queue: str, tasks: Sequence[ClaimedTask]) -> None:
        """Return claimed tasks that could not be answered: back to their places in line,
        no attempt counted (a failure is logged, not raised: see ``claim.give_back``)."""
        claim_logic.give_back(self.ctx, queue, [(str(t.id), t.lease_token) for t in tasks])

    def ack(self, queue: str, items: Sequence[AckItem | ClaimedTask | Mapping[str, Any]], *,
            idempotency_key: str | None = None, caller: Caller | None = None,
            body_fingerprint: bytes | None = None) -> AckResult:
        """Acknowledge tasks: ``AckItem``s (with an optional result), or the claimed tasks
        themselves (``tq.ack(queue, tasks)``: acked without a result)."""
        item = lease_models.AckItem
        kinds = (item, lease_models.ClaimedTask)  # (read once, not per item)
        listed = list(items)  # (read twice below: a generator once)
        models = listed if all(map(isinstance, listed, itertools.repeat(kinds))) else \
            [i if isinstance(i, kinds) else item.model_validate(i) for i in listed]
        return self._lease_outcome("ack", queue, models, leases.ack, lease_models.AckResult,
                                   idempotency_key, caller, body_fingerprint)

    def ack_and_claim(self, queue: str,
                      items: Sequence[AckItem | ClaimedTask | Mapping[str, Any]],
                      request: ClaimRequest | None = None, *, max_bytes: int = 0,
                      answer_by: float | None = None, idempotency_key: str | None = None,
                      caller: Caller | None = None, body_fingerprint: bytes | None = None,
                      **fields: Any) -> AckClaimResult:
        """Ack ``items`` as ``ack`` does, then claim as ``claim_outcome`` does with ``request``
        (or its ``fields``), in one call whose ack's lease drop rides in the claim's first
        round trip (logic/ack_claim.py). A failed claim does not undo the ack: the answer
        has no tasks and says why (``claim_error``). Keyed, a repeat answers the first
        answer again, its tasks still leased, and leases nothing more (``ack_claim.keyed``)."""
        item = lease_models.AckItem
        kinds = (item, lease_models.ClaimedTask)
        models = [i if isinstance(i, kinds) else item.model_validate(i) for i in items]
        claim = request or lease_models.ClaimRequest(**fields)
        call = idempotency.keyed_call(
            "ack_and_claim", queue, idempotency_key, caller, body_fingerprint,
            lambda: {"acks": idempotency.models_body(models),
                     "claim": claim.model_dump(mode="json")})
        return ack_claim.keyed(self, queue, call, lambda: ack_claim.ack_and_claim(
            self.ctx, queue, models, claim, max_bytes=max_bytes, answer_by=answer_by))

    def nack(self, queue: str, items: Sequence[NackItem | Mapping[str, Any]], *,
             idempotency_key: str | None = None, caller: Caller | None = None,
             body_fingerprint: bytes | None = None) -> NackResult:
        models = _models(lease_models.NackItem, _nacks(), items)
        return self._lease_outcome("nack", queue, models, leases.nack,
                                   lease_models.NackResult, idempotency_key, caller,
                                   body_fingerprint)

    def release(self, queue: str, items: Sequence[ReleaseItem | ClaimedTask | Mapping[str, Any]],
                *, idempotency_key: str | None = None, caller: Caller | None = None,
                body_fingerprint: bytes | None = None) -> ReleaseResult:
        """Give leased tasks back unfinished, without counting an attempt: each returns to
        its old place in line. ``ReleaseItem``s / ``{"id", "lease_token"}``, or the claimed
        tasks themselves."""
        models = [i if isinstance(i, lease_models.ReleaseItem | lease_models.ClaimedTask)
                  else lease_models.ReleaseItem.model_validate(i) for i in items]
        return self._lease_outcome("release", queue, models, leases.release,
                                   lease_models.ReleaseResult, idempotency_key, caller,
                                   body_fingerprint)

    def heartbeat(self, queue: str, items: Sequence[HeartbeatItem | Mapping[str, Any]], *,
                  idempotency_key: str | None = None, caller: Caller | None = None,
                  body_fingerprint: bytes | None = None) -> HeartbeatResult:
        models = _models(lease_models.HeartbeatItem, _heartbeats(), items)
        return self._lease_outcome("heartbeat", queue, models, leases.heartbeat,
                                   lease_models.HeartbeatResult, idempotency_key, caller,
                                   body_fingerprint)

    def _lease_outcome(self, route: str, queue: str, models: list[Any],
                       run: Callable[[Context, str, list[Any]], ResultT], result: type[ResultT],
                       idempotency_key: str | None, caller: Caller | None,
                       body_fingerprint: bytes | None) -> ResultT:
        """``run(ctx, queue, models)`` once per key (the empty ``result`` without items): the
        keyed shape of ack, nack, release and heartbeat."""
        def work() -> ResultT:
            return run(self.ctx, queue, models) if models else result()

        if idempotency_key is None:  # (a worker's call: nothing kept, nothing to wrap)
            return work()
        call = idempotency.keyed_call(route, queue, idempotency_key, caller, body_fingerprint,
                                      lambda: idempotency.models_body(models))
        return idempotency.answer_once(self.ctx, call, work, result)

    # -- tasks and dead letters ----------------------------------------------------------

    def get_task(self, queue: str, task_id: UUID | str, *, wait_seconds: float = 0,
                 tenant: str | None = None) -> TaskView:
        if wait_seconds == 0 and tenant is None:
            return tasks.get_task(self.ctx, queue, UUID(str(task_id)))
        return waits.get_task(self.ctx, queue, UUID(str(task_id)),
                              wait_seconds=wait_seconds, tenant=tenant)

    def cancel_task(self, queue: str, task_id: UUID | str, *,
                    tenant: str | None = None) -> TaskView:
        return tasks.cancel_task(self.ctx, queue, UUID(str(task_id)), tenant=tenant)

    def cancel(self, queue: str, task_id: UUID | str, *,
               tenant: str | None = None) -> TaskView:
        return tasks.cancel(self.ctx, queue, UUID(str(task_id)), tenant=tenant)

    def dlq_list(self, queue: str, *, tenant: str | None = None, limit: int = 100,
                 after: tuple[datetime, UUID] | None = None) -> list[TaskView]:
        return dlq.list_dead(self.ctx, queue, tenant=tenant, limit=limit, after=after)

    def dlq_replay_slice(self, queue: str, *, ids: Sequence[UUID | str] = (),
                         all_dead: bool = False, tenant: str | None = None,
                         max_items: int | None = SLICE_MAX_ITEMS,
                         seconds: float | None = SLICE_SECONDS,
                         idempotency_key: str | None = None, caller: Caller | None = None,
                         body_fingerprint: bytes | None = None) -> ReplayResult:
        return shard_ops.replay_dead(self, queue, ids=ids, all_dead=all_dead, tenant=tenant,
                                   max_items=max_items, seconds=seconds,
                                   idempotency_key=idempotency_key, caller=caller,
                                   body_fingerprint=body_fingerprint)

    def dlq_purge_slice(self, queue: str, *, ids: Sequence[UUID | str] = (),
                        all_dead: bool = False, tenant: str | None = None,
                        max_items: int | None = SLICE_MAX_ITEMS,
                        seconds: float | None = SLICE_SECONDS) -> PurgeResult:
        return shard_ops.purge_dead(self, queue, ids=[UUID(str(i)) for i in ids],
                                    all_dead=all_dead, tenant=tenant, max_items=max_items,
                                    seconds=seconds)

    # -- queues and metrics --------------------------------------------------------------

    def queue_settings(self, queue: str) -> QueueSettings:
        return self.ctx.queue_settings.get(queue)

    def put_queue(self, queue: str,
                  update: QueueSettingsUpdate | Mapping[str, Any]) -> QueueSettings:
        from tierq.models.queue_update import QueueSettingsUpdate

        model = update if isinstance(update, QueueSettingsUpdate) else \
            QueueSettingsUpdate.model_validate(update)
        if model.consumer is not None:  # before anything is written
            dispatch.check_consumer(self.ctx, model.consumer.function)
        return queues.put_settings(self.ctx, queue, model)

    def purge_queue(self, queue: str) -> int:
        """Delete every task of a queue, in every state; returns how many."""
        return queues.purge_tasks(self.ctx, queue)

    def get_queue(self, queue: str) -> QueueView:
        """A queue's settings, counts and mode, as an admin sees them (a tenant's view:
        :meth:`tenant_queue`)."""
        return queues.queue_view(self.ctx, queue)

    def tenant_queue(self, queue: str, tenant: str) -> TenantQueueView:
        """A queue as a caller pinned to ``tenant`` sees it: the settings its workers read and
        its own counts; the same for any queue name that has none of its tasks."""
        return queues.tenant_queue_view(self.ctx, queue, tenant)

    def queue_known(self, queue: str) -> bool:
        """Whether the queue has settings or has had tasks."""
        return queues.queue_known(self.ctx, queue)

    def queue_views_after(self, after: str, *, limit: int) -> Iterator[QueueView]:
        """Up to ``limit`` admin views of the queues named after ``after``, in name order,
        read as they are consumed (a page that fills its bytes first reads no more)."""
        return itertools.islice(queues.iter_queue_views(
            self.ctx, after, chunk=min(limit, QUEUE_VIEWS_CHUNK)), limit)

    def tenant_queues_after(self, after: str, *, limit: int,
                            tenant: str) -> Iterator[TenantQueueView]:
        """Up to ``limit`` tenant views (:meth:`tenant_queue`) of the queues ``tenant`` has had
        tasks in, named after ``after``, in name order, read as they are consumed."""
        return itertools.islice(queues.iter_tenant_queue_views(
            self.ctx, tenant, after, chunk=min(limit, QUEUE_VIEWS_CHUNK)), limit)

    def list_queues(self) -> list[QueueView]:
        return [queues.queue_view(self.ctx, q) for q in queues.known_queues(self.ctx)]

    def detailed_counts(self) -> list[TenantCounts]:
        return queues.detailed(self.ctx)

    def running(self, queue: str | None = None) -> list[RunningLease]:
        return queues.running(self.ctx, queue)

    def throughput(self, queue: str, tenant: str | None = None) -> QueueThroughput:
        """Tasks enqueued and acked per second over the last 15 minutes, of ``tenant`` or
        of every tenant of the queue summed (kept in the warm tier: dal/throughput.py)."""
        return throughput_logic.queue_throughput(self.ctx, queue, tenant)

    # -- maintenance (one pass each; the jobs: tierq.maintenance.registry) ---------------

    def job_config(self, name: str) -> JobConfig:
        """The config of maintenance job ``name`` (settings, then TIERQ_<JOB>_<FIELD>)."""
        config = self.job_configs.get(name)
        if config is None:
            config = self.job_configs[name] = registry.job(name).configure(self.settings)
        return config

    def run_job(self, name: str) -> JobRun[Any]:
        """One pass of maintenance job ``name`` under its config's budget and timeouts: the
        job's summary, as the one shard's entry."""
        summary = registry.job(name).run(self.ctx, self.job_config(name))
        return registry.JobRun(name, {DEFAULT_SHARD: summary})

    # -- cron schedules ------------------------------------------------------------------

    # Names are scoped per tenant: a schedule is (tenant, name), the tenant '_' by default.

    def put_schedule(self, name: str, body: ScheduleIn | Mapping[str, Any]) -> ScheduleView:
        """Create or replace the schedule ``name`` of the body's tenant and install its next
        occurrences now."""
        return schedules.put_schedule(self.ctx, name, body)[0]

    def get_schedule(self, name: str, tenant: str | None = None) -> ScheduleView:
        return schedules.get_schedule(self.ctx, name, tenant)

    def delete_schedule(self, name: str, tenant: str | None = None) -> ScheduleRemoved:
        """Remove a schedule and its pending occurrences (a claimed one finishes)."""
        return schedules.delete_schedule(self.ctx, name, tenant)

    def schedules_after(self, after: tuple[str, str] | None, *, limit: int,
                        tenant: str | None = None) -> Iterator[ScheduleView]:
        """Up to ``limit`` schedules after (tenant, name) ``after``, in that order, read as
        they are consumed."""
        return itertools.islice(schedules.iter_schedules(
            self.ctx, tenant=tenant, after=after, chunk=min(limit, QUEUE_VIEWS_CHUNK)), limit)

    def list_schedules(self, tenant: str | None = None) -> list[ScheduleView]:
        """Every schedule, or those of one tenant, in (tenant, name) order."""
        return schedules.list_schedules(self.ctx, tenant)

    # -- the one shard (the routing of ``Deployment``) ----------------------------------------

    @property
    def engines(self) -> dict[str, Tierq]:
        return {DEFAULT_SHARD: self}

    @property
    def default_shard(self) -> str:
        return DEFAULT_SHARD

    def on_shard(self, name: str, call: Callable[[Tierq], T], *, waits: float = 0.0) -> T:
        """``call`` with this engine (the one shard: no deadline beyond the pool's)."""
        if name != DEFAULT_SHARD:
            raise KeyError(f"no shard {name!r}: one database is the shard {DEFAULT_SHARD!r}")
        return call(self)

    def engine_of(self, queue: str, tenant: str, *, create: bool = True) -> Tierq:
        return self

    def shards_of_tasks(self, queue: str, tasks: Sequence[TaskIn],
                        tenant: str | None) -> dict[str, list[int]]:
        return {DEFAULT_SHARD: list(range(len(tasks)))}

    def shards_for_selection(self, queue: str, tenant: str | None,
                             ids: Sequence[UUID]) -> dict[str, list[UUID]]:
        return {DEFAULT_SHARD: list(ids)}

    def shard_of_flow(self, flow: FlowIn, tenant: str | None) -> str:
        return DEFAULT_SHARD

    def after_pass(self, shard: str, summary: object) -> None:
        """Nothing: one database keeps no homes to settle after a pass."""
