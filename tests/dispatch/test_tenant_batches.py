"""Push delivery keeps tenants apart, on real PostgreSQL and Valkey: a batch holds one
tenant's tasks, so what one tenant's record makes a function do (raise with the record in
its message) never lands on another tenant's tasks; the dispatcher serves the tenants with
ready work in turn, so a tenant with a large backlog does not starve one with a task."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.dispatch.journal import JOURNAL
from tests.dispatch.support import run_until
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions

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

    def settled() -> bool:
        row = pg.execute("SELECT count(*) FILTER (WHERE state = 'dead'), count(*) "
                         "FROM tierq_tasks WHERE queue = 'charges'").fetchone()
        return row is not None and row[0] == row[1]

    run_until(tq, settled)
    # every batch held one tenant's tasks; globex's ran once each and were acked
    assert all(len(tenants_of(e)) == 1 for e in JOURNAL.events)
    assert all(JOURNAL.runs[str(t.id)] == 1 for t in plain)
    assert tq.dlq_list("charges", tenant="globex") == []
    assert pg.execute("SELECT count(*) FROM tierq_tasks WHERE tenant = 'globex'"
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
    run_until(tq, lambda: pg.execute(
        "SELECT count(*) FROM tierq_tasks WHERE queue = 'mixed'").fetchone() == (0,))
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
    run_until(tq, lambda: pg.execute(
        "SELECT count(*) FROM tierq_tasks WHERE queue = 'turns'").fetchone() == (0,))
    order = [tenants_of(e).pop() for e in JOURNAL.events]
    assert all(len(tenants_of(e)) == 1 for e in JOURNAL.events)
    # a turn visits each tenant with ready work once, in the order of their names: "one"
    # and "seven" are served in the first turn and "seven"'s second batch in the second,
    # while "big" has 60 batches to go ("one", with nothing left, passes its turn on)
    assert order == ["big", "one", "seven", "big", "seven"] + ["big"] * 58
