"""The write path: the engine's bulk API (admission, places in line from reserved blocks,
staging, the insert, ids) and the partition writer that feeds it Arrow batches (COPY text
taken from the Arrow buffers as they are, chunks, several connections, rejects)."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from tierq_feeder.writer import LINE, RoundWrite, StoreConfig, line_bytes, write_partition

from tierq.core.ids import uuid7
from tierq.engine import Tierq
from tierq.errors import QuotaExceeded
from tierq.logic import bulk

pytestmark = pytest.mark.spark


def stored(database_url: str, queue: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT key, tenant, priority, payload, state, seq, run_at, ready_since IS NULL, "
            "max_attempts, id FROM tierq_tasks WHERE queue = %s ORDER BY seq",
            (queue,)).fetchall()


def test_uuid7_prefix_makes_uuid7s_of_the_load_time() -> None:
    now_ms = int(time.time() * 1000) + 600_000  # ahead of every id this process made
    made = uuid.UUID(bulk.uuid7_prefix(now_ms) + str(uuid.uuid4())[15:])
    assert made.version == 7 and made.variant == uuid.RFC_4122
    assert made.int >> 80 == now_ms
    reference = uuid7(now_ms)
    assert str(made)[:15] == str(reference)[:15]
    assert bulk.uuid7_prefix(1_700_000_000_123) == "018bcfe5-687b-7"


def test_copy_text_escapes_and_refuses_line_breaks() -> None:
    text = bulk.copy_text([(0, "_", "k\\1", 3, '{"a":"b\\\\c"}', None),
                           (1, "acme", "k2", 0, "{}", 1_700_000_000_000_000)]).decode()
    lines = [line.split("\t") for line in text.splitlines()]
    assert [line[1:] for line in lines] == [
        ["0", "_", "k\\\\1", "3", '{"a":"b\\\\\\\\c"}', "\\N"],
        ["1", "acme", "k2", "0", "{}", "1700000000000000"]]
    ids = [uuid.UUID(line[0]) for line in lines]
    assert ids == sorted(ids) and all(i.version == 7 for i in ids)
    with pytest.raises(ValueError, match="tab, newline"):
        bulk.copy_text([(0, "_", "a\tb", 0, "{}", None)])


def test_bulk_load_places_rows_by_ord_whatever_the_commit_order(
        engine: Tierq, stores: StoreConfig, database_url: str) -> None:
    """Two writers commit their chunks in the reverse of the load's order: the line still
    follows ord, rows due later land delayed, a live key keeps its task."""
    engine.enqueue("bulk", [{"payload": {"from": "http"}, "key": "live"}])
    now_us = int(engine.ctx.now() * 1_000_000)
    rows = [(i, "_", f"k{i}", i % 10, f'{{"n":{i}}}', None) for i in range(1200)]
    rows[5] = (5, "_", "later", 1, "{}", now_us + 3_600_000_000)
    rows[7] = (7, "_", "live", 1, '{"from":"bulk"}', None)
    with engine.bulk_load("bulk", rows=len(rows), tenants=["_"]) as load:
        assert len(load.blocks) == 3  # 1200 places in blocks of 512
        with engine.bulk_writer(load) as first, engine.bulk_writer(load) as second:
            assert second.write(bulk.copy_text(rows[600:]), tenants=["_"]) == 600
            assert first.write([bulk.copy_text(rows[:300]), bulk.copy_text(rows[300:600])],
                               tenants=["_"]) == 599
    got = stored(database_url, "bulk")
    assert [r[0] for r in got] == ["live"] + [r[2] for r in rows if r[2] != "live"]
    places = {r[0]: r[5] for r in got}
    assert all(places[f"k{i}"] == load.seq(i) for i in range(1200) if i not in (5, 7))
    later = next(r for r in got if r[0] == "later")
    assert (later[4], later[7]) == ("delayed", True)
    assert {r[4] for r in got if r[0] not in ("later", "live")} == {"cold"}
    assert next(r for r in got if r[0] == "live")[3] == {"from": "http"}
    assert {r[8] for r in got} == {engine.queue_settings("bulk").max_attempts}
    with pytest.raises(IndexError):
        load.seq(1200)
    assert engine.bulk_warm_up("bulk", ["_"]) > 0


def test_bulk_load_refuses_what_it_cannot_place(engine: Tierq, database_url: str) -> None:
    with pytest.raises(ValueError, match="at least one row"), \
            engine.bulk_load("q", rows=0, tenants=["_"]):
        pass
    with engine.bulk_load("q", rows=2, tenants=["_"]) as load, \
            engine.bulk_writer(load) as writer, \
            pytest.raises(psycopg.errors.NotNullViolation):
        writer.write(bulk.copy_text([(512, "_", "far", 0, "{}", None)]), tenants=["_"])
    assert stored(database_url, "q") == []


def test_a_tenant_over_its_cap_of_queues_writes_nothing(make_tq: Any,
                                                        database_url: str) -> None:
    capped = make_tq(max_queues_per_tenant=1)
    capped.enqueue("one", [{"payload": {}, "tenant": "acme"}])
    with capped.bulk_load("two", rows=1, tenants=["acme"]) as load, \
            capped.bulk_writer(load) as writer, pytest.raises(QuotaExceeded):
        writer.write(bulk.copy_text([(0, "acme", "k", 0, "{}", None)]), tenants=["acme"])
    assert stored(database_url, "two") == []


def test_line_bytes_of_sliced_columns() -> None:
    column = pa.array(["a\n", "bc\n", "def\n", "g\n"])
    assert line_bytes(column) == b"a\nbc\ndef\ng\n"
    assert line_bytes(column.slice(1, 2)) == b"bc\ndef\n"
    assert line_bytes(column.slice(4)) == b""
    assert line_bytes(pa.array(["x\n", "y\n"], pa.large_string()).slice(1)) == b"y\n"


def batches(lines: list[str | None], tenants: list[str], reasons: list[str | None],
            size: int) -> list[pa.RecordBatch]:
    n = len(lines)
    table = pa.table({
        LINE: pa.array(lines, pa.string()), "tenant": tenants, "source": ["s"] * n,
        "part": ["p"] * n, "row": list(range(n)), "reason": pa.array(reasons, pa.string()),
        "row_json": pa.array([None if r is None else "{}" for r in reasons], pa.string())})
    return table.to_batches(max_chunksize=size)


@pytest.mark.parametrize("connections", [1, 3])
def test_write_partition_chunks_rejects_and_connections(
        engine: Tierq, stores: StoreConfig, database_url: str, connections: int) -> None:
    queue = f"part{connections}"
    n = 2500
    tenants = [("acme", "beta")[i % 2] for i in range(n)]
    reasons: list[str | None] = [None if i % 100 else "key: missing" for i in range(n)]
    staged_text = bulk.copy_text(
        [(i, tenants[i], f"k{i}", 0, "{}", None) for i in range(n)]).decode().splitlines()
    lines: list[str | None] = [None if reasons[i] else staged_text[i] + "\n"
                               for i in range(n)]
    with engine.bulk_load(queue, rows=n, tenants=["acme", "beta"]) as load:
        job = RoundWrite(stores=stores, load=load, chunk_rows=300, connections=connections,
                         tenant_column="tenant")
        out = list(write_partition(job, batches(lines, tenants, reasons, 128)))
    stats = out[-1].to_pylist()
    assert stats == [{"kind": "stats", "staged": 2475, "created": 2475, "rejected": 25,
                      "source": None, "part": None, "row": None, "reason": None,
                      "row_json": None}]
    rejects = [r for b in out[:-1] for r in b.to_pylist()]
    assert [(r["kind"], r["row"], r["reason"]) for r in rejects] == [
        ("reject", i, "key: missing") for i in range(0, n, 100)]
    got = stored(database_url, queue)
    assert [r[0] for r in got] == [f"k{i}" for i in range(n) if i % 100]
    assert all(a[5] < b[5] for a, b in itertools.pairwise(got))
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT tenant FROM tierq_queue_tenants WHERE queue = %s "
                            "ORDER BY tenant", (queue,)).fetchall() == [("acme",), ("beta",)]


def test_a_failing_chunk_fails_the_partition(engine: Tierq, stores: StoreConfig) -> None:
    with engine.bulk_load("broken", rows=1, tenants=["_"]) as load:
        job = RoundWrite(stores=stores, load=load, chunk_rows=10, connections=2,
                         tenant="_")
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            list(write_partition(job, batches(["not-a-uuid\t0\t_\tk\t0\t{}\t\\N\n"], ["_"],
                                              [None], 10)))
