"""``warm_up`` (tierq.core.warm_up): after it, a fresh process's first enqueue, claim and ack
import no module, generate no dataclass, build no pydantic model or adapter and read no Lua
script (Tierq.warm_up); without it they do (so the probe can see what it checks). It also
sets the process's collector for a worker (tierq.core.collector), unless asked not to. Each
case runs in a fresh interpreter, as a worker process starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tierq.core.collector import YOUNG_THRESHOLD

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import gc, json, sys
import pydantic._internal._model_construction as construction
from pydantic import TypeAdapter
import dataclasses
from tierq import ClaimRequest, Tierq
from tierq.config import Settings

tq = Tierq(settings=Settings(database_url=sys.argv[1], valkey_url=sys.argv[2]))
tq.queue_settings("wu")
default_threshold = gc.get_threshold()[0]
warmed = (tq.warm_up() if sys.argv[3] == "warm"
          else tq.warm_up(tune_collector=False) if sys.argv[3] == "warm-untuned" else None)
built = []
complete = construction.complete_model_class
def spy(cls, *args, **kwargs):
    built.append(cls.__name__)
    return complete(cls, *args, **kwargs)
construction.complete_model_class = spy
rebuild = TypeAdapter.rebuild
def spy_adapter(self, *args, **kwargs):
    if not self.pydantic_complete:
        built.append(repr(self._type))
    return rebuild(self, *args, **kwargs)
TypeAdapter.rebuild = spy_adapter
generated = []
process = dataclasses._process_class
def spy_dataclass(cls, *args, **kwargs):
    generated.append(cls.__name__)
    return process(cls, *args, **kwargs)
dataclasses._process_class = spy_dataclass
import tierq.dal.warm_tier as warm_tier
read = []
source = warm_tier.script_source
def spy_source(name):
    read.append(name)
    return source(name)
warm_tier.script_source = spy_source
before = set(sys.modules)
tq.enqueue("wu", [{"payload": {"i": i}} for i in range(3)])
got = tq.claim("wu", ClaimRequest(max=3))
assert len(got) == 3, got
tq.ack("wu", got)
tq.close()
print(json.dumps({"modules": sorted(m for m in set(sys.modules) - before
                                    if m.startswith("tierq")),
                  "built": built, "generated": generated, "scripts": read,
                  "threshold": [default_threshold, gc.get_threshold()[0]],
                  "frozen": gc.get_freeze_count(),
                  "warmed": None if warmed is None else [warmed.modules, warmed.dataclasses,
                                                         warmed.models, warmed.adapters,
                                                         warmed.young_threshold]}))
"""


def first_calls(app_database_url: str, valkey_url: str, mode: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared")}
    done = subprocess.run([sys.executable, "-c", PROBE, app_database_url, valkey_url, mode],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


Probe = Callable[[str], dict[str, object]]


@pytest.fixture
def probe(app_database_url: str, valkey_url: str, valkey_cluster: bool,
          clean_stores: None) -> Probe:
    """``probe(mode)``: what a fresh process's first calls did (``first_calls``)."""
    if valkey_cluster:
        pytest.skip("the probe's engine talks to one node")
    return lambda mode: first_calls(app_database_url, valkey_url, mode)


def test_first_calls_build_nothing_after_warm_up(probe: Probe) -> None:
    cold = probe("cold")
    # the probe sees what the first calls defer: without warm_up they build it
    assert cold["built"] and cold["generated"], cold
    assert cold["scripts"], cold
    warm = probe("warm")
    assert warm["built"] == [] and warm["generated"] == [] and warm["modules"] == [], warm
    assert warm["scripts"] == [], warm  # (every Lua script read by warm_up)
    _modules, dataclasses, models, adapters, _young = warm["warmed"]  # type: ignore[misc]
    assert dataclasses > 0 and models > 0 and adapters > 0, warm


def test_warm_up_sets_the_collector_for_a_worker(probe: Probe) -> None:
    cold = probe("cold")
    default, after = cold["threshold"]  # type: ignore[misc]
    assert after == default < YOUNG_THRESHOLD and cold["frozen"] == 0, cold
    warm = probe("warm")
    assert warm["threshold"] == [default, YOUNG_THRESHOLD], warm
    assert warm["warmed"][-1] == YOUNG_THRESHOLD and warm["frozen"] > 0, warm  # type: ignore[index]
    untuned = probe("warm-untuned")
    assert untuned["threshold"] == [default, default] and untuned["frozen"] == 0, untuned
