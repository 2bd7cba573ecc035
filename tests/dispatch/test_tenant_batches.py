"""Push delivery keeps tenants apart, on real PostgreSQL and Valkey: a batch holds one
tenant's tasks, so what one tenant's record makes a function do (raise with the record in
its message) never lands on another tenant's tasks; the dispatcher serves the tenants with
ready work in turn, so a tenant with a large backlog does not starve one with a task; how
many batches run at once follows the batches that find work, not the tenants listed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis

from tests.dispatch.journal import JOURNAL
from tests.dispatch.support import run_until, task_states
from tests.support.every_task import EVERY_TASK
from tests.support.polling import eventually
from tests.support.valkey_memory import memory_bound
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions
from tierq.logic import ready_tenants
from tierq.logic.dispatch import POLL_FIRST, TURN_TTL_SECONDS, Dispatcher, turn_key
from tierq.logic.dispatch import loop as dispatch_loop

pytestmark = pytest.mark.usefixtures("clean_stores")

CARD = "4111111111111111"
NO_BACKOFF = {"kind": "fixed", "base_seconds": 0, "jitter": 0}


def tenants_of(event: dict[str, Any]) -> set[str]:
    return {r["messageAttributes"]["tenant"]["stringValue"] for r in event["Records"]}


def test_one_tenants_failing_record_never_reaches_another_tenants_tasks(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    tq.put_queue("charges", {"consumer": {"function": "tests.dispatch.consumers:validate_all",
                                          "batch_size": 10},
                             "max_attempts": 2, "backoff": NO_BACKOFF})
    [bad] = tq.enqueue("charges", [{"payload": {"n": 0, "card": CARD}, "tenant": "acme"}])
    plain = tq.enqueue("charges", [{"payload": {"n": i}, "tenant": "globex"}
                                   for i in range(1, 6)])
    JOURNAL.keep_events = True

    run_until(tq, lambda: set(task_states(pg, "charges")) <= {"dead"})
    # every batch held one tenant's tasks; globex's ran once each and were acked
    assert all(len(tenants_of(e)) == 1 for e in JOURNAL.events)
    assert all(JOURNAL.runs[str(t.id)] == 1 for t in plain)
    assert tq.dlq_list("charges", tenant="globex") == []
    assert pg.execute(f"SELECT count(*) FROM {EVERY_TASK} WHERE tenant = 'globex'"
                      ).fetchone() == (0,)
    # acme's task failed as a whole batch: the error type only, never the message (which
    # quotes the record, card number and all)
    [dead] = tq.dlq_list("charges", tenant="acme")
    assert dead.id == bad.id and dead.attempts == 2
    assert dead.last_error == "function_error: ValidationError"
    assert tq.get_task("charges", bad.id).last_error == "function_error: ValidationError"
    [(stored,)] = pg.execute("SELECT string_agg(coalesce(last_error, ''), '|') "
                             "FROM tierq_tasks").fetchall()
    assert CARD not in stored


def test_a_batch_never_mixes_tenants(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    tq.put_queue("mixed", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                        "batch_size": 10, "max_concurrency": 3}})
    tenants = [f"t{i}" for i in range(7)]
    for start in range(0, 140, 20):
        tq.enqueue("mixed", [{"payload": {"n": n}, "tenant": tenants[n % 7]}
                             for n in range(start, start + 20)])
    JOURNAL.keep_events = True
    run_until(tq, lambda: task_states(pg, "mixed").total() == 0)
    assert len(JOURNAL.runs) == 140 and set(JOURNAL.runs.values()) == {1}
    assert all(len(tenants_of(e)) == 1 for e in JOURNAL.events)
    # full batches where a tenant had them (20 each: two batches of 10), not one per task
    assert len(JOURNAL.events) == 14


def test_tenants_take_turns_so_a_large_backlog_starves_no_one(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    # one invocation at a time: the order of the batches is the order of the turns
    tq.put_queue("turns", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                        "batch_size": 5, "max_concurrency": 1}})
    for start in range(0, 300, 100):
        tq.enqueue("turns", [{"payload": {"n": n}, "tenant": "big"}
                             for n in range(start, start + 100)])
    tq.enqueue("turns", [{"payload": {"n": 1000}, "tenant": "one"}])
    tq.enqueue("turns", [{"payload": {"n": 1001 + i}, "tenant": "seven"} for i in range(7)])
    JOURNAL.keep_events = True
    run_until(tq, lambda: task_states(pg, "turns").total() == 0)
    order = [tenants_of(e).pop() for e in JOURNAL.events]
    assert all(len(tenants_of(e)) == 1 for e in JOURNAL.events)
    # a turn visits each tenant with ready work once, in the order of their names: "one"
    # and "seven" are served in the first turn and "seven"'s second batch in the second,
    # while "big" has 60 batches to go ("one", with nothing left, passes its turn on)
    assert order == ["big", "one", "seven", "big", "seven"] + ["big"] * 58


def test_a_batch_with_tasks_lets_one_more_start_and_an_empty_one_stops_it(
        tq: Tierq, functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tenants' list may name tenants with nothing ready (the index lags): the batch
    that got the only ready task lets one more batch start, which finds nothing (each
    listed tenant passes its turn, and leaves the index) and stops there. The queue is not
    backed off meanwhile: its other batch still runs."""
    tq.put_queue("probe", {"consumer": {"function": "tests.dispatch.consumers:hold",
                                        "batch_size": 10}})
    for tenant in ("idle1", "idle2", "idle3"):  # registered, their tasks not due yet
        tq.enqueue("probe", [{"payload": {"n": 0}, "tenant": tenant, "delay_seconds": 3600}])
    tq.enqueue("probe", [{"payload": {"n": 1}, "tenant": "active"}])
    # (delayed tasks are not ready: the index names them as a lagging index would)
    tq.ctx.warm.note_ready_tenants("probe", ["idle1", "idle2", "idle3"])
    claimed: list[str] = []
    claim_once = dispatch_loop.claim_once

    def counting(ctx: Any, queue: str, request: Any, **kwargs: Any) -> Any:
        claimed.append(request.tenant)
        return claim_once(ctx, queue, request, **kwargs)

    monkeypatch.setattr(dispatch_loop, "claim_once", counting)
    dispatcher = Dispatcher(tq.ctx, functions)
    try:
        dispatcher.run(until=time.monotonic() + 0.5, idle_seconds=10)
        # (the batches the run started may still be claiming on the dispatcher's threads)
        eventually(lambda: len(claimed) >= 5 and dispatcher.in_flight() == 1, timeout=10,
                   what="the second batch to end")
        state = dispatcher._states["probe"]
        # "active" first (by name) gets its task; one more batch tries every tenant once
        assert claimed == ["active", "idle1", "idle2", "idle3", "active"]
        assert len(JOURNAL.runs) == 1 and state.in_flight == 1  # (its function waits)
        assert ready_tenants.tenants_after(tq.ctx, "probe", None, 10) == []  # all found empty
        assert state.width == 1  # one batch at a time again
        assert state.poll_delay == POLL_FIRST and state.not_before <= time.monotonic()
    finally:
        JOURNAL.gate.set()
        dispatcher.close()


def test_one_ready_task_among_idle_registered_tenants_starts_no_batch_per_tenant(
        tq: Tierq, functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the pass started as many batches as tenants were listed after a batch that
    got tasks, each trying every tenant: one ready task among 30 idle tenants gave 31 empty
    batches and 962 claims in 0.3 s, and the poll delay doubled with each."""
    tq.put_queue("fan", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                      "batch_size": 10}})
    idle = [f"idle{i:02d}" for i in range(30)]  # registered, their only task not yet due
    for tenant in idle:
        tq.enqueue("fan", [{"payload": {"n": 0}, "tenant": tenant, "delay_seconds": 3600}])
    tq.enqueue("fan", [{"payload": {"n": 1}, "tenant": "active"}])

    claims = 0
    empty_batches = 0
    lock = threading.Lock()
    claim_once = dispatch_loop.claim_once
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

    monkeypatch.setattr(dispatch_loop, "claim_once", counting_claim_once)
    monkeypatch.setattr(Dispatcher, "_claim", counting_batch_claim)
    dispatcher = Dispatcher(tq.ctx, functions)
    try:
        # long enough for the one batch and a few idle polls (20 ms doubling)
        dispatcher.run(until=time.monotonic() + 0.3, idle_seconds=10)
        dispatcher.drain()
    finally:
        dispatcher.close()
    assert len(JOURNAL.runs) == 1
    # one batch with the task, one more it let start, then idle polls one after another
    # (20, 40, 80, 160 ms): a handful of empty batches of 31 claims each
    assert empty_batches <= 6, (empty_batches, claims)
    assert claims <= 7 * 31, claims


def test_batches_ramp_up_to_max_concurrency_over_a_backlog(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    tq.put_queue("ramp", {"consumer": {"function": "tests.dispatch.consumers:fail_once",
                                       "batch_size": 2, "max_concurrency": 4}})
    tq.enqueue("ramp", [{"payload": {"n": n, "sleep": 0.05}, "tenant": f"t{n % 6}"}
                        for n in range(60)])
    run_until(tq, lambda: task_states(pg, "ramp").total() == 0)
    assert len(JOURNAL.runs) == 60 and set(JOURNAL.runs.values()) == {1}
    assert JOURNAL.max_running["ramp"] == 4  # as many at once as max_concurrency allows


def test_concurrent_batches_take_successive_tenants(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    tq.put_queue("together", {"consumer": {"function": "tests.dispatch.consumers:meet",
                                           "batch_size": 2, "max_concurrency": 3}})
    for tenant in ("t0", "t1", "t2"):
        tq.enqueue("together", [{"payload": {"n": n}, "tenant": tenant} for n in range(4)])
    JOURNAL.keep_events = True
    # each invocation returns once three run at once (a function error if they never do)
    JOURNAL.barrier = threading.Barrier(3, timeout=20)
    run_until(tq, lambda: task_states(pg, "together").total() == 0)
    assert len(JOURNAL.runs) == 12 and set(JOURNAL.runs.values()) == {1}
    order = [tenants_of(e).pop() for e in JOURNAL.events]
    # two rounds of three batches at once, each round one batch of each tenant
    assert sorted(order[:3]) == sorted(order[3:]) == ["t0", "t1", "t2"]


@pytest.fixture
def full_switch(valkey: redis.Redis) -> Iterator[redis.Redis]:
    """The session's private Redis, whose ``config_set("maxmemory", 1)`` makes every write
    that needs memory fail with a real OOM reply; restored afterwards."""
    with memory_bound(valkey):
        yield valkey


def cold(pg: psycopg.Connection[Any], queue: str) -> int:
    return task_states(pg, queue)["cold"]


def test_a_tenant_whose_cold_work_finds_the_warm_tier_full_passes_its_turn(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions,
        full_switch: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    tq.put_queue("full", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                       "batch_size": 10}})
    warm = tq.enqueue("full", [{"payload": {"n": n}, "tenant": "b-warm"} for n in range(3)])
    full_switch.config_set("maxmemory", 1)
    later = tq.enqueue("full", [{"payload": {"n": 10 + n}, "tenant": "a-cold"}
                                for n in range(3)])
    assert {t.state for t in later} == {"cold"}
    caplog.set_level(logging.INFO, logger="tierq.logic.dispatch")
    # "a-cold" comes first by name: its claim must bring its work warm, which the full
    # cache refuses; its turn passes to "b-warm", whose tasks are warm, in the same batch
    counts = Dispatcher(tq.ctx, functions).dispatch_once("full")
    assert (counts.batches, counts.acked) == (1, 3)
    assert set(JOURNAL.runs) == {str(t.id) for t in warm}
    assert "queue 'full', tenant 'a-cold': the warm tier is full; its turn passes" \
        in caplog.text
    assert cold(pg, "full") == 3  # waiting, not lost


def test_a_claim_failing_inside_the_batching_window_sends_what_the_batch_has(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions,
        full_switch: redis.Redis, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    tq.put_queue("window", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                         "batch_size": 10, "max_batching_window_ms": 5000}})
    [first] = tq.enqueue("window", [{"payload": {"n": 0}, "tenant": "acme"}])
    claim_once = dispatch_loop.claim_once
    calls = 0

    def filling_up(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # in the window: the cache fills up and the tenant's new work is cold
            full_switch.config_set("maxmemory", 1)
            tq.enqueue("window", [{"payload": {"n": n}, "tenant": "acme"} for n in (1, 2)])
        return claim_once(*args, **kwargs)

    monkeypatch.setattr(dispatch_loop, "claim_once", filling_up)
    caplog.set_level(logging.WARNING, logger="tierq.logic.dispatch")
    counts = Dispatcher(tq.ctx, functions).dispatch_once("window")
    # the claim that failed (WarmTierFull) ended the window: the batch went with its task
    assert calls == 2
    assert (counts.batches, counts.acked) == (1, 1)
    assert list(JOURNAL.runs) == [str(first.id)]
    assert "claiming more of 'window' for 'acme''s batch failed; sending what it has" \
        in caplog.text
    assert cold(pg, "window") == 2


def test_a_new_dispatcher_resumes_the_turns_after_the_last_tenant_served(
        tq: Tierq, functions: LocalFunctions, valkey: redis.Redis) -> None:
    """A fresh Lambda environment has a new dispatcher: it goes on after the tenant the
    queue's last batch served (kept on the queue's slot), not at the first name again."""
    tq.put_queue("resume", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                         "batch_size": 5}})
    tq.enqueue("resume", [{"payload": {"n": n}, "tenant": "a"} for n in range(20)])
    tq.enqueue("resume", [{"payload": {"n": 100}, "tenant": "b"}])
    JOURNAL.keep_events = True
    first = Dispatcher(tq.ctx, functions)
    first.dispatch_once("resume")
    first.close()
    assert valkey.get(turn_key("resume")) == b"a"
    assert 0 < valkey.ttl(turn_key("resume")) <= TURN_TTL_SECONDS
    fresh = Dispatcher(tq.ctx, functions)
    fresh.dispatch_once("resume")
    fresh.dispatch_once("resume")
    fresh.close()
    assert [tenants_of(e).pop() for e in JOURNAL.events] == ["a", "b", "a"]
