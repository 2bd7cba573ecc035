"""Review findings on the per-tenant dispatcher (issue 28, point 1), on real PostgreSQL and
Valkey: each test fails on cfe3f4f."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from tests.dispatch.journal import JOURNAL
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions
from tierq.logic import dispatch
from tierq.logic.dispatch import Dispatcher

pytestmark = pytest.mark.usefixtures("clean_stores")


def test_one_ready_task_among_idle_registered_tenants_starts_one_batch(
        tq: Tierq, functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch) -> None:
    """``QueueState.listed`` counts every tenant registered on the queue (that is what
    ``tenants_with_ready_work`` returns today), not the tenants with ready work: after the
    one batch that found the only ready task, the pass starts a batch per registered tenant
    and each of them claims every tenant in turn, finding nothing."""
    tq.put_queue("fan", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                      "batch_size": 10}})
    idle = [f"idle{i:02d}" for i in range(30)]  # registered, their only task not yet due
    for tenant in idle:
        tq.enqueue("fan", [{"payload": {"n": 0}, "tenant": tenant, "delay_seconds": 3600}])
    tq.enqueue("fan", [{"payload": {"n": 1}, "tenant": "active"}])

    claims = 0
    empty_batches = 0
    lock = threading.Lock()
    claim_once = dispatch.claim_once  # type: ignore[attr-defined]
    batch_claim = Dispatcher._claim

    def counting_claim_once(*args: Any, **kwargs: Any) -> Any:
        nonlocal claims
        with lock:
            claims += 1
        return claim_once(*args, **kwargs)

    def counting_batch_claim(self: Dispatcher, *args: Any, **kwargs: Any) -> Any:
        nonlocal empty_batches
        tasks, listed = batch_claim(self, *args, **kwargs)
        if not tasks:
            with lock:
                empty_batches += 1
        return tasks, listed

    monkeypatch.setattr(dispatch, "claim_once", counting_claim_once)
    monkeypatch.setattr(Dispatcher, "_claim", counting_batch_claim)
    dispatcher = Dispatcher(tq.ctx, functions)
    try:
        # long enough for the one batch and a few idle polls (20 ms doubling)
        dispatcher.run(until=time.monotonic() + 0.3, idle_seconds=10)
        dispatcher.drain()
    finally:
        dispatcher.close()
    assert len(JOURNAL.runs) == 1
    # one batch with the task, then idle polls one after another (20, 40, 80, 160 ms):
    # a handful of empty claims of 31 tenants each, not one batch per registered tenant
    assert empty_batches <= 6, (empty_batches, claims)
    assert claims <= 7 * 31, claims


def test_a_raising_consumers_message_reaches_the_dispatchers_log(
        tq: Tierq, functions: LocalFunctions, caplog: pytest.LogCaptureFixture) -> None:
    """README: "The messages go to the dispatcher's log." Under ``tierq dev`` (local
    functions) a consumer that raises leaves ``function_error: RuntimeError`` on its tasks
    and its message is written nowhere: ``Invocation.detail`` is logged only for
    ``not_invoked``."""
    tq.put_queue("loud", {"consumer": {"function": "tests.dispatch.consumers:crash",
                                       "batch_size": 10}})
    [queued] = tq.enqueue("loud", [{"payload": {"n": 1}}])
    caplog.set_level(logging.DEBUG)
    Dispatcher(tq.ctx, functions).dispatch_once("loud")
    assert tq.get_task("loud", queued.id).last_error == "function_error: RuntimeError"
    assert "the consumer crashed" in caplog.text
