"""The design B sketch of ``bench.vs_bare --sketch b`` (bench/systems/log_sketch.py) on real
servers: it must write what the design says, finish every task, refuse to empty a slot
that still holds work, and say so when a run did not use it, or its figures would measure
something else. Its own fresh database: the sketch's tables must not reach the session's
(the schema snapshot compares that one with the migrations)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import tierq.logic.enqueue as enqueue
from bench.systems import Prepared
from bench.systems.log_sketch import (
    SCHEMA,
    SLOT_MS,
    SLOTS,
    LogSlotsSketch,
    keyed_id,
    rotate,
    rows_written,
    slot_of,
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
                         database="tierq_log_sketch", schema=SCHEMA, word="log") as made:
        yield made


def counts(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """(rows of the slots, done rows of the slots, rows of tierq_tasks)."""
    slots = " + ".join(f"(SELECT count(*) FROM tierq_log_{s})" for s in range(SLOTS))
    done = " + ".join(f"(SELECT count(*) FROM tierq_log_done_{s})" for s in range(SLOTS))
    row = conn.execute(f"SELECT {slots}, {done}, (SELECT count(*) FROM tierq_tasks)"
                       ).fetchone()
    assert row is not None
    return row


def test_keyless_rows_go_to_a_slot_keyed_ones_stay_and_the_slot_is_emptied_after(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, url = sketch
    tasks = [{"payload": {"i": i}, "tenant": f"t{i % 3}", "priority": i % 10,
              **({"key": f"k{i}"} if i % 10 == 0 else {})} for i in range(200)]
    outcomes = tq.enqueue("q", tasks)
    assert [o.outcome for o in outcomes] == ["created"] * 200
    # each id says which table holds its row
    assert [keyed_id(o.id) for o in outcomes] == [i % 10 == 0 for i in range(200)]
    assert counts(conn) == (180, 0, 20)
    assert conn.execute("SELECT count(*) FROM tierq_log_pairs").fetchone() == (3,)
    slot = slot_of(outcomes[1].id)
    assert conn.execute(f"SELECT count(*) FROM tierq_log_{slot}").fetchone() == (180,)
    # one place in line per task, in batch order, across both tables
    seqs = [row[0] for row in conn.execute(
        f"SELECT seq FROM (SELECT seq, (payload->>'i')::int AS i FROM tierq_log_{slot} "
        "UNION ALL SELECT seq, (payload->>'i')::int FROM tierq_tasks) s ORDER BY i"
        ).fetchall()]
    assert seqs == list(range(seqs[0], seqs[0] + 200))
    prepared = Prepared("tierq-log-sketch", {}, url)
    assert LogSlotsSketch().remaining(prepared) == 200
    # a slot with unfinished rows is not emptied
    with pytest.raises(psycopg.errors.RaiseException, match="180 unfinished"):
        rotate(url)
    assert drain(tq, "q", 100) == 200
    assert counts(conn) == (180, 180, 0)  # appended, not deleted; keyed rows deleted
    assert LogSlotsSketch().remaining(prepared) == 0
    emptied, _ = rotate(url)
    assert emptied == 180 and counts(conn) == (0, 0, 0)


def test_a_task_finished_twice_is_refused_the_second_time(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, _ = sketch
    tq.enqueue("q", [{"payload": {"i": i}, "tenant": "a",
                      **({"key": f"k{i}"} if i % 4 == 0 else {})} for i in range(40)])
    assert counts(conn) == (30, 0, 10)
    got = tq.claim("q", ClaimRequest(max=40, tenant="a"))
    assert len(got) == 40
    # the appended rows arbitrate: a second finisher of the same tasks (here the same
    # statement again, as after a lost lease) is told nothing was finished
    store = tq.ctx.store
    ids = [t.id for t in got]
    first = store.ack_delete("q", ids, ["a"] * 40, 1)
    assert len(first) == 40
    assert store.ack_delete("q", ids, ["a"] * 40, 1) == []
    assert counts(conn) == (30, 30, 0)


@pytest.mark.parametrize("keys", [False, True])
def test_a_batch_straddling_a_slots_boundary_puts_each_row_in_its_ids_slot(
        sketch: tuple[Tierq, psycopg.Connection[Any], str], monkeypatch: pytest.MonkeyPatch,
        keys: bool) -> None:
    tq, conn, url = sketch
    boundary = int(time.time() * 1000) // SLOT_MS * SLOT_MS  # (the current slot's start)

    def straddling(n: int, now_ms: int | None = None) -> list[str]:
        return [id_at(boundary - 1, i) for i in range(n // 2)] + [
            id_at(boundary, i) for i in range(n - n // 2)]

    monkeypatch.setattr(enqueue, "uuid7_strings", straddling)
    outcomes = tq.enqueue("q", [{"payload": {"i": i},
                                 **({"key": f"k{i}"} if keys and i % 5 == 0 else {})}
                                for i in range(20)])
    monkeypatch.undo()
    before, after = slot_of(id_at(boundary - 1, 0)), slot_of(id_at(boundary, 0))
    assert before != after
    keyed = 4 if keys else 0
    in_slot = {s: conn.execute(f"SELECT count(*) FROM tierq_log_{s}").fetchone()
               for s in (before, after)}
    assert in_slot == {before: (10 - keyed // 2,), after: (10 - keyed // 2,)}
    assert counts(conn) == (20 - keyed, 0, keyed)
    assert len({o.id for o in outcomes}) == 20
    assert drain(tq, "q", 7) == 20
    assert counts(conn) == (20 - keyed, 20 - keyed, 0)
    assert rotate(url)[0] == 20 - keyed
    assert counts(conn) == (0, 0, 0)


def test_an_ack_of_a_task_older_than_the_slots_turn_is_refused(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, _ = sketch
    # (its slot may have been emptied and taken again: a done row there would count as
    # another task's)
    old = id_at(int(time.time() * 1000) - SLOTS * SLOT_MS, 0)[:-1] + "0"  # (keyless: even)
    with pytest.raises(RuntimeError, match="older than the slots' turn"):
        tq.ctx.store.ack_delete("q", [old], ["_"], 1)
    assert counts(conn) == (0, 0, 0)


def test_work_not_admitted_warm_takes_the_engines_statements(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, url = sketch
    # (through an engine of its own, closed after: its backends end and publish their
    # statistics, as a benchmark's workers do; an idle one may hold them for 10 s)
    own = tierq_engine({"database_url": url, "valkey_url": tq.settings.valkey_url,
                        "sketch": "log"})
    try:
        own.enqueue("q", [{"payload": {"i": i}, "delay_seconds": 3600} for i in range(10)])
        own.enqueue("q", [{"payload": {"i": i}, "timeout_seconds": 30} for i in range(5)])
    finally:
        own.close()
    assert counts(conn) == (0, 0, 15)
    prepared = Prepared("tierq-log-sketch", {}, url)
    assert LogSlotsSketch().remaining(prepared) == 15
    assert wait_for_rows(url, (0, 15)) == (0, 15)
    assert LogSlotsSketch().run_notes(prepared) == [
        "NOT THE SKETCH: no row of 15 went into a slot"]


def test_an_engine_without_the_sketch_keeps_its_ids(
        sketch: tuple[Tierq, psycopg.Connection[Any], str], valkey_url: str) -> None:
    _, conn, url = sketch
    plain = tierq_engine({"database_url": url, "valkey_url": valkey_url,
                          "settings": {"batch_rows": False}})  # (its rows, as the sketch's)
    try:
        # in the process where the sketch marks ids, an engine of its own does not (a
        # marked id would end in an even digit every time)
        outcomes = plain.enqueue("q", [{"payload": {"i": i}} for i in range(64)])
    finally:
        plain.close()
    assert any(keyed_id(o.id) for o in outcomes)
    assert counts(conn) == (0, 0, 64)


def id_at(ms: int, counter: int) -> str:
    """A UUIDv7 of millisecond ``ms`` (the per-process ids would not go back in time)."""
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (counter << 64) | (0b10 << 62)
                         | rand))


def wait_for_rows(url: str, want: tuple[int, int]) -> tuple[int, int]:
    """``rows_written`` once the server's statistics show ``want``, or what they show after
    5 s."""
    deadline = time.monotonic() + 5
    while (got := rows_written(url)) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return got
