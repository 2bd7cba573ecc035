"""The OpenAPI document says exactly what the API accepts: schemathesis runs every check it
has (``--checks all``) on every operation, valid and invalid requests alike, against
``tierq dev``, and finds nothing. Left out are the checks that only API Gateway can answer
(``ignored_auth``, ``missing_required_header``: the local gateway lets a loopback request in
as the local admin; ``unsupported_method``: exercised in ``test_api.py``), as in

    schemathesis run URL/v1/openapi.json --checks all \\
        --exclude-checks ignored_auth,missing_required_header,unsupported_method \\
        --generation-codec utf-8

The few rules no OpenAPI document can state are kept apart here, named one by one in
``_within_unstatable_rules``: valid requests are brought inside them before they are sent
(invalid ones are sent as generated). Everything else the document says, the API does.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    CHECKS,
    ignored_auth,
    missing_required_header,
    unsupported_method,
)

from tierq.models.queues import BackoffSettings
from tierq.models.schedules import normalize_cron
from tierq.models.tasks import MAX_DELAY_SECONDS

pytestmark = pytest.mark.e2e

MAX_EXAMPLES = int(os.environ.get("TIERQ_CONTRACT_EXAMPLES", "6"))
TIME_BUDGET_SECONDS = float(os.environ.get("TIERQ_CONTRACT_SECONDS", "90"))
EXCLUDED = [ignored_auth, missing_required_header, unsupported_method]
# The local gateway takes a request without claims as the local admin; the header tells
# schemathesis the request is authenticated (the functions never read it locally).
AUTH = {"Authorization": "Bearer local-admin"}
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")


def _fresh_idempotency_key(case: Any) -> None:
    """An Idempotency-Key names one logical request: a client never sends one key with two
    bodies (that is 422 ``idempotency_key_reused``, whatever the document). A generated key
    is valid, or not, by its form; each request gets a fresh one of the same validity."""
    headers = case.headers or {}
    for name in list(headers):
        if name.lower() == "idempotency-key" and isinstance(headers[name], str) \
                and IDEMPOTENCY_KEY.fullmatch(headers[name]):
            headers[name] = str(uuid.uuid4())


def _within_unstatable_rules(case: Any) -> None:
    """Bring a valid request inside the rules a document cannot state."""
    query = case.query or {}
    # ?after= takes only a cursor the server minted (the `next` of an earlier page)
    query.pop("after", None)
    body = case.body
    if not isinstance(body, dict):
        return
    # run_at: at most a year ahead of now
    tasks = body.get("tasks") if isinstance(body.get("tasks"), list) else [body]
    latest = datetime.now(UTC) + timedelta(seconds=MAX_DELAY_SECONDS - 86_400)
    for task in tasks:
        if isinstance(task, dict) and isinstance(task.get("run_at"), str):
            try:
                too_late = datetime.fromisoformat(task["run_at"]) > latest
            except ValueError:
                continue
            if too_late:
                task["run_at"] = latest.isoformat()
    # cron: an expression croniter reads and that matches some date
    if isinstance(body.get("cron"), str):
        try:
            normalize_cron(body["cron"])
        except ValueError:
            body["cron"] = "*/5 * * * *"
    # backoff: cap_seconds (given, or its default) not below base_seconds
    backoff = body.get("backoff")
    if isinstance(backoff, dict) and isinstance(backoff.get("base_seconds"), int | float):
        cap = backoff.get("cap_seconds", BackoffSettings.model_fields["cap_seconds"].default)
        if isinstance(cap, int | float) and cap < backoff["base_seconds"]:
            backoff["cap_seconds"] = backoff["base_seconds"]
    # no 20 s long-polls here
    if isinstance(body.get("wait_seconds"), int | float) \
            and not isinstance(body.get("wait_seconds"), bool):
        body["wait_seconds"] = min(body["wait_seconds"], 0.2)


def test_schemathesis_finds_nothing(base_url: str, clean_stores: None) -> None:
    api = schemathesis.openapi.from_url(f"{base_url}/v1/openapi.json")
    # requests carry AUTH, as the CLI's `-H "Authorization: …"` (then it generates no
    # requests without it either); strings are any UTF-8 text
    api.config.generation.update(with_security_parameters=False, codec="utf-8")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 20
    checks = [check for check in CHECKS.get_all() if check not in EXCLUDED]  # loaded now
    assert len(checks) >= 11, [check.__name__ for check in checks]
    started = time.monotonic()
    failures: list[str] = []
    calls = 0
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        positive = mode is GenerationMode.POSITIVE
        for operation in operations:
            if time.monotonic() - started > TIME_BUDGET_SECONDS:
                pytest.fail(f"schemathesis took over {TIME_BUDGET_SECONDS:.0f}s "
                            f"({calls} requests)")

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
                      database=None, suppress_health_check=list(HealthCheck))
            def run(case: Any) -> None:
                nonlocal calls
                _fresh_idempotency_key(case)
                if positive:  # noqa: B023 (run is called at once, in this iteration)
                    _within_unstatable_rules(case)
                calls += 1
                case.call_and_validate(base_url=base_url, headers=AUTH, timeout=30,
                                       checks=checks, excluded_checks=EXCLUDED)

            try:
                run()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # nothing to get wrong: no input
            except (Exception, BaseExceptionGroup) as exc:  # collect every failure, then report
                failures.append(f"{mode.value} {operation.method.upper()} {operation.path}: "
                                f"{exc}")
    assert not failures, "\n\n".join(failures)
    assert calls >= len(operations) * MAX_EXAMPLES // 2
    print(f"schemathesis, every check: {calls} requests over {len(operations)} operations in "
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
    names = next(b["enum"] for b in schema["anyOf"] if b.get("type") == "string")
    assert "Europe/Berlin" in names and "UTC" in names and "localtime" not in names
    for name in names:
        zone(name)
