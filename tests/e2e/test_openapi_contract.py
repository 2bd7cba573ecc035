"""The OpenAPI document says exactly what the API accepts: the schemathesis CLI runs every
check it has, in every phase (examples, coverage, fuzzing, stateful), against ``tierq dev``,
and finds nothing:

    schemathesis run "$URL/v1/openapi.json" --checks all \\
        --exclude-checks ignored_auth,missing_required_header,unsupported_method \\
        --generation-codec utf-8 -H "Authorization: Bearer local-admin" \\
        --request-timeout 25 --max-response-time 25

Left out are the checks only API Gateway can answer: ``ignored_auth`` and
``missing_required_header`` (the local gateway lets a loopback request in as the local
admin; AWS's authoriser is tested in tests/handlers/test_access.py) and
``unsupported_method`` (an undeclared method is 405 in the error shape:
tests/e2e/test_api.py). Claims long-poll up to 20 s (``wait_seconds``), so a request may
take that long: 25 s for the timeout and the response-time check.

The rules JSON Schema cannot state are the hooks of tests/e2e/contract_hooks.py, each
explained there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
# Test cases per operation in the fuzzing and stateful phases (the coverage phase's are fixed
# by the document); the whole run stays within the suite's budget.
MAX_EXAMPLES = int(os.environ.get("TIERQ_CONTRACT_EXAMPLES", "5"))
SEED = os.environ.get("TIERQ_CONTRACT_SEED", "1")
TIME_LIMIT_SECONDS = 420
# The checks only API Gateway answers (see the module docstring).
EXCLUDED = "ignored_auth,missing_required_header,unsupported_method"
LONG_POLL_ALLOWANCE = "25"


def schemathesis_command(base_url: str) -> list[str]:
    cli = Path(sys.executable).with_name("schemathesis")
    return [str(cli), "run", f"{base_url}/v1/openapi.json",
            "--checks", "all", "--exclude-checks", EXCLUDED,
            "--generation-codec", "utf-8",
            # the local gateway takes a request without claims as the local admin; the header
            # tells schemathesis the request is authenticated (it is never read locally)
            "-H", "Authorization: Bearer local-admin",
            "--request-timeout", LONG_POLL_ALLOWANCE, "--max-response-time", LONG_POLL_ALLOWANCE,
            "--max-examples", str(MAX_EXAMPLES), "--seed", SEED,
            "--generation-database", "none", "--no-color"]


def test_schemathesis_finds_nothing(base_url: str, clean_stores: None) -> None:
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.e2e.contract_hooks",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                       os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    run = subprocess.run(schemathesis_command(base_url), cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=TIME_LIMIT_SECONDS)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-20_000:]
    generated = re.search(r"(\d+) generated", output)
    assert generated and int(generated[1]) >= 500, output[-3_000:]
    operations = re.search(r"Operations:\s+(\d+) selected", output)
    assert operations and int(operations[1]) >= 20, output[-3_000:]
    print(f"schemathesis, every check: {generated[1]} test cases in "
          f"{time.monotonic() - started:.0f}s")


@pytest.mark.parametrize("text", [
    "00:00", "23:59", "23:59:59", "02:30", "24:00", "12:60", "12:00:60", "2:30", "02:30\n",
    "\uff10\uff12:\uff13\uff10", "02:30:", "02:30:5", " 02:30", "",
])
def test_the_documents_time_of_day_is_exactly_what_the_parser_takes(text: str) -> None:
    from tierq.models.schedules import DAILY_TIME_PATTERN, parse_daily_time

    documented = re.fullmatch(DAILY_TIME_PATTERN.strip("^$"), text) is not None
    try:
        parse_daily_time(text)
        parsed = True
    except ValueError:
        parsed = False
    assert documented is parsed


def test_the_documents_time_zones_are_the_ones_taken() -> None:
    from tierq.models.schedules import ScheduleIn, zone

    schema = ScheduleIn.model_json_schema()["properties"]["timezone"]
    pattern = next(b["pattern"] for b in schema["anyOf"] if b.get("type") == "string")
    names = pattern.removeprefix("^(").removesuffix(")$").replace("\\+", "+").split("|")
    assert "Europe/Berlin" in names and "UTC" in names and "Etc/GMT+5" in names
    assert "localtime" not in names
    for name in names:
        zone(name)
        assert re.fullmatch(pattern.strip("^$"), name)
    for other in ("Europe/Berlin ", "europe/berlin", "Etc/GMT+", "localtime", "UTC|UTC"):
        assert not re.fullmatch(pattern.strip("^$"), other)


@pytest.mark.parametrize("text", [
    "* * * * *", "30 2 * * *", "0 */5 * * * *", " 15\t30 2 * * mon-fri ", "@daily", "@HOURLY",
    "@Yearly ", "0 0 29 2 *", "0 0 L * *", "0 0 * * 5#3", "", "   ", "@never", "@daily x",
    "1 2 3 4", "1 2 3 4 5 6 7", "61 * * * *", "0 0 30 2 *", "x y z w v",
])
def test_every_cron_taken_has_the_documents_form(text: str) -> None:
    """The document gives cron expressions a form (an alias, or 5 or 6 fields); every
    expression taken has it (which fields croniter reads, and whether the calendar has a
    date they match, is left to the contract run's hook)."""
    from tierq.models.schedules import CRON_PATTERN, normalize_cron

    try:
        normalize_cron(text)
    except ValueError:
        return
    assert re.fullmatch(CRON_PATTERN.removeprefix("^").removesuffix("$"), text)
