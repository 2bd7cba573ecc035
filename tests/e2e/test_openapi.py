"""The served OpenAPI document: valid, complete, and true — schemathesis generates requests
from it against ``tierq dev`` and checks that nothing is a 5xx and that every response
matches the documented schema."""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from openapi_spec_validator import validate
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, response_schema_conformance

from tierq.devserver.template import Template

pytestmark = pytest.mark.e2e

# Per operation and generation mode; the whole run stays under two minutes in the suite.
# Deeper runs: TIERQ_FUZZ_EXAMPLES=200 TIERQ_FUZZ_SECONDS=1800 pytest tests/e2e/test_openapi.py
MAX_EXAMPLES = int(os.environ.get("TIERQ_FUZZ_EXAMPLES", "10"))
TIME_BUDGET_SECONDS = float(os.environ.get("TIERQ_FUZZ_SECONDS", "100"))


def test_served_document_is_valid_openapi_covering_every_route(base_url: str) -> None:
    from tests.handlers.support import REPO

    document = httpx.get(f"{base_url}/v1/openapi.json").json()
    validate(document)
    served = {(m.upper(), p) for p, item in document["paths"].items() for m in item
              if m in ("get", "put", "post", "delete", "patch")}
    template = Template.load(REPO / "template.yaml")
    assert served == {(r.method, r.path) for r in template.routes}


def _cap_long_polls(case: Any) -> None:
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("wait_seconds"), int | float) \
            and not isinstance(body.get("wait_seconds"), bool):
        body["wait_seconds"] = min(body["wait_seconds"], 0.2)  # no 20 s long-polls here


def test_generated_requests_get_no_5xx_and_documented_responses(base_url: str,
                                                                clean_stores: None) -> None:
    """Every operation of the served document, valid and invalid requests alike."""
    api = schemathesis.openapi.from_url(f"{base_url}/v1/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 20
    started = time.monotonic()
    failures: list[str] = []
    calls = 0
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for operation in operations:
            if time.monotonic() - started > TIME_BUDGET_SECONDS:
                pytest.fail(f"schemathesis took over {TIME_BUDGET_SECONDS:.0f}s "
                            f"({calls} requests)")

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
                      database=None, suppress_health_check=list(HealthCheck))
            def run(case: Any) -> None:
                nonlocal calls
                _cap_long_polls(case)
                calls += 1
                case.call_and_validate(base_url=base_url, timeout=30,
                                       checks=[not_a_server_error, response_schema_conformance])

            try:
                run()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # nothing to get wrong: no input
            except (Exception, BaseExceptionGroup) as exc:  # collect every failure, then report
                failures.append(f"{mode.value} {operation.method.upper()} {operation.path}: "
                                f"{exc}")
    assert not failures, "\n\n".join(failures)
    assert calls >= len(operations) * MAX_EXAMPLES // 2
    print(f"schemathesis: {calls} requests over {len(operations)} operations in "
          f"{time.monotonic() - started:.0f}s")
