"""The scheduled functions over a sharded deployment (``TIERQ_SHARD_URLS``, docs/architecture.md
§14): a tick runs its job's pass on every shard at once, each under the shard's own deadline
(the job's time budget plus the shard's call limit, ``ShardedTierq.on_shard``), so a slow or
stopped shard delays only its own pairs. A shard that does not answer is named in the tick's
output (``shards_down``), logged as a warning and counted (``ShardDown``, per shard); the
tick fails only when no shard answered (as a tick over one database that does not answer
fails today). Without shards the pass runs on the one engine in the caller's thread,
exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, is_dataclass
from typing import Any, TypeVar

from tierq.aws import metrics
from tierq.aws.runtime import engine, logger
from tierq.engine import Tierq
from tierq.logic.homes import ShardDown
from tierq.sharded import ShardedTierq

T = TypeVar("T")
SINGLE = "default"  # the name shard_engines() gives the one engine of a deployment


def per_shard(call: Callable[[str, Tierq], T], *, waits: float = 0.0
              ) -> dict[str, T | ShardDown]:
    """``call(shard, engine)`` for every shard, in parallel, each under the shard's deadline
    (``waits``: what the call spends by design, its pass's budget): {shard: its result, or
    the ShardDown of a shard that did not answer}. Without shards: ``call`` on the one engine
    in this thread, its errors raised."""
    current = engine()
    if isinstance(current, Tierq):
        return {SINGLE: call(SINGLE, current)}
    return on_every_shard(current, call, waits=waits)


def on_every_shard(sharded: ShardedTierq, call: Callable[[str, Tierq], T], *,
                   waits: float = 0.0) -> dict[str, T | ShardDown]:
    """``per_shard`` over the shards of ``sharded``."""
    def one(name: str) -> T | ShardDown:
        try:
            return sharded.on_shard(name, lambda tq: call(name, tq), waits=waits)
        except ShardDown as exc:
            return exc

    names = list(sharded.engines)
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


def forget_homes(shard: str, summary: Any) -> None:
    """After a shard's reaper forgot idle pairs (their home record there went with them):
    drop the copies of their homes on the other shards (``ShardedTierq.forget_homes``)."""
    current = engine()
    forgotten = getattr(summary, "forgotten", None)
    if forgotten and isinstance(current, ShardedTierq):
        missed = current.forget_homes(shard, forgotten)
        if missed:
            logger.warning("reaper: some copies of forgotten pairs' homes were not dropped "
                           "(a later pass or lookup settles them)", extra={"pairs": missed})


def merge_summaries(summaries: Iterable[Any]) -> dict[str, Any]:
    """One summary of the shards' (dataclasses or mappings): numbers summed, lists joined,
    mappings merged with their numbers summed, flags true when true on every shard."""
    out: dict[str, Any] = {}
    for summary in summaries:
        values = asdict(summary) if is_dataclass(summary) and not isinstance(summary, type) \
            else dict(summary)
        for name, value in values.items():
            if name not in out:
                out[name] = list(value) if isinstance(value, list) else \
                    dict(value) if isinstance(value, dict) else value
            elif isinstance(value, bool):
                out[name] = out[name] and value
            elif isinstance(value, int | float):
                out[name] += value
            elif isinstance(value, list):
                out[name].extend(value)
            elif isinstance(value, dict):
                for key, item in value.items():
                    out[name][key] = out[name].get(key, 0) + item \
                        if isinstance(item, int | float) else item
    return out
