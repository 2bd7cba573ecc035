"""The design A sketch of ``bench.vs_bare --sketch`` (bench/systems/hot_sketch.py) on real
servers: it must write what the design says and finish every task, or its figures would
measure something else. Its own fresh database: the sketch's tables must not reach the
session's (the schema snapshot compares that one with the migrations)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from bench.systems import Prepared
from bench.systems.hot_sketch import SCHEMA, HotTableSketch, rows_written
from bench.systems.tierq_engine import tierq_engine
from tests.support.sketches import drain, sketched_engine
from tierq import ClaimRequest, Tierq
from tierq.local.services import LocalServices


@pytest.fixture
def sketch(services: LocalServices, valkey_url: str, valkey_private: bool
           ) -> Iterator[tuple[Tierq, psycopg.Connection[Any], str]]:
    """An engine with the sketch's statements, over a fresh database holding its tables."""
    with sketched_engine(services.postgres.url, valkey_url, valkey_private,
                         database="tierq_sketch", schema=SCHEMA, word="hot") as made:
        yield made


def counts(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """(rows of tierq_hot, of tierq_tasks, of tierq_hot_pairs)."""
    row = conn.execute("SELECT (SELECT count(*) FROM tierq_hot), (SELECT count(*) FROM "
                       "tierq_tasks), (SELECT count(*) FROM tierq_hot_pairs)").fetchone()
    assert row is not None
    return row


def test_keyless_warm_rows_go_to_the_hot_table_keyed_ones_stay_and_both_are_acked(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, _ = sketch
    store = tq.ctx.store
    paired = store.ack_delete_by_attempt
    calls: list[int] = []

    def counted(queue: str, ids: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(ids))
        return paired(queue, ids, *args, **kwargs)

    store.ack_delete_by_attempt = counted  # type: ignore[method-assign]
    tasks = [{"payload": {"i": i}, "tenant": f"t{i % 3}", "priority": i % 10,
              **({"key": f"k{i}"} if i % 10 == 0 else {})} for i in range(200)]
    outcomes = tq.enqueue("q", tasks)
    assert [o.outcome for o in outcomes] == ["created"] * 200
    assert counts(conn) == (180, 20, 3)  # one (pair, minute) row per tenant
    keyed = conn.execute("SELECT count(*) FROM tierq_tasks WHERE key IS NOT NULL "
                         "AND state = 'warm'").fetchone()
    assert keyed == (20,)
    # one place in line per task, in batch order, across both tables
    seqs = [row[0] for row in conn.execute(
        "SELECT seq FROM (SELECT seq, (payload->>'i')::int AS i FROM tierq_hot UNION ALL "
        "SELECT seq, (payload->>'i')::int FROM tierq_tasks) s ORDER BY i").fetchall()]
    assert seqs == list(range(seqs[0], seqs[0] + 200))
    # acks over several tenants (each row paired with its own) and of one tenant
    assert drain(tq, "q", 100) == 200
    assert calls and max(calls) > 1  # the paired form ran, over several tenants' rows
    assert counts(conn)[:2] == (0, 0)


def test_an_ack_of_one_tenant_deletes_from_both_tables(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, _ = sketch
    tq.enqueue("q", [{"payload": {"i": i}, "tenant": "a",
                      **({"key": f"k{i}"} if i % 4 == 0 else {})} for i in range(40)])
    assert counts(conn)[:2] == (30, 10)
    got = tq.claim("q", ClaimRequest(max=40, tenant="a"))
    assert len(got) == 40
    result = tq.ack("q", got)
    assert len(result.acked) == 40 and not result.rejected
    assert counts(conn)[:2] == (0, 0)
    # acked once: the same leases again are refused and delete nothing
    again = tq.ack("q", got)
    assert not again.acked and len(again.rejected) == 40


def test_work_not_admitted_warm_takes_the_engines_statements(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, url = sketch
    tq.enqueue("q", [{"payload": {"i": i}, "delay_seconds": 3600} for i in range(10)])
    tq.enqueue("q", [{"payload": {"i": i}, "timeout_seconds": 30} for i in range(5)])
    # delayed, and warm with a time limit (a column tierq_hot has not)
    assert counts(conn)[:2] == (0, 15)
    assert conn.execute("SELECT count(*) FROM tierq_tasks WHERE state = 'delayed'"
                        ).fetchone() == (10,)
    # the system counts the unfinished work of both tables
    tq.enqueue("q", [{"payload": {"i": i}} for i in range(7)])
    prepared = Prepared("tierq-hot-sketch", {}, url)
    assert HotTableSketch().remaining(prepared) == 10 + 5 + 7


def test_a_run_whose_rows_all_took_the_engines_statements_says_so(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    _, _, url = sketch
    prepared = Prepared("tierq-hot-sketch", {}, url)
    enqueue_apart(sketch, [{"payload": {"i": i}, "delay_seconds": 60} for i in range(4)])
    assert wait_for_rows(url, (0, 4)) == (0, 4)
    assert HotTableSketch().run_notes(prepared) == [
        "NOT THE SKETCH: no row of 4 went into tierq_hot"]
    enqueue_apart(sketch, [{"payload": {"i": i}} for i in range(6)])
    assert wait_for_rows(url, (6, 4)) == (6, 4)
    assert HotTableSketch().run_notes(prepared) == ["6 of 10 rows into tierq_hot"]


def enqueue_apart(sketch: tuple[Tierq, psycopg.Connection[Any], str],
                  tasks: list[dict[str, Any]]) -> None:
    """Enqueue through an engine of its own, closed after: its backends end and flush
    their statistics (an idle one may hold them for 10 s), as a benchmark's workers do."""
    tq, _, url = sketch
    own = tierq_engine({"database_url": url, "valkey_url": tq.settings.valkey_url,
                        "sketch": "hot"})
    try:
        own.enqueue("q", tasks)
    finally:
        own.close()


def wait_for_rows(url: str, want: tuple[int, int]) -> tuple[int, int]:
    """``rows_written`` once the server's statistics show ``want`` (a backend flushes them
    as it ends), or what they show after 5 s."""
    deadline = time.monotonic() + 5
    while (got := rows_written(url)) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return got
