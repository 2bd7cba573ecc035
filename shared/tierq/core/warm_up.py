"""Everything tierq defers to first use, done now: for a process that lives long (a worker,
a service, a benchmark's worker) and wants its first calls as fast as its later ones.

A Lambda function's cold start pays only for what its requests use: modules are imported on
first use (``tierq.core.lazy.lazy_module``), dataclasses' methods generated at their first
instance (``lazy_dataclass``) and pydantic models and adapters built at their first
validation (``tierq.models.base.DEFERRED``). A long-running process pays the same costs
inside its first enqueue, claim and ack instead (some 60 to 100 ms here), which shows as a
slow first call and, in a benchmark's short phase, as several microseconds a task.
:func:`warm_up` pays them up front.

| what is deferred | how it is done now |
| --- | --- |
| the modules of the hot path (``HOT_PATH``) | imported |
| a ``lazy_dataclass`` of any loaded ``tierq`` module | its methods generated |
| a deferred pydantic model of any loaded ``tierq`` module | ``model_rebuild`` |
| a deferred module-level ``TypeAdapter`` of any loaded ``tierq`` module | ``rebuild`` |
| an adapter made on first call (``tierq.models.base.adapter_on_first_call``) | made, ``rebuild`` |
| a ``LazyNamedTuple`` of any loaded ``tierq`` module (the store's rows) | its methods generated |
| CPython's collector, set for short scripts | set for a worker (``tierq.core.collector``) |
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType

from pydantic import BaseModel, TypeAdapter

from tierq.core import collector, lazy
from tierq.models.base import adapters_on_first_call

# What an enqueue, a claim and the lease outcomes import on first use (tierq.engine reads
# them through lazy modules; logic/enqueue.py the big payloads' code; an ack with
# TIERQ_ACK_GROUP_COMMIT its gathering).
HOT_PATH = ("tierq.engine", "tierq.logic.enqueue", "tierq.logic.claim", "tierq.logic.leases",
            "tierq.logic.tiering", "tierq.logic.idempotency", "tierq.models.leases",
            "tierq.models.lease_outcomes", "tierq.models.tasks", "tierq.logic.payloads",
            "tierq.logic.ack_gathering")


@dataclass(frozen=True, slots=True)
class WarmedUp:
    """What :func:`warm_up` built: modules imported, dataclasses (and row classes)
    generated, pydantic models and adapters built (each counted once; a second call finds
    nothing left), and the collector's young-generation threshold after it."""

    modules: int
    dataclasses: int
    models: int
    adapters: int
    young_threshold: int


def warm_up(modules: tuple[str, ...] = HOT_PATH, *, tune_collector: bool = True) -> WarmedUp:
    """Import ``modules``, then build whatever every loaded ``tierq`` module still defers;
    with ``tune_collector``, set CPython's collector for a worker (``collector.tune``: it
    is the process's, so a host that manages it itself passes False)."""
    before = len(sys.modules)
    for name in modules:
        importlib.import_module(name)
    imported = len(sys.modules) - before
    generated = models = adapters = 0
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if not _ours(name) \
                or isinstance(module, lazy.LazyModule) or not isinstance(module, ModuleType):
            continue
        for value in list(vars(module).values()):
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, type):
                if lazy.is_deferred_dataclass(value):
                    lazy.generate(value)
                    generated += 1
                elif lazy.is_deferred_namedtuple(value):
                    lazy.generate_namedtuple(value)
                    generated += 1
                elif issubclass(value, BaseModel) and not value.__pydantic_complete__ \
                        and _ours(value.__module__):
                    value.model_rebuild(force=True)
                    models += 1
            elif isinstance(value, TypeAdapter) and not value.pydantic_complete:
                value.rebuild(force=True)
                adapters += 1
    for adapter in adapters_on_first_call():  # (the engine's batches of tasks and items)
        if not adapter.pydantic_complete:
            adapter.rebuild(force=True)
            adapters += 1
    if tune_collector:
        collector.tune()
    return WarmedUp(imported, generated, models, adapters, collector.young_threshold())


def _ours(module: str) -> bool:
    return module == "tierq" or module.startswith("tierq.")
