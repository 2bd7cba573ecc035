"""The write path: the engine's bulk API (admission, places in line from reserved blocks,
staging, the insert, ids) and the partition writer that feeds it Arrow batches (COPY text
taken from the Arrow buffers as they are, chunks, several connections, rejects)."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from tierq_feeder.feeder import load_id_column
from tierq_feeder.writer import LINE, RoundWrite, StoreConfig, line_bytes, write_partition

from tierq.core import ids
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


def test_load_ids_are_uuid7s_of_the_load_time_increasing_with_ord() -> None:
    # ahead of every id this process made (a test with a clock moved days ahead made some)
    now_ms = max(int(time.time() * 1000), ids._last_ms) + 600_000
    tail = bulk.new_id_tail()
    ords = [0, 1, 4095, 4096, 250_000, 9_999_999]
    made = [uuid.UUID(bulk.load_id(now_ms, o, tail)) for o in ords]
    assert all(m.version == 7 and m.variant == uuid.RFC_4122 for m in made)
    assert [m.int >> 80 for m in made] == [now_ms + (o >> 12) for o in ords]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert str(made[0])[:15] == str(uuid7(now_ms))[:15]  # the engine's own id of that ms
    assert bulk.load_id(1_700_000_000_123, 4097, "8abc0123456789ab") == \
        "018bcfe5687c70018abc0123456789ab"
    assert bulk.new_id_tail() != tail and bulk.new_id_tail(tag=0x1f2e).endswith("1f2e")
    with pytest.raises(ValueError, match="id tail"):
        bulk.load_id(now_ms, 0, "0abc0123456789ab")


def test_the_feeders_ids_are_load_ids(spark: Any) -> None:
    places = [0, 1, 4095, 4096, 123_456, 9_999_999]
    tail = bulk.new_id_tail()
    rows = spark.createDataFrame([(p,) for p in places], "place long").select(
        "place",
        load_id_column(F.lit(1_700_000_000_123), tail, F.col("place")).alias("id")).collect()
    assert [uuid.UUID(r["id"]) for r in rows] == [
        uuid.UUID(bulk.load_id(1_700_000_000_123, p, tail)) for p in places]


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


def test_a_repeated_key_keeps_its_first_occurrence_whatever_chunk_commits_first(
        engine: Tierq, database_url: str) -> None:
    """The later chunk commits first with the key's later occurrence; the earlier chunk's
    row takes that task over (its place, id and fields). A live task from before the load
    keeps its place either way, and a key repeated inside one chunk keeps its first row."""
    engine.enqueue("rep", [{"payload": {"from": "http"}, "key": "live"}])
    rows = [(i, "_", f"k{i}", 0, f'{{"n":{i}}}', None) for i in range(1200)]
    rows[900] = (900, "_", "dup", 9, '{"n":900}', None)
    rows[901] = (901, "_", "dup", 9, '{"n":901}', None)  # repeated in its own chunk too
    rows[10] = (10, "_", "dup", 2, '{"n":10}', None)
    rows[11] = (11, "_", "live", 2, '{"n":11}', None)
    rows[700] = (700, "_", "live", 2, '{"n":700}', None)
    with engine.bulk_load("rep", rows=len(rows), tenants=["_"]) as load, \
            engine.bulk_writer(load) as first, engine.bulk_writer(load) as second:
        assert second.write(bulk.copy_text(rows[600:]), tenants=["_"]) == 598
        later_id = _task_of(database_url, "rep", "dup")[0]
        assert first.write(bulk.copy_text(rows[:600]), tenants=["_"]) == 598
        assert (first.settled, second.settled) == (1, 0)
        # each plain insert met a repeat (the second chunk's own, the first's live keys):
        # each chunk was written again with ON CONFLICT DO NOTHING
        assert (second.retried, second.repeats_seen) == (1, True)
        assert (first.retried, first.repeats_seen) == (1, True)
    task_id, seq, priority, payload = _task_of(database_url, "rep", "dup")
    assert (seq, priority, payload) == (load.seq(10), 2, {"n": 10})
    assert task_id != later_id
    assert _task_of(database_url, "rep", "live")[3] == {"from": "http"}
    got = stored(database_url, "rep")
    assert len(got) == 1 + 1195 + 1  # live, the k keys left, dup
    assert [r[0] for r in got][:12] == ["live"] + [f"k{i}" for i in range(10)] + ["dup"]


def _task_of(database_url: str, queue: str, key: str) -> tuple[Any, ...]:
    with psycopg.connect(database_url) as conn:
        [row] = conn.execute("SELECT id, seq, priority, payload FROM tierq_tasks "
                             "WHERE queue = %s AND key = %s", (queue, key)).fetchall()
    return tuple(row)


def test_chunks_with_crossed_repeats_deadlock_once_and_are_written_again(
        engine: Tierq, database_url: str) -> None:
    """Chunk A holds keys x, g1, y and chunk B y, g2, x: an open transaction holding g1 and
    g2 makes each insert stop after its first key; once it rolls back, A waits for B's y
    and B for A's x. PostgreSQL aborts one; it is written again, and x and y keep their
    first occurrences (A's)."""
    a = [(0, "_", "x", 1, '{"c":"a"}', None), (1, "_", "g1", 0, "{}", None),
         (2, "_", "y", 1, '{"c":"a"}', None)]
    b = [(600, "_", "y", 2, '{"c":"b"}', None), (601, "_", "g2", 0, "{}", None),
         (602, "_", "x", 2, '{"c":"b"}', None)]
    deadlocks = _deadlocks(database_url)
    with psycopg.connect(database_url) as gate, \
            engine.bulk_load("cross", rows=603, tenants=["_"]) as load:
        gate.execute(
            "INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at, "
            "run_at_initially, max_attempts, seq, created_at, ready_since, state_since) "
            "SELECT gen_random_uuid(), 'cross', '_', k, 0, '{}', 'cold', now(), now(), 1, 1, "
            "now(), now(), now() FROM unnest(ARRAY['g1', 'g2']) AS k")
        writers: list[bulk.BulkWriter] = []
        errors: list[BaseException] = []

        def write(rows: list[tuple[int, str, str, int, str, None]]) -> None:
            try:
                with engine.bulk_writer(load) as writer:
                    writers.append(writer)
                    writer.write(bulk.copy_text(rows), tenants=["_"])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(rows,)) for rows in (a, b)]
        for thread in threads:
            thread.start()
        with psycopg.connect(database_url, autocommit=True) as watch:
            deadline = time.monotonic() + 10
            while watch.execute("SELECT count(*) FROM pg_locks WHERE NOT granted"
                                ).fetchone() != (2,):
                assert time.monotonic() < deadline, "the writers never waited for the gate"
                time.sleep(0.05)
        gate.rollback()
        for thread in threads:
            thread.join()
    assert errors == []
    # the victim is written again, and its plain insert then meets the survivor's keys
    # (a unique violation): written once more with ON CONFLICT DO NOTHING
    assert sorted(w.retried for w in writers) == [0, 2]
    assert _deadlocks(database_url, wait_for=deadlocks + 1) == deadlocks + 1
    got = {r[0]: (r[2], r[3], r[5]) for r in stored(database_url, "cross")}
    assert got["x"] == (1, {"c": "a"}, load.seq(0))
    assert got["y"] == (1, {"c": "a"}, load.seq(2))
    assert set(got) == {"x", "y", "g1", "g2"}


def _deadlocks(database_url: str, wait_for: int | None = None) -> int:
    """Deadlocks PostgreSQL has counted in the database; its statistics lag (a backend
    reports them at most once a second, or once idle), so wait up to 15 s for
    ``wait_for``."""
    deadline = time.monotonic() + 15
    with psycopg.connect(database_url, autocommit=True) as conn:
        while True:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute("SELECT deadlocks FROM pg_stat_database "
                               "WHERE datname = current_database()").fetchone()
            assert row is not None
            if wait_for is None or row[0] >= wait_for or time.monotonic() > deadline:
                return int(row[0])
            time.sleep(0.2)


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
    """What a round hands a partition: the COPY line, the tenant, the reject reason."""
    table = pa.table({LINE: pa.array(lines, pa.string()), "tenant": tenants,
                      "reason": pa.array(reasons, pa.string())})
    return table.to_batches(max_chunksize=size)


@pytest.mark.parametrize(("connections", "spare"), [(1, 0), (3, 0), (1, 1)])
def test_write_partition_chunks_rejects_and_connections(
        engine: Tierq, stores: StoreConfig, database_url: str, connections: int,
        spare: int) -> None:
    queue = f"part{connections}{spare}"
    n = 2500
    tenants = [("acme", "beta")[i % 2] for i in range(n)]
    reasons: list[str | None] = [None if i % 100 else "key: missing" for i in range(n)]
    staged_text = bulk.copy_text(
        [(i, tenants[i], f"k{i}", 0, "{}", None) for i in range(n)]).decode().splitlines()
    lines: list[str | None] = [None if reasons[i] else staged_text[i] + "\n"
                               for i in range(n)]
    with engine.bulk_load(queue, rows=n, tenants=["acme", "beta"]) as load:
        job = RoundWrite(stores=stores, load=load, chunk_rows=300, connections=connections,
                         spare_connections=spare, tenant_column="tenant")
        # outside a Spark task the partition is number 0: it takes a spare connection
        assert job.connections_of(0) == connections + spare
        assert job.connections_of(1) == connections
        out = list(write_partition(job, batches(lines, tenants, reasons, 128)))
    # one output row, the stats: the rejects are counted and left out (the driver writes
    # them from the source rows)
    [stats] = [row for batch in out for row in batch.to_pylist()]
    times = {name: stats.pop(name) for name in ("input_s", "blocked_s", "write_s",
                                                  "began_at", "ended_at")}
    assert stats == {"staged": 2475, "created": 2475, "rejected": 25, "settled": 0,
                     "retried": 0}
    assert all(t >= 0 for t in times.values()) and times["write_s"] > 0
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


def test_a_load_over_shards_is_not_written_through_one_database(
        stores: StoreConfig, database_url: str) -> None:
    # a load made over shards (by an engine given to run_feed) while the executors' stores
    # name one database: refused, naming the setting, before any row is written
    part = bulk.BulkLoad(queue="sharded", rows=1, blocks=(0,), max_attempts=3, id_ms=0,
                         id_tail=bulk.new_id_tail())
    load = bulk.ShardedBulkLoad(queue="sharded", rows=1, id_ms=0, id_tail=part.id_tail,
                                loads={"a": part, "b": part}, homes={"_": "a"},
                                tags={"a": 1, "b": 2})
    job = RoundWrite(stores=stores, load=load, chunk_rows=10, tenant="_")
    line = bulk.copy_text([(0, "_", "k", 0, "{}", None)]).decode()
    with pytest.raises(ValueError, match=r"a load over shards \(\['a', 'b'\]\).*TIERQ_SHARD_URLS"):
        list(write_partition(job, batches([line], ["_"], [None], 10)))
    assert stored(database_url, "sharded") == []
