"""The design C sketch of ``bench.vs_bare --sketch c`` (bench/systems/batch_sketch.py) on
real servers: one row per batch, each task finished once by its bit, keyed tasks in rows of
their own, every task counted until it is finished, and a run that did not use it says so;
or its figures would measure something else. Its own fresh database: the sketch's tables
must not reach the session's (the schema snapshot compares that one with the
migrations)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from bench.systems import Prepared
from bench.systems.batch_sketch import (
    SCHEMA,
    BatchRowsSketch,
    batch_id,
    batch_member,
    sweep,
    tasks_written,
)
from bench.systems.tierq_engine import tierq_engine
from tests.support.sketches import drain, sketched_engine
from tierq import ClaimRequest, Tierq
from tierq.local.services import LocalServices


@pytest.fixture
def sketch(services: LocalServices, valkey_url: str, valkey_private: bool
           ) -> Iterator[tuple[Tierq, psycopg.Connection[Any], str]]:
    """An engine with the sketch's statements, over a fresh database holding its tables."""
    with sketched_engine(services.postgres.url, valkey_url, valkey_private,
                         database="tierq_batch_sketch", schema=SCHEMA, word="batch") as made:
        yield made


def counts(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """(batch rows, their tasks not finished, rows of tierq_tasks)."""
    row = conn.execute("SELECT (SELECT count(*) FROM sketch_batches), "
                       "(SELECT coalesce(sum(512 - bit_count(done)), 0) FROM sketch_batch_done), "
                       "(SELECT count(*) FROM tierq_tasks)").fetchone()
    assert row is not None
    return row


def test_a_batch_is_one_row_keyed_tasks_have_their_own_and_all_are_acked(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, url = sketch
    tasks = [{"payload": {"i": i}, "tenant": f"t{i % 3}", "priority": i % 10,
              **({"key": f"k{i}"} if i % 10 == 0 else {})} for i in range(200)]
    outcomes = tq.enqueue("q", tasks)
    assert [o.outcome for o in outcomes] == ["created"] * 200
    # the keyless tasks' ids name one batch and their places in it, in order
    members = [batch_id(o.id) for o in outcomes if batch_member(o.id)]
    assert [place for _, place, _ in members] == list(range(180))
    assert len({key for key, _, _ in members}) == 1
    # each tenant's tasks in slices of 16, in their order (60 keyless tasks a tenant)
    keyless = [t for i, t in enumerate(tasks) if i % 10 != 0]
    ranks: dict[str, int] = {}
    expected = []
    for task in keyless:
        ranks[task["tenant"]] = ranks.get(task["tenant"], 0) + 1
        expected.append((ranks[task["tenant"]] - 1) // 16)
    assert [number for _, _, number in members] == expected
    assert conn.execute("SELECT count(*) FROM sketch_batch_done").fetchone() == (12,)
    assert [batch_member(o.id) for o in outcomes] == [i % 10 != 0 for i in range(200)]
    assert counts(conn) == (1, 180, 20)
    assert conn.execute("SELECT count(*) FROM sketch_batch_pairs").fetchone() == (3,)
    # the row holds the keyless tasks' tenants, priorities and payloads in their order
    [(tenants, priorities, payloads)] = conn.execute(
        "SELECT tenants, priorities, payloads FROM sketch_batches").fetchall()
    assert tenants == [t["tenant"] for t in keyless]
    assert priorities == [t["priority"] for t in keyless]
    assert payloads == [t["payload"] for t in keyless]
    prepared = Prepared("tierq-batch-sketch", {}, url)
    assert BatchRowsSketch().remaining(prepared) == 200
    assert sweep(url)[0] == 0  # (nothing finished: nothing deleted)
    assert drain(tq, "q", 100) == 200
    assert counts(conn) == (1, 0, 0)
    assert BatchRowsSketch().remaining(prepared) == 0
    assert sweep(url)[0] == 180
    assert counts(conn) == (0, 0, 0)


def test_a_task_finished_twice_is_refused_the_second_time(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, _ = sketch
    tq.enqueue("q", [{"payload": {"i": i}, "tenant": "a",
                      **({"key": f"k{i}"} if i % 4 == 0 else {})} for i in range(40)])
    assert counts(conn) == (1, 30, 10)
    got = tq.claim("q", ClaimRequest(max=40, tenant="a"))
    assert len(got) == 40
    # the bits arbitrate: a second finisher of the same tasks (here the same statement
    # again, as after a lost lease) is told nothing was finished
    store = tq.ctx.store
    ids = [str(t.id) for t in got]
    first = store.ack_delete("q", ids[:25], ["a"] * 25, 1)
    assert sorted(r.id for r in first) == sorted(ids[:25])
    second = store.ack_delete("q", ids, ["a"] * 40, 1)  # (the other 15 only)
    assert sorted(r.id for r in second) == sorted(ids[25:])
    assert store.ack_delete("q", ids, ["a"] * 40, 1) == []
    assert counts(conn) == (1, 0, 0)


def test_an_ack_naming_another_tenant_finishes_nothing(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, _ = sketch
    tq.enqueue("q", [{"payload": {"i": i}, "tenant": "a"} for i in range(8)])
    got = tq.claim("q", ClaimRequest(max=8, tenant="a"))
    ids = [str(t.id) for t in got]
    # (the slice rows are keyed by tenant: the lease's, whatever the caller checked)
    assert tq.ctx.store.ack_delete("q", ids, ["b"] * 8, 1) == []
    assert counts(conn) == (1, 8, 0)
    assert len(tq.ctx.store.ack_delete("q", ids, ["a"] * 8, 1)) == 8
    assert counts(conn) == (1, 0, 0)


def test_work_not_admitted_warm_takes_the_engines_statements(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, url = sketch
    tq.enqueue("q", [{"payload": {"i": i}, "delay_seconds": 3600} for i in range(10)])
    tq.enqueue("q", [{"payload": {"i": i}, "timeout_seconds": 30} for i in range(5)])
    assert counts(conn) == (0, 0, 15)
    prepared = Prepared("tierq-batch-sketch", {}, url)
    assert BatchRowsSketch().remaining(prepared) == 15
    assert tasks_written(url)[0] == 0


def test_a_run_that_used_no_batch_row_says_so(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, _, url = sketch
    prepared = Prepared("tierq-batch-sketch", {}, url)
    assert BatchRowsSketch().run_notes(prepared)[0].startswith("NOT THE SKETCH")
    tq.enqueue("q", [{"payload": {"i": i}} for i in range(6)])
    assert BatchRowsSketch().run_notes(prepared)[0].startswith("6 of ")


def test_an_engine_without_the_sketch_keeps_its_ids(
        sketch: tuple[Tierq, psycopg.Connection[Any], str], valkey_url: str) -> None:
    _, conn, url = sketch
    plain = tierq_engine({"database_url": url, "valkey_url": valkey_url,
                          "settings": {"batch_rows": False}})  # (its rows, as the sketch's)
    try:
        outcomes = plain.enqueue("q", [{"payload": {"i": i}} for i in range(64)])
    finally:
        plain.close()
    # (numbered ids would share everything but their places)
    assert len({batch_id(o.id)[0] for o in outcomes}) > 1
    assert counts(conn) == (0, 0, 64)
