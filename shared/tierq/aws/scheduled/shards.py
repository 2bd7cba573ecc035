"""The scheduled functions over a sharded deployment (``TIERQ_SHARD_URLS``, docs/architecture.md
§14): a tick runs its job's pass on every shard at once, each under the shard's own deadline
(the job's time budget plus the shard's call limit, ``ShardedTierq.on_shard``), so a slow or
stopped shard delays only its own pairs. A shard that does not answer is named in the tick's
output (``shards_down``), logged as a warning and counted (``ShardDown``, per shard); the
tick fails only when no shard answered (as a tick over one database that does not answer
fails). With one shard (one database) the pass runs on it in the caller's thread, its errors
raised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tierq.aws import metrics
from tierq.aws.runtime import engine, logger
from tierq.contract import Deployment
from tierq.engine import Tierq
from tierq.logic.homes import ShardDown
from tierq.maintenance.registry import merge_fields, summary_fields

T = TypeVar("T")


def per_shard(call: Callable[[str, Tierq], T], *, waits: float = 0.0
              ) -> dict[str, T | ShardDown]:
    """``call(shard, engine)`` for every shard of the deployment (``on_every_shard``)."""
    return on_every_shard(engine(), call, waits=waits)


def on_every_shard(deployment: Deployment, call: Callable[[str, Tierq], T], *,
                   waits: float = 0.0) -> dict[str, T | ShardDown]:
    """``call(shard, engine)`` for every shard, in parallel, each under the shard's deadline
    (``waits``: what the call spends by design, its pass's budget): {shard: its result, or
    the ShardDown of a shard that did not answer}. One shard: ``call`` in this thread, its
    errors raised."""
    names = list(deployment.engines)
    if len(names) == 1:
        return {names[0]: deployment.on_shard(names[0], lambda tq: call(names[0], tq),
                                              waits=waits)}

    def one(name: str) -> T | ShardDown:
        try:
            return deployment.on_shard(name, lambda tq: call(name, tq), waits=waits)
        except ShardDown as exc:
            return exc

    with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="tierq-tick") as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


def answered(job: str, results: Mapping[str, T | ShardDown]) -> dict[str, T]:
    """The results of the shards that answered; the others are logged as a warning (their
    pairs wait for a later tick). When none answered, the first one's ``ShardDown``."""
    down = shards_down(results)
    if down:
        logger.warning(f"{job}: {len(down)} shard(s) did not answer; their pairs wait",
                       extra={"shards_down": down})
        metrics.shard_down(job, down)
    got = {name: r for name, r in results.items() if not isinstance(r, ShardDown)}
    if not got:
        first = next(r for r in results.values() if isinstance(r, ShardDown))
        raise first
    return got


def shards_down(results: Mapping[str, Any]) -> dict[str, str]:
    """{shard: why} of the shards whose result is a ``ShardDown``."""
    return {name: r.message + (f" ({r.detail})" if r.detail else "")
            for name, r in results.items() if isinstance(r, ShardDown)}


def merge_summaries(summaries: Iterable[Any]) -> dict[str, Any]:
    """One summary of the shards' (dataclasses or mappings), added up as
    ``tierq.maintenance.registry.merge_fields`` says."""
    return merge_fields(summary_fields(summary) for summary in summaries)
