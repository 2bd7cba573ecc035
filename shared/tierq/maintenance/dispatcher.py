"""The dispatcher job: push delivery of the queues that name a consumer function
(:mod:`tierq.logic.dispatch`). A pass starts batches — each of one tenant's tasks, the
tenants with ready work taking turns — for up to ``budget_seconds`` and ends early when
nothing was ready for ``idle_seconds``; its invocations run on the dispatcher's threads and
outlive the pass (the scheduled function waits for them before it returns:
``tierq.aws.scheduled.jobs``). The dispatcher of an engine lives as long as the engine, so
its in-flight count, its per-queue back-off and width, each queue's turn among its tenants,
the batches it runs per tenant (their fair shares) and its cached timeouts carry over from
pass to pass (a new dispatcher resumes a queue's turns after the tenant its last batch
served: tierq.logic.dispatch). Each shard's engine of a sharded deployment has a dispatcher
of its own (its database's pairs; the shards share the warm tier, the wake flag and each
queue's ``max_concurrency``: tierq.aws.scheduled.dispatcher).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any
from weakref import WeakKeyDictionary

from pydantic import Field

from tierq.dal.postgres import Database
from tierq.logic import dispatch
from tierq.logic.context import Context
from tierq.maintenance.registry import JobConfig, MaintenanceJob


class DispatcherConfig(JobConfig):
    # a dispatcher that claimed nothing and ran nothing for this long ends its invocation
    # (releasing the wake flag): the next ready task wakes a new one
    idle_seconds: float = Field(default=5.0, gt=0, le=600)
    # invocations one dispatcher runs at once, over every queue (its thread pool)
    max_in_flight: int = Field(default=64, ge=1, le=1000)


@dataclass
class DispatcherSummary:
    batches: int
    dispatched: int
    acked: int
    retried: int
    dead: int
    released: int
    throttled: int
    consumer_errors: int
    in_flight: int
    idle: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class NoConsumerFunctions(RuntimeError):
    """The engine's context has no consumer functions to call (``ctx.consumers``)."""


# by the engine's database, not its warm tier: a sharded deployment's engines share one
_DISPATCHERS: WeakKeyDictionary[Database, dispatch.Dispatcher] = WeakKeyDictionary()


def dispatcher_of(ctx: Context, config: DispatcherConfig | None = None) -> dispatch.Dispatcher:
    """The dispatcher of this engine (created on first use with the context's consumer
    functions, ``ctx.consumers``)."""
    found = _DISPATCHERS.get(ctx.db)
    if found is None:
        functions = ctx.consumers
        if functions is None:
            raise NoConsumerFunctions(
                "the dispatcher has no consumer functions to call: set the engine's "
                "ctx.consumers (tierq.aws.consumers on AWS, tierq.local.consumers locally)")
        found = _DISPATCHERS.setdefault(ctx.db, dispatch.Dispatcher(
            ctx, functions,
            max_in_flight=(config or DispatcherConfig()).max_in_flight,
            poll_max=ctx.settings.dispatcher_every))
    return found


def forget_dispatcher(ctx: Context) -> None:
    """Stop and forget this engine's dispatcher (after its running batches end)."""
    found = _DISPATCHERS.pop(ctx.db, None)
    if found is not None:
        found.close()


def run(ctx: Context, config: DispatcherConfig) -> DispatcherSummary:
    import time

    dispatcher = dispatcher_of(ctx, config)
    counts, idle = dispatcher.run(until=time.monotonic() + config.budget_seconds,
                                  idle_seconds=config.idle_seconds)
    return DispatcherSummary(**asdict(counts), in_flight=dispatcher.in_flight(), idle=idle)


JOB = MaintenanceJob(
    name="dispatcher",
    run_pass=run,
    config=DispatcherConfig,
    schedule_setting="dispatcher_every",
    summary=DispatcherSummary,
    description="Claims batches of the queues with a consumer and invokes the function "
                "with SQS-shaped events",
)
