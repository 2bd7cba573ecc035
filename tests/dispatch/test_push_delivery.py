"""Push delivery on real PostgreSQL and Valkey: the dispatcher claims batches and calls
consumer functions written for SQS (Powertools' BatchProcessor) in-process."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import psycopg
import pytest

from tests.dispatch.journal import JOURNAL
from tests.dispatch.support import run_until, task_states
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions
from tierq.logic.dispatch import Dispatcher

pytestmark = pytest.mark.usefixtures("clean_stores")


def remaining(pg: psycopg.Connection[Any], queue: str) -> int:
    """Tasks of ``queue`` not yet done (rows and batch members alike)."""
    states = task_states(pg, queue)
    return states.total() - states["done"]


def test_a_batch_processor_consumer_acks_and_retries_failed_items_once(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    tq.put_queue("orders", {"consumer": {"function": "tests.dispatch.consumers:fail_once",
                                         "batch_size": 10},
                            "backoff": {"kind": "fixed", "base_seconds": 0, "jitter": 0}})
    tq.enqueue("orders", [{"payload": {"n": i, "fail_once": i % 10 == 0}}
                          for i in range(50)])
    run_until(tq, lambda: remaining(pg, "orders") == 0)
    assert len(JOURNAL.runs) == 50
    twice = {task_id for task_id, runs in JOURNAL.runs.items() if runs == 2}
    assert len(twice) == 5 and set(JOURNAL.runs.values()) == {1, 2}
    assert all(JOURNAL.attempts[t] == [1, 2] for t in twice)


def test_a_consumer_with_a_parser_model_gets_its_records_parsed(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    tq.put_queue("typed", {"consumer": {"function": "tests.dispatch.consumers:with_model",
                                        "batch_size": 7},
                           "backoff": {"kind": "fixed", "base_seconds": 0, "jitter": 0}})
    tq.enqueue("typed", [{"payload": {"n": i, "fail_once": i == 3}} for i in range(20)])
    run_until(tq, lambda: remaining(pg, "typed") == 0)
    assert sorted(JOURNAL.runs.values()) == [1] * 19 + [2]


def test_a_consumer_that_raises_fails_the_whole_batch_until_dead(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    tq.put_queue("broken", {"consumer": {"function": "tests.dispatch.consumers:crash",
                                         "batch_size": 10},
                            "max_attempts": 2,
                            "backoff": {"kind": "fixed", "base_seconds": 0, "jitter": 0}})
    tq.enqueue("broken", [{"payload": {"n": i}} for i in range(4)])

    run_until(tq, lambda: task_states(pg, "broken") == {"dead": 4})
    assert set(JOURNAL.runs.values()) == {2}
    # (a failed member was moved out of its batch row: the dead are rows on either layout)
    errors = {e for (e,) in pg.execute("SELECT last_error FROM tierq_tasks").fetchall()}
    assert errors == {"function_error: RuntimeError"}  # the type, never the message


def test_a_raising_consumers_message_goes_to_the_logs_never_to_its_tasks(
        tq: Tierq, functions: LocalFunctions, caplog: pytest.LogCaptureFixture) -> None:
    """README: "The messages go to the dispatcher's log." The dispatcher logs it with the
    queue, the tenant and the function; the local function, as Lambda's runtime does in
    the function's own log, writes its traceback."""
    tq.put_queue("loud", {"consumer": {"function": "tests.dispatch.consumers:crash",
                                       "batch_size": 10}})
    [queued] = tq.enqueue("loud", [{"payload": {"n": 1}, "tenant": "acme"}])
    caplog.set_level(logging.INFO)
    Dispatcher(tq.ctx, functions).dispatch_once("loud")
    assert tq.get_task("loud", queued.id).last_error == "function_error: RuntimeError"
    [said] = [r for r in caplog.records if r.name == "tierq.logic.dispatch"]
    assert said.levelno == logging.WARNING
    assert said.getMessage() == ("tests.dispatch.consumers:crash failed on a batch of queue "
                                 "'loud', tenant 'acme' (RuntimeError): the consumer crashed")
    assert (said.queue, said.tenant, said.function) == (  # type: ignore[attr-defined]
        "loud", "acme", "tests.dispatch.consumers:crash")
    [runtime] = [r for r in caplog.records if r.name == "tierq.local.consumers"]
    assert runtime.levelno == logging.ERROR
    assert runtime.getMessage() == ("tests-dispatch-consumers-crash: [ERROR] RuntimeError: "
                                    "the consumer crashed")
    assert runtime.exc_info is not None  # its traceback, down to the line that raised
    assert 'raise RuntimeError("the consumer crashed")' in caplog.text


def test_a_paused_queue_is_not_dispatched_and_a_batch_waits_for_its_window(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    from tierq.maintenance.dispatcher import dispatcher_of, forget_dispatcher

    tq.put_queue("windowed", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                           "batch_size": 10, "max_batching_window_ms": 400},
                              "paused": True})
    tq.enqueue("windowed", [{"payload": {"n": 0}}])
    dispatcher = dispatcher_of(tq.ctx)
    try:
        assert dispatcher.dispatch_once("windowed").batches == 0
        tq.resume("windowed")
        JOURNAL.keep_events = True
        import threading
        import time

        later = threading.Timer(0.15, lambda: tq.enqueue(
            "windowed", [{"payload": {"n": i}} for i in range(1, 5)]))
        later.start()
        started = time.monotonic()
        counts = dispatcher.dispatch_once("windowed")
        assert time.monotonic() - started >= 0.4  # it waited out the window
        assert (counts.batches, counts.acked) == (1, 5)
        assert len(JOURNAL.events) == 1 and len(JOURNAL.events[0]["Records"]) == 5
    finally:
        forget_dispatcher(tq.ctx)


def test_a_batching_window_opens_only_once_a_task_is_claimed(
        tq: Tierq, functions: LocalFunctions) -> None:
    # as Lambda's SQS poller: with nothing ready there is no batch to wait for, so an idle
    # queue neither polls through its window nor keeps its dispatcher busy (and awake)
    import time

    from tierq.maintenance.dispatcher import dispatcher_of, forget_dispatcher

    tq.put_queue("quiet", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                        "batch_size": 10, "max_batching_window_ms": 3000}})
    dispatcher = dispatcher_of(tq.ctx)
    try:
        started = time.monotonic()
        assert dispatcher.dispatch_once("quiet").batches == 0
        assert time.monotonic() - started < 1.5
        _, idle = dispatcher.run(until=time.monotonic() + 5, idle_seconds=0.5)
        assert idle and time.monotonic() - started < 3.5
    finally:
        forget_dispatcher(tq.ctx)


def test_batches_of_large_tasks_are_cut_to_what_an_invoke_carries(
        make_tq: Any, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    from tierq.logic.dispatch import EVENT_LIMIT

    tq = make_tq(max_payload_bytes=1024 * 1024)
    tq.ctx.consumers = functions
    tq.put_queue("big", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                      "batch_size": 100}})
    blob = "\"q\\" * 200_000  # 1 MB of JSON text whose quotes and backslashes double
    tq.enqueue("big", [{"payload": {"n": i, "blob": blob}} for i in range(14)])
    JOURNAL.keep_events = True
    run_until(tq, lambda: remaining(pg, "big") == 0)
    sizes = [len(orjson.dumps(event)) for event in JOURNAL.events]
    assert len(sizes) >= 3 and max(sizes) <= EVENT_LIMIT
    assert sum(len(e["Records"]) for e in JOURNAL.events) == 14


def test_a_released_childs_record_carries_its_parents_as_a_claim_does(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    """A task released from a wait (after) reaches its consumer with a ``parents`` message
    attribute: the JSON text of its claim's parents (id, queue, final state, result)."""
    tq.put_queue("joins", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                        "batch_size": 10}})
    first, second = tq.enqueue("steps", [{"payload": 1}, {"payload": 2}])
    [child] = tq.enqueue("joins", [{"payload": "join", "after": [first.id, second.id]}])
    [plain] = tq.enqueue("joins", [{"payload": "plain"}])
    JOURNAL.keep_events = True
    leased = {t.payload: t for t in tq.claim("steps", max=2)}
    tq.ack("steps", [{"id": leased[1].id, "lease_token": leased[1].lease_token,
                      "result": {"rows": 3, "ü": "\"q\""}}, leased[2]])
    run_until(tq, lambda: remaining(pg, "joins") == 0)
    records = {r["messageId"]: r for e in JOURNAL.events for r in e["Records"]}
    attribute = records[str(child.id)]["messageAttributes"]["parents"]
    assert attribute["dataType"] == "String"
    assert orjson.loads(attribute["stringValue"]) == [
        {"id": str(first.id), "queue": "steps", "state": "done",
         "result": {"rows": 3, "ü": "\"q\""}},
        {"id": str(second.id), "queue": "steps", "state": "done", "result": None}]
    assert "parents" not in records[str(plain.id)]["messageAttributes"]
