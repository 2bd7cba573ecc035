"""The engines' contract (tierq.contract): every public member of ``Tierq`` and of
``ShardedTierq`` is in ``Deployment`` or in the docstring's table of what stays outside it,
and each operation takes the same parameters, with the same defaults, on both engines.
(mypy checks their types: each engine subclasses ``Deployment``.)"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

import tierq.contract as contract
from tierq.contract import Deployment, QueueEngine
from tierq.engine import Tierq
from tierq.sharded import ShardedTierq

ENGINES = (Tierq, ShardedTierq)
ATTRIBUTES = {"settings"}  # the contract's instance attributes (set by each constructor)


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def members(protocol: type) -> set[str]:
    """A protocol's own members: its methods and properties, and its annotated attributes."""
    found: set[str] = set()
    for klass in protocol.__mro__:
        if klass in (QueueEngine, Deployment):
            found |= {name for name in (*vars(klass), *vars(klass).get("__annotations__", {}))
                      if not name.startswith("_")}
    return found


def outside() -> set[str]:
    """The members the contract's docstring lists as outside it (its table's first column)."""
    doc = contract.__doc__ or ""
    rows = [line for line in doc.splitlines() if line.startswith("| ``")]
    return {name for row in rows for name in re.findall(r"``(\w+)``", row.split("|")[1])}


def test_the_contract_holds_every_operation_of_each_engine() -> None:
    contracted = members(Deployment)
    assert {"enqueue", "claim", "ack", "dlq_replay", "dlq_purge", "purge_queue",
            "throughput", "running", "list_schedules", "detailed_counts", "run_job",
            "run_reaper", "engines", "default_shard", "on_shard"} <= contracted
    for engine in ENGINES:
        unlisted = public(engine) - contracted - outside()
        assert not unlisted, f"{engine.__name__}: not in the contract nor listed outside it"
    instance_attributes = {"db", "warm", "ctx", "homes", "specs", "by_tag"}
    listed_nowhere = outside() - public(Tierq) - public(ShardedTierq) - instance_attributes
    assert not listed_nowhere, "the docstring lists members no engine has"


def test_every_operation_is_on_both_engines() -> None:
    for name in members(Deployment) - ATTRIBUTES:
        for engine in ENGINES:
            assert hasattr(engine, name), f"{engine.__name__} lacks {name}"


@pytest.mark.parametrize("name", sorted(members(Deployment) - ATTRIBUTES
                                        - {"engines", "default_shard"}))
def test_each_operation_takes_the_same_parameters_on_both_engines(name: str) -> None:
    wanted = _parameters(getattr(Deployment, name))
    for engine in ENGINES:
        assert _parameters(getattr(engine, name)) == wanted, engine.__name__


def _parameters(function: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default)
            for p in inspect.signature(function).parameters.values()]


def test_a_single_database_is_one_shard_named_default() -> None:
    """The routing half of the contract on ``Tierq``, without a database (nothing of it
    connects): every task, every dead letter and every pair on the one shard."""
    from tierq.dal.shards import DEFAULT_SHARD

    tq = object.__new__(Tierq)  # (no pools: these answer from the shard list alone)
    assert tq.default_shard == DEFAULT_SHARD
    assert tq.engines == {DEFAULT_SHARD: tq}
    assert tq.engine_of("q", "t") is tq
    assert tq.shards_of_tasks("q", [], None) == {DEFAULT_SHARD: []}
    assert tq.on_shard(DEFAULT_SHARD, lambda e: e is tq) is True
    with pytest.raises(KeyError, match="'blue'"):
        tq.on_shard("blue", lambda e: None)
