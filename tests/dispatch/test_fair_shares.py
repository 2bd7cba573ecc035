"""Push delivery shares its concurrency fairly, on real PostgreSQL and Valkey: a tenant whose
invocations are slow holds at most its share of its queue's running invocations while other
tenants of the queue have ready work, and a slow queue at most its share of the
dispatcher's threads while other queues have work (tierq.logic.dispatch, "Where the turns
stand"). The measure is how soon the fast work drains: within about one slow invocation,
not after the slow work's backlog."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.dispatch.journal import JOURNAL
from tests.support.polling import eventually
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions
from tierq.logic.dispatch import Dispatcher

pytestmark = pytest.mark.usefixtures("clean_stores")

SLOW = 1.0  # seconds each slow invocation sleeps (batches of one task)
CONSUMER = "tests.dispatch.consumers:fail_once"


def drain_time(tq: Tierq, functions: LocalFunctions, fast_ids: set[str], slow_queue: str,
               max_in_flight: int = 64, timeout: float = 30.0) -> float:
    """Run a dispatcher until every task of ``fast_ids`` ran; the seconds that took. The
    dispatcher stops once the slow work, alone then, runs four invocations at once (its
    running batches are waited for, the rest left queued)."""
    dispatcher = Dispatcher(tq.ctx, functions, max_in_flight=max_in_flight)
    done = threading.Event()

    def fast_done() -> bool:
        with JOURNAL.lock:
            return fast_ids <= set(JOURNAL.runs)

    began = time.monotonic()
    runner = threading.Thread(target=dispatcher.run, kwargs={
        "until": began + timeout, "idle_seconds": timeout, "should_stop": done.is_set})
    runner.start()
    try:
        while not fast_done() and time.monotonic() - began < timeout:
            time.sleep(0.01)
        took = time.monotonic() - began
        if fast_done():
            eventually(lambda: JOURNAL.running.get(slow_queue) == 4, timeout=10,
                       what="the slow work alone to use all four at once")
    finally:
        done.set()
        runner.join()
        dispatcher.close()
    assert fast_done(), f"the fast work did not drain within {timeout}s"
    return took


def ids(tasks: list[Any]) -> set[str]:
    return {str(t.id) for t in tasks}


def test_a_slow_tenant_holds_only_its_share_of_the_queues_concurrency(
        tq: Tierq, functions: LocalFunctions) -> None:
    """40 slow tasks of one tenant and 20 instant ones of another, four invocations at
    once: the slow tenant holds two while the fast one has work, so the fast one drains
    within about one slow invocation (0.4-0.5 s; without shares after five, 5.2 s), and the
    slow one takes all four once alone."""
    tq.put_queue("shared", {"consumer": {"function": CONSUMER, "batch_size": 1,
                                         "max_concurrency": 4}})
    tq.enqueue("shared", [{"payload": {"n": n, "sleep": SLOW}, "tenant": "a-slow"}
                          for n in range(40)])
    fast = tq.enqueue("shared", [{"payload": {"n": 100 + n}, "tenant": "b-fast"}
                                 for n in range(20)])
    took = drain_time(tq, functions, ids(fast), "shared")
    assert took < 2 * SLOW, f"the fast tenant took {took:.2f}s"
    assert JOURNAL.max_running["shared"] <= 4


def test_a_slow_queue_holds_only_its_share_of_the_dispatchers_threads(
        tq: Tierq, functions: LocalFunctions) -> None:
    """A queue without max_concurrency and slow invocations beside a queue of instant ones,
    on a dispatcher of four threads: the slow queue holds two while the other has work
    (the fast queue drains in 0.4 s; without shares it waits for a slow invocation to end
    and then runs on one thread, 2.2-3.2 s), and all four once alone."""
    tq.put_queue("slow", {"consumer": {"function": CONSUMER, "batch_size": 1}})
    tq.put_queue("quick", {"consumer": {"function": CONSUMER, "batch_size": 1}})
    tq.enqueue("slow", [{"payload": {"n": n, "sleep": SLOW}} for n in range(40)])
    fast = tq.enqueue("quick", [{"payload": {"n": 100 + n}} for n in range(20)])
    took = drain_time(tq, functions, ids(fast), "slow", max_in_flight=4)
    assert took < 1.5 * SLOW, f"the fast queue took {took:.2f}s"


@pytest.mark.parametrize("max_concurrency", [4, None])
def test_a_share_lends_what_its_tenant_cannot_use(
        tq: Tierq, functions: LocalFunctions, max_concurrency: int | None) -> None:
    """A tenant whose one long invocation runs with nothing more ready still counts among
    the tenants sharing the queue, yet its unused part goes to the tenant that has work:
    four invocations at once (three of the busy tenant), never a slot left idle while
    tasks wait (with shares that bind whatever the others can use: three at most)."""
    consumer: dict[str, Any] = {"function": CONSUMER, "batch_size": 1}
    if max_concurrency is not None:
        consumer["max_concurrency"] = max_concurrency
    tq.put_queue("lent", {"consumer": consumer})
    [long] = tq.enqueue("lent", [{"payload": {"n": 0, "sleep": 4 * SLOW}, "tenant": "b-one"}])
    tq.enqueue("lent", [{"payload": {"n": 1 + n, "sleep": 0.3}, "tenant": "a-many"}
                        for n in range(40)])
    dispatcher = Dispatcher(tq.ctx, functions, max_in_flight=4)
    done = threading.Event()
    runner = threading.Thread(target=dispatcher.run, kwargs={
        "until": time.monotonic() + 20, "idle_seconds": 20, "should_stop": done.is_set})
    runner.start()
    try:
        eventually(lambda: str(long.id) in JOURNAL.running_ids, timeout=5,
                   what="b-one's long invocation to start")
        peak, began = 0, time.monotonic()
        while time.monotonic() - began < 2 * SLOW:  # b-one's invocation runs all along
            with JOURNAL.lock:
                assert str(long.id) in JOURNAL.running_ids
                peak = max(peak, JOURNAL.running.get("lent", 0))
            time.sleep(0.01)
    finally:
        done.set()
        runner.join()
        dispatcher.close()
    assert peak == 4, f"{peak} invocations at most while a-many alone had work"


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a failure in the batch's way")


@pytest.mark.parametrize("where", ["claim", "event", "invoke", "settle", "forget",
                                   "record"])
def test_a_failing_batch_gives_back_what_it_counted(
        tq: Tierq, functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch,
        where: str) -> None:
    """Whatever step of a batch raises, the dispatcher's counts of its queue (running per
    tenant, in flight, batches that got tasks) come back to zero: a count left behind
    would hold a tenant at its share, or weaken the queue's backoff, for good."""
    from tierq.logic.dispatch import loop

    tq.put_queue("q", {"consumer": {"function": CONSUMER, "batch_size": 1,
                                    "max_concurrency": 2}})
    tq.enqueue("q", [{"payload": {"n": n}, "tenant": t} for n in range(3) for t in "ab"])
    dispatcher = Dispatcher(tq.ctx, functions, max_in_flight=4)
    target = {"claim": (dispatcher, "_claim_tenant"), "event": (loop, "sqs_event"),
              "invoke": (functions, "invoke"), "settle": (loop, "settle"),
              "forget": (loop.ready_tenants, "forget"),
              "record": (loop, "record_counts")}[where]
    monkeypatch.setattr(*target, _raise)
    try:
        for _ in range(3):
            dispatcher.dispatch_once("q")
        state = dispatcher._states["q"]
        assert (state.running, state.in_flight, state.fed) == ({}, 0, 0)
    finally:
        dispatcher.close()
