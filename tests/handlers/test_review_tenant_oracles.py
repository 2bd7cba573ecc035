"""Review: what a caller pinned to a tenant can still learn of a queue it never used.

Both tests fail on i28-e-small: the README now says no answer tells a tenant which queue
names others use, yet (1) a queue an admin configured shows its settings to any tenant that
names it, and (2) a claim on a queue whose queue-wide ``max_leased`` other tenants fill answers
``retry_after_ms`` where a name nobody used answers without it."""

from __future__ import annotations

from typing import Any

from tests.handlers.support import Invoke

ACME = {"sub": "worker-1", "tenant": "acme"}
GLOBEX = {"sub": "worker-2", "tenant": "globex"}


def _without_name(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if k != "queue"}


def test_a_configured_queue_of_another_tenant_looks_like_a_name_nobody_used(
        call: Invoke) -> None:
    assert call("PUT", "/v1/queues/globex-payroll", {"lease_seconds": 42}).status == 200
    assert call("POST", "/v1/queues/globex-payroll/tasks", {"tasks": [{"payload": 1}]},
                claims=GLOBEX).status == 200
    theirs = call("GET", "/v1/queues/globex-payroll", claims=ACME)
    nobodys = call("GET", "/v1/queues/never-used", claims=ACME)
    assert theirs.status == nobodys.status == 200
    assert _without_name(theirs.body) == _without_name(nobodys.body)


def test_a_claim_tells_nothing_of_other_tenants_use_of_a_queue_wide_limit(
        call: Invoke) -> None:
    assert call("PUT", "/v1/queues/jobs", {"max_leased": 1}).status == 200
    assert call("POST", "/v1/queues/jobs/tasks", {"tasks": [{"payload": 1}, {"payload": 2}]},
                claims=GLOBEX).status == 200
    held = call("POST", "/v1/queues/jobs/claims", {"max": 1}, claims=GLOBEX)
    assert len(held.body["tasks"]) == 1  # globex now fills the queue's max_leased
    theirs = call("POST", "/v1/queues/jobs/claims", {"max": 1}, claims=ACME)
    nobodys = call("POST", "/v1/queues/never-used/claims", {"max": 1}, claims=ACME)
    assert theirs.status == nobodys.status == 200
    assert theirs.body == nobodys.body  # today: {"tasks": [], "retry_after_ms": 1000}
