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
OTHER_JOBS = ("tierq.maintenance.reaper", "tierq.maintenance.gauges",
              "tierq.maintenance.cold_to_warm", "tierq.maintenance.delayed_mover")

# function -> tierq modules its import must not load
NOT_IMPORTED: dict[str, tuple[str, ...]] = {
    "enqueue": (*CLAIM_PATH, *DISPATCHER, *SCHEDULES, *LEASES, *ADMIN_ONLY, *ELSEWHERE,
                *OTHER_JOBS),
    "claim": (*DISPATCHER, *SCHEDULES, *ADMIN_ONLY, *ELSEWHERE, *OTHER_JOBS),
    "ack": (*CLAIM_PATH, *DISPATCHER, *SCHEDULES, *ADMIN_ONLY, *ELSEWHERE, *OTHER_JOBS),
    "admin": (*ELSEWHERE, "tierq.maintenance.registry", *OTHER_JOBS),
    "cold_to_warm": (*CLAIM_PATH, *DISPATCHER, *SCHEDULES, *ADMIN_ONLY, *ELSEWHERE,
                     "tierq.maintenance.reaper", "tierq.maintenance.gauges"),
    "cron_tick": (*CLAIM_PATH, *DISPATCHER, *LEASES, *ADMIN_ONLY, *ELSEWHERE, *OTHER_JOBS),
}

PROBE = """
import json, sys
import app
print(json.dumps(sorted(name for name in sys.modules if name.startswith("tierq"))))
"""


def imported_by(function: str) -> set[str]:
    code_dir = ROOT / "functions" / function
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(code_dir), str(ROOT / "shared")]),
           "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_SERVICE_NAME": "tierq",
           "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
           "LAMBDA_TASK_ROOT": str(code_dir)}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=code_dir, env=env,
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
