"""What each Lambda function imports at its cold start: nothing its requests never need
(docs/architecture.md, the Lambda runtime). Each handler module is imported in a fresh
interpreter, as Lambda does, and the tierq modules it loaded are compared with the ones it
must not load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (tierq.logic.ready_tenants is not in it: every admission notes its tenant there)
CLAIM_PATH = ("tierq.logic.claim", "tierq.logic.claim_replay")
DISPATCHER = ("tierq.logic.dispatch", "tierq.maintenance.dispatcher")
SCHEDULES = ("tierq.models.schedules", "tierq.logic.schedules", "tierq.maintenance.cron_tick")
LEASES = ("tierq.models.leases", "tierq.logic.leases")
ADMIN_ONLY = ("tierq.logic.dlq", "tierq.logic.throughput", "tierq.models.throughput")
ELSEWHERE = ("tierq.sharded", "tierq.logic.pair_moves", "tierq.dal.migrate", "tierq.logic.bulk",
             "tierq.cli", "tierq.client", "tierq.local")
ENQUEUE_PATH = ("tierq.logic.enqueue",)  # (the enqueue and admin functions' routes need it)
# the views of a queue and their envelopes: the admin function's (on a request for them)
QUEUE_VIEWS = ("tierq.models.queue_views",)
# the outcomes of a lease (ack, nack, release, heartbeat): not the claim function's requests'
LEASE_OUTCOMES = ("tierq.models.lease_outcomes",)
# big payloads' checks, records and uploads: by the first task whose payload is a pointer
BIG_PAYLOADS = ("tierq.logic.payloads", "tierq.dal.payload_store")
# the enqueue's and a task view's models and their envelopes: not a claim's nor an ack's
TASK_VIEWS = ("tierq.models.tasks", "tierq.models.envelopes")
# a flow's and a group's logic: by the first request that enqueues into, settles or cancels
# a task of one (every enqueue does: it counts both)
FLOWS_AND_GROUPS = ("tierq.logic.flows", "tierq.logic.groups")
OTHER_JOBS = ("tierq.maintenance.reaper", "tierq.maintenance.gauges",
              "tierq.maintenance.cold_to_warm", "tierq.maintenance.delayed_mover")

# function -> tierq modules its import must not load
NOT_IMPORTED: dict[str, tuple[str, ...]] = {
    "enqueue": (*CLAIM_PATH, *DISPATCHER, *SCHEDULES, *LEASES, *ADMIN_ONLY, *ELSEWHERE,
                *OTHER_JOBS, *QUEUE_VIEWS, *BIG_PAYLOADS),
    "claim": (*DISPATCHER, *SCHEDULES, *ADMIN_ONLY, *ELSEWHERE, *OTHER_JOBS, *ENQUEUE_PATH,
              *QUEUE_VIEWS, *LEASE_OUTCOMES, *TASK_VIEWS, *FLOWS_AND_GROUPS),
    "ack": (*CLAIM_PATH, *DISPATCHER, *SCHEDULES, *ADMIN_ONLY, *ELSEWHERE, *OTHER_JOBS,
            *ENQUEUE_PATH, *QUEUE_VIEWS, *TASK_VIEWS, *FLOWS_AND_GROUPS),
    # (the lease outcomes are the dispatcher's: it acks every batch it ran)
    "dispatcher": (*SCHEDULES, *ADMIN_ONLY, *ELSEWHERE, *OTHER_JOBS, *ENQUEUE_PATH,
                   *QUEUE_VIEWS, *TASK_VIEWS),
    "admin": (*ELSEWHERE, "tierq.maintenance.registry", *OTHER_JOBS, *DISPATCHER),
    "cold_to_warm": (*CLAIM_PATH, *DISPATCHER, *SCHEDULES, *ADMIN_ONLY, *ELSEWHERE,
                     *ENQUEUE_PATH, "tierq.maintenance.reaper", "tierq.maintenance.gauges",
                     *QUEUE_VIEWS, *LEASE_OUTCOMES),
    "cron_tick": (*CLAIM_PATH, *DISPATCHER, *LEASES, *ADMIN_ONLY, *ELSEWHERE, *OTHER_JOBS,
                  *QUEUE_VIEWS),
    # (the lease path: by the first expired lease a pass records)
    "reaper": (*CLAIM_PATH, *DISPATCHER, *SCHEDULES, *LEASES, *ADMIN_ONLY, *ELSEWHERE,
               *ENQUEUE_PATH, "tierq.maintenance.cold_to_warm",
               "tierq.maintenance.delayed_mover", *QUEUE_VIEWS, *LEASE_OUTCOMES),
}

PROBE = """
import json, sys
import app
print(json.dumps(sorted(name for name in sys.modules if name.startswith("tierq"))))
"""


# the dataclasses made on first use (tierq.core.lazy.lazy_dataclass) that an import made
LAZY_CLASSES_MADE = """
import dataclasses, json, sys
import app
modules = ("tierq.dal.lua_calls", "tierq.dal.warm_tier", "tierq.logic.idempotency",
           "tierq.logic.homes", "tierq.logic.admission", "tierq.dal.shards")
print(json.dumps(sorted(
    f"{name}.{cls_name}" for name in modules if name in sys.modules
    for cls_name, cls in vars(sys.modules[name]).items()
    if isinstance(cls, type) and cls.__module__ == name and dataclasses.is_dataclass(cls))))
"""


def imported_by(function: str, probe: str = PROBE) -> set[str]:
    code_dir = ROOT / "functions" / function
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(code_dir), str(ROOT / "shared")]),
           "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_SERVICE_NAME": "tierq",
           "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
           "LAMBDA_TASK_ROOT": str(code_dir)}
    done = subprocess.run([sys.executable, "-c", probe], cwd=code_dir, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("function", sorted(NOT_IMPORTED))
def test_a_function_imports_nothing_its_requests_never_need(function: str) -> None:
    loaded = imported_by(function)
    assert "tierq.engine" in loaded and "tierq.aws.runtime" in loaded  # (it did import)
    unwanted = sorted(name for name in loaded
                      if any(name == bad or name.startswith(f"{bad}.")
                             for bad in NOT_IMPORTED[function]))
    assert unwanted == [], f"{function} imports {unwanted} at its cold start"


def test_the_claim_function_imports_its_path_at_its_cold_start() -> None:
    """The other side: what every claim needs is imported before the first request."""
    loaded = imported_by("claim")
    assert {"tierq.logic.claim", "tierq.models.leases", "tierq.logic.leases"} <= loaded


def test_the_ack_function_imports_its_path_at_its_cold_start() -> None:
    """What every ack, nack, release and heartbeat needs is imported before the first
    request: the lease path, with the finish markers a wait for the task reads."""
    loaded = imported_by("ack")
    assert {"tierq.logic.leases", "tierq.models.leases", "tierq.models.lease_outcomes",
            "tierq.logic.waits"} <= loaded


def test_the_enqueue_function_imports_its_path_at_its_cold_start() -> None:
    """Every enqueue request takes its route and the enqueue logic: imported before the
    first request, the flows' and uploads' routes by the first request for one."""
    loaded = imported_by("enqueue")
    assert {"tierq.aws.http.routes.enqueue", "tierq.logic.enqueue"} <= loaded
    assert not {"tierq.aws.http.routes.flows", "tierq.aws.http.routes.payloads"} & loaded


# the task models and the task logic: the scheduled functions' (and migrate's) imports never
# make or show a task
TASKS = ("tierq.models.tasks", "tierq.models.envelopes", "tierq.models.traces",
         "tierq.logic.tasks", "tierq.logic.flows")


@pytest.mark.parametrize("function",
                         ["cold_to_warm", "delayed_mover", "cron_tick", "migrate", "reaper"])
def test_a_scheduled_function_imports_no_task_model(function: str) -> None:
    loaded = imported_by(function)
    unwanted = sorted(name for name in TASKS if name in loaded)
    if function in ("delayed_mover", "reaper"):  # (they settle or forget tasks' flows)
        unwanted.remove("tierq.logic.flows")
    assert unwanted == [], f"{function} imports {unwanted} at its cold start"


@pytest.mark.parametrize("function", sorted(NOT_IMPORTED))
def test_a_function_makes_no_lazy_dataclass_at_its_cold_start(function: str) -> None:
    """The Lua call objects, the warm tier's outcomes, idempotency records, homes'
    summaries, admission tickets and shard specs are generated by the first request that
    makes one, not by the import."""
    made = imported_by(function, LAZY_CLASSES_MADE)
    assert made == set(), f"{function}'s import generated {sorted(made)}"


COLLECTOR = """
import gc, json
import app
print(json.dumps({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
"""
FUNCTIONS = sorted(path.parent.name for path in (ROOT / "functions").glob("*/app.py"))


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_function_initialises_with_the_collector_paused(function: str) -> None:
    """Each handler module imports inside ``tierq.core.cold_start.initialising``: what its
    import made is frozen out of later collections, and the collector runs again after."""
    code_dir = ROOT / "functions" / function
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code_dir), str(ROOT / "shared")]),
           "POWERTOOLS_TRACE_DISABLED": "true", "AWS_REGION": "us-east-1"}
    done = subprocess.run([sys.executable, "-c", COLLECTOR], cwd=code_dir, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["enabled"] is True
    assert state["frozen"] > 10_000, state  # the handler's modules, not a handful of objects


def test_initialising_pauses_the_collector_then_restores_it() -> None:
    import gc

    from tierq.core.cold_start import initialising

    was = gc.isenabled()
    try:
        gc.enable()
        with initialising():
            assert not gc.isenabled()
            kept = [[]]  # made inside: frozen at the end
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0 and kept
        gc.disable()
        with initialising():
            pass
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.unfreeze()
        if was:
            gc.enable()
        else:
            gc.disable()


ROWS_MADE = """
import json, sys
import app
rows = sys.modules["tierq.dal.store.rows"]
print(json.dumps(sorted(name for name, cls in vars(rows).items()
                        if isinstance(cls, type) and cls.__module__ == rows.__name__
                        and "_make" in cls.__dict__)))
"""


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_function_generates_no_row_class_at_its_cold_start(function: str) -> None:
    """The store's row classes (``tierq.core.lazy.LazyNamedTuple``) are generated by their
    first row, not by the import."""
    made = imported_by(function, ROWS_MADE)
    assert made == set(), f"{function}'s import generated {sorted(made)}"


PAUSE_FIRST = """
import json, sys
before = set(sys.modules)
import tierq.core.cold_start
print(json.dumps(sorted(name for name in set(sys.modules) - before)))
"""


def test_the_collector_is_paused_before_any_of_tierqs_modules_load() -> None:
    """A handler's first line imports ``tierq.core.cold_start``; what that loads runs with
    the collector still on, so it is the package and the module alone (no classes): a
    collection there walked every object the runtime had made (~4 ms at a cold start)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared")}
    done = subprocess.run([sys.executable, "-c", PAUSE_FIRST], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert [name for name in loaded if name.startswith("tierq")] == [
        "tierq", "tierq.core", "tierq.core.cold_start"]
