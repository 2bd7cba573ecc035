"""``POST /v1/queues/{queue}/payloads/fetch`` through the function API Gateway invokes, on
the real stores: a caller pinned to a tenant that names another tenant's pointer is refused
(403) before anything is looked up for that tenant (the home of its pair, the task)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.handlers.support import Invoke
from tierq.aws.runtime import engine
from tierq.core.pointers import Pointer

ACME = {"tenant": "acme"}


def test_a_pointer_of_another_tenant_is_refused_before_any_lookup(
        call: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    looked: list[Any] = []
    tq = engine()
    real = tq.engine_of

    def engine_of(*args: Any, **kwargs: Any) -> Any:  # (a spy: the lookup still runs)
        looked.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(tq, "engine_of", engine_of)
    other = Pointer("any-bucket", "tenants/globex/0190b8a0-0000-7000-8000-000000000001")
    body = {"pointer": other.payload(), "task_id": "0190b8a0-0000-7000-8000-0000000000aa"}
    reply = call("POST", "/v1/queues/jobs/payloads/fetch", body, claims=ACME)
    assert reply.status == 403, reply.body
    assert "not one of the caller's payloads" in str(reply.body)
    assert looked == []
