"""schemathesis hooks of the contract run (tests/e2e/test_openapi_contract.py), loaded by the
CLI through ``SCHEMATHESIS_HOOKS=tests.e2e.contract_hooks``.

Everything the API refuses, its OpenAPI document says, with exceptions that JSON
Schema has no words for (the document says them in its descriptions). A valid request
(positive mode) is brought inside them just before it is sent; an invalid one goes as
generated. Each is checked by a test of its own:

- ``run_at`` at most a year ahead of *now*: a bound that moves with the clock
  (tests/handlers/test_http_handlers.py, bad enqueues).
- A backoff's ``cap_seconds`` not below its ``base_seconds`` (given or their defaults): a
  comparison of two fields (tests/handlers/test_http_handlers.py).
- A ``cron`` expression croniter reads and that matches some date (``0 0 30 2 *`` never
  does): a calendar question (tests/e2e/test_schedules_http.py).
- A task's ``after`` names tasks that exist (ids of the caller's tenant, or refs of the same
  flow, unique and without a cycle), and ``wait_timeout_seconds`` comes with it: questions
  of the stored tasks and of the graph, not of one field (tests/integration/test_flows.py,
  tests/handlers/test_flows_http.py). A valid request is sent without parents.
- A queue's ``consumer.function`` one the deployment allows (on AWS the stack's allow-list;
  locally a function of the template or an importable ``module:function``): a question of
  the deployment, not of the request's shape (tests/dispatch, the allow-list). The run
  names the demo's consumer, which the local stack can import.
- A ``traceparent`` header: schemathesis makes header values of letters and digits only, so
  the header's pattern (``00-<hex>-<hex>-<hex>``) is one it cannot meet, and it sends what it
  has ("0") as valid. A valid request carries a valid traceparent instead
  (tests/handlers/test_traces_http.py checks the header's refusals).

- A big payload's ``size`` within the deployment's ``TIERQ_MAX_OFFLOADED_PAYLOAD_BYTES``
  (a setting, not the document's bound of 5 GiB), and a pointer's ``s3Key`` one the store
  could hold (no ``..`` or ``//`` segment), and a fetch naming no task (a made-up one
  carries no object): tests/integration/test_payloads.py, tests/worker/test_big_payloads.py.

None is API Gateway's own behaviour: the run has no hook for that (the checks only API
Gateway answers are excluded on the command line instead).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis
from schemathesis import GenerationMode

from tierq.config import Settings
from tierq.models.queues import BackoffSettings
from tierq.models.schedules import normalize_cron
from tierq.models.tasks import MAX_DELAY_SECONDS
from tierq.models.traces import traceparent_problem

# a day inside the bound, so that the request is still valid when it arrives
LATEST_RUN_AT = timedelta(seconds=MAX_DELAY_SECONDS - 86_400)
DEFAULT_CAP = BackoffSettings.model_fields["cap_seconds"].default
DEFAULT_BASE = BackoffSettings.model_fields["base_seconds"].default
A_CRON = "*/5 * * * *"
A_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CONTRACT_CONSUMER = "tierq.local.demo:push_consumer"
MAX_OFFLOADED = Settings.fields["max_offloaded_payload_bytes"].default


def _positive(case: Any) -> bool:
    meta = getattr(case, "meta", None)
    generation = getattr(meta, "generation", None)
    # the stateful phase sends valid requests only
    return generation is None or generation.mode is GenerationMode.POSITIVE


def _within_a_year(task: dict[str, Any]) -> None:
    if not isinstance(task.get("run_at"), str):
        return
    try:
        # (RFC 3339 allows a lower-case "z", which fromisoformat does not read)
        at = datetime.fromisoformat(task["run_at"].upper())
    except ValueError:
        return
    latest = datetime.now(UTC) + LATEST_RUN_AT
    if at.tzinfo is not None and at > latest:
        task["run_at"] = latest.isoformat()


def _cap_not_below_base(backoff: dict[str, Any]) -> None:
    base, cap = backoff.get("base_seconds", DEFAULT_BASE), backoff.get("cap_seconds", DEFAULT_CAP)
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (base, cap))
    if numbers and cap < base:
        backoff["cap_seconds"] = base


def _a_cron_that_fires(body: dict[str, Any]) -> None:
    if isinstance(body.get("cron"), str):
        try:
            normalize_cron(body["cron"])
        except ValueError:
            body["cron"] = A_CRON


def _without_parents(task: dict[str, Any], index: int, flow: bool) -> None:
    task.pop("after", None)
    task.pop("wait_timeout_seconds", None)
    if flow:
        task["ref"] = f"t{index}"  # unique in the request


def _a_traceparent_it_cannot_write(headers: Any) -> None:
    if isinstance(headers, MutableMapping):  # (a case's headers: a case-insensitive mapping)
        for name, value in list(headers.items()):
            if name.lower() == "traceparent" and (
                    not isinstance(value, str) or traceparent_problem(value) is not None):
                headers[name] = A_TRACEPARENT


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if _positive(case):
        _a_traceparent_it_cannot_write(getattr(case, "headers", None))
    body = case.body
    if not _positive(case) or not isinstance(body, dict):
        return
    tasks = body.get("tasks") if isinstance(body.get("tasks"), list) else [body]
    flow = getattr(case, "path", "") == "/v1/flows"
    for index, task in enumerate(tasks):
        if isinstance(task, dict):
            _within_a_year(task)
            _without_parents(task, index, flow)
    if isinstance(body.get("backoff"), dict):
        _cap_not_below_base(body["backoff"])
    _a_cron_that_fires(body)
    if isinstance(body.get("consumer"), dict) and "function" in body["consumer"]:
        body["consumer"]["function"] = CONTRACT_CONSUMER
    _a_payload_the_store_takes(case, body)


def _a_payload_the_store_takes(case: Any, body: dict[str, Any]) -> None:
    path = getattr(case, "path", "")
    if path.endswith("/payloads") and isinstance(body.get("size"), int):
        body["size"] = min(body["size"], MAX_OFFLOADED)
    pointer = body.get("pointer")
    if path.endswith("/payloads/fetch") and isinstance(pointer, list) and len(pointer) == 2 \
            and isinstance(pointer[1], dict):
        pointer[1]["s3Key"] = "tenants/_/contract"
        body.pop("task_id", None)  # (a made-up task carries no object: 403)
