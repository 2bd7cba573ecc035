"""The design D sketch of ``bench.vs_bare --sketch d`` (bench/systems/append_sketch.py) on
real servers: one row per batch, an ack one appended row of ids, keyed tasks in rows of
their own deleted as today, every task counted until an ack names it, finished batches
swept; or its figures would measure something else. Its own fresh database: the sketch's
tables must not reach the session's (the schema snapshot compares that one with the
migrations)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from bench.systems import Prepared
from bench.systems.append_sketch import SCHEMA, AppendedAcksSketch, split_keyed, sweep
from bench.systems.batch_sketch import batch_id, batch_member
from tests.support.sketches import drain, sketched_engine
from tierq import ClaimRequest, Tierq
from tierq.local.services import LocalServices


@pytest.fixture
def sketch(services: LocalServices, valkey_url: str, valkey_private: bool
           ) -> Iterator[tuple[Tierq, psycopg.Connection[Any], str]]:
    """An engine with the sketch's statements, over a fresh database holding its tables."""
    with sketched_engine(services.postgres.url, valkey_url, valkey_private,
                         database="tierq_append_sketch", schema=SCHEMA,
                         word="append") as made:
        yield made


def counts(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """(batch rows, ack rows, rows of tierq_tasks)."""
    row = conn.execute("SELECT (SELECT count(*) FROM sketch_batches), "
                       "(SELECT count(*) FROM sketch_batch_acks), "
                       "(SELECT count(*) FROM tierq_tasks)").fetchone()
    assert row is not None
    return row


def test_a_batch_is_one_row_an_ack_one_appended_row_and_finished_batches_are_swept(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, url = sketch
    tasks = [{"payload": {"i": i}, "tenant": f"t{i % 3}", "priority": i % 10,
              **({"key": f"k{i}"} if i % 10 == 0 else {})} for i in range(200)]
    outcomes = tq.enqueue("q", tasks)
    assert [o.outcome for o in outcomes] == ["created"] * 200
    members = [batch_id(o.id) for o in outcomes if batch_member(o.id)]
    assert [place for _, place, _ in members] == list(range(180))
    assert counts(conn) == (1, 0, 20)
    assert conn.execute("SELECT count(*) FROM sketch_batch_pairs").fetchone() == (3,)
    [(payloads,)] = conn.execute("SELECT payloads FROM sketch_batches").fetchall()
    assert payloads == [t["payload"] for i, t in enumerate(tasks) if i % 10 != 0]
    prepared = Prepared("tierq-append-sketch", {}, url)
    assert AppendedAcksSketch().remaining(prepared) == 200
    assert AppendedAcksSketch().run_notes(prepared)[0].startswith("180 of ")
    assert sweep(url)[0] == 0  # (nothing finished: nothing deleted)

    assert drain(tq, "q", 100) == 200
    # two acks of 100: each one appended row; the keyed rows deleted
    assert counts(conn) == (1, 2, 0)
    assert AppendedAcksSketch().remaining(prepared) == 0
    assert sweep(url)[0] == 180
    assert counts(conn) == (0, 0, 0)


def test_an_id_acked_twice_counts_once_and_keeps_its_batch_until_all_are_acked(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, url = sketch
    tq.enqueue("q", [{"payload": {"i": i}, "tenant": "a"} for i in range(40)])
    got = tq.claim("q", ClaimRequest(max=40, tenant="a"))
    ids = [str(t.id) for t in got]
    store = tq.ctx.store
    # no arbitration in PostgreSQL: the lease check in Valkey is the only one
    assert sorted(r.id for r in store.ack_delete("q", ids[:25], ["a"] * 25, 1)) == sorted(
        ids[:25])
    assert len(store.ack_delete("q", ids[:25], ["a"] * 25, 1)) == 25
    prepared = Prepared("tierq-append-sketch", {}, url)
    assert AppendedAcksSketch().remaining(prepared) == 15
    assert sweep(url)[0] == 0
    store.ack_delete("q", ids[25:], ["a"] * 15, 1)
    assert AppendedAcksSketch().remaining(prepared) == 0
    assert sweep(url)[0] == 40
    assert counts(conn) == (0, 0, 0)


def test_a_keyed_batch_is_split_by_the_client_and_its_keys_still_arbitrate(
        sketch: tuple[Tierq, psycopg.Connection[Any], str]) -> None:
    tq, conn, _ = sketch
    columns = {"ids": "{a,b,c}", "tenants": '["x","y","x"]', "priorities": "{1,2,3}",
               "payloads": '[{"i":0},{"i":1},{"i":2}]', "keys": '[null,"k",null]',
               "state": "warm", "run_at": 1.0, "max_attempts": 3, "timeout": None}
    keyless, keyed = split_keyed(columns)
    assert keyless == {"ids": "{a,c}", "tenants": '["x","x"]', "priorities": "{1,3}",
                       "payloads": '[{"i":0},{"i":2}]', "state": "warm", "run_at": 1.0,
                       "max_attempts": 3, "timeout": None}
    assert keyed == {"ids": "{b}", "tenants": '["y"]', "priorities": "{2}",
                     "payloads": '[{"i":1}]', "keys": '["k"]', "state": "warm",
                     "run_at": 1.0, "max_attempts": 3, "timeout": None}
    first = tq.enqueue("q", [{"payload": {"i": i}, **({"key": f"k{i}"} if i % 4 == 0 else {})}
                             for i in range(20)])
    assert [o.outcome for o in first] == ["created"] * 20
    assert counts(conn) == (1, 0, 5)
    again = tq.enqueue("q", [{"payload": {"i": i}, "key": f"k{i}"} for i in (0, 4, 99)])
    assert [o.outcome for o in again] == ["ignored", "ignored", "created"]
    # every task claimable once: the keyless ones in their order, then the keyed ones (their
    # block of seqs comes after the batch row's), then the next batch's
    got = tq.claim("q", ClaimRequest(max=50))
    assert [t.payload["i"] for t in got] == [
        *(i for i in range(20) if i % 4), *range(0, 20, 4), 99]
