"""Back pressure: a run writes at most ``max_backlog - backlog`` tasks (backlog = ready +
delayed + leased), records where it stopped, and the next run goes on from there —
skipping nothing, repeating nothing — also across files added later."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.spark.data import write_csv, write_parquet
from tierq.engine import Tierq
from tierq.models import TaskIn

pytestmark = pytest.mark.spark


def keys_in_line(database_url: str, queue: str) -> list[str]:
    with psycopg.connect(database_url) as conn:
        return [r[0] for r in conn.execute(
            "SELECT key FROM tierq_tasks WHERE queue = %s ORDER BY seq", (queue,))]


def offsets(database_url: str, feed: str) -> dict[tuple[str, str], tuple[int, str | None]]:
    with psycopg.connect(database_url) as conn:
        return {(r[0], r[1].rsplit("/", 1)[-1]): (r[2], r[3]) for r in conn.execute(
            "SELECT source, part, rows_done, last_value FROM tierq_feeder_offsets "
            "WHERE feed = %s", (feed,))}


def consume(engine: Tierq, queue: str, n: int) -> list[str]:
    """A worker: claim up to n tasks (in batches of at most 500) and ack them."""
    keys: list[str] = []
    while len(keys) < n:
        claimed = engine.claim(queue, max=min(500, n - len(keys)))
        if not claimed:
            break
        engine.ack(queue, [{"id": t.id, "lease_token": t.lease_token} for t in claimed])
        keys += [t.key or "" for t in claimed]
    return keys


def test_stops_at_the_limit_and_resumes_where_it_stopped(
        feed: Any, spark: Any, tmp_path: Path, database_url: str, engine: Tierq) -> None:
    keys = [f"k{i:02d}" for i in range(12)]
    folder = write_parquet(spark, tmp_path / "rows", [{"id": k, "n": i} for i, k in
                                                       enumerate(keys)], files=2)
    args = ["--queue", "jobs", "--source", f"rows={folder}", "--key-column", "id",
            "--max-backlog", "5", "--batch-rows", "2"]
    # another producer's delayed task is part of the backlog too
    engine.enqueue("jobs", [TaskIn(payload={"other": True}, key="other", delay_seconds=600)])

    first = feed(*args)
    assert (first.created, first.deferred, first.stopped_by) == (4, 8, "backlog")
    # batch_rows=2: the backlog is looked at again before round 2 (tests/spark/
    # test_feed_backlog_gauge.py: when it is counted again)
    assert first.rounds == 2
    assert keys_in_line(database_url, "jobs")[1:] == keys[:4]
    assert offsets(database_url, "jobs") == {("rows", "part-00000.parquet"): (4, None)}

    assert 0 < first.rounds_seconds < first.seconds  # Spark's start is not in rounds

    again = feed(*args)  # nobody consumed anything: nothing to write
    assert (again.created, again.deferred, again.consumed) == (0, 8, 0)
    assert (again.rounds, again.rounds_seconds) == (0, 0.0)

    assert consume(engine, "jobs", 3) == keys[:3]
    third = feed(*args)
    assert (third.created, third.deferred) == (3, 5)
    assert offsets(database_url, "jobs") == {("rows", "part-00000.parquet"): (6, None),
                                             ("rows", "part-00001.parquet"): (1, None)}

    assert consume(engine, "jobs", 4) == keys[3:7]
    last = feed(*args)
    assert (last.created, last.deferred, last.stopped_by) == (4, 1, "backlog")
    assert consume(engine, "jobs", 10) == keys[7:11]
    done = feed(*args)
    assert (done.created, done.deferred, done.stopped_by) == (1, 0, "drained")
    assert consume(engine, "jobs", 10) == keys[11:]

    # every key fed exactly once, in file order, across five runs
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM tierq_tasks WHERE queue = 'jobs'"
                            ).fetchone() == (1,)  # only the other producer's delayed task


def test_a_file_added_later_is_fed_whatever_its_name(
        feed: Any, spark: Any, tmp_path: Path, database_url: str) -> None:
    folder = tmp_path / "rows"
    write_parquet(spark, folder, [{"id": f"b{i}", "n": i} for i in range(3)], first_file=5)
    args = ["--queue", "q", "--source", f"rows={folder}", "--key-column", "id"]
    assert feed(*args).created == 3
    # a new file whose name sorts before the one already fed
    write_parquet(spark, folder, [{"id": f"a{i}", "n": i} for i in range(2)], first_file=1)
    second = feed(*args)
    assert (second.created, second.ignored, second.deferred) == (2, 0, 0)
    assert keys_in_line(database_url, "q") == ["b0", "b1", "b2", "a0", "a1"]
    assert feed(*args).consumed == 0


def test_csv_split_into_many_blocks_resumes_mid_file(
        feed: Any, spark: Any, tmp_path: Path, database_url: str, engine: Tierq) -> None:
    """A CSV file read in several splits: rows keep their file order, and a run stopped by
    back pressure halfway through the file resumes at the next row."""
    n = 3000
    path = write_csv(tmp_path / "big.csv", [{"id": f"r{i:05d}", "text": "x" * 40}
                                            for i in range(n)])
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "16k")
    try:
        assert spark.read.csv(path, header=True).rdd.getNumPartitions() > 4
        args = ["--queue", "csv", "--source", f"big={path}", "--key-column", "id",
                "--max-backlog", "1100", "--payload-columns", "id"]
        fed: list[str] = []
        for _ in range(3):
            result = feed(*args)
            assert result.created == min(1100, n - len(fed))
            fed += consume(engine, "csv", 2000)
        assert fed == [f"r{i:05d}" for i in range(n)]
        assert offsets(database_url, "csv") == {("big", "big.csv"): (n, None)}
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", previous)


def test_waits_for_room_when_asked(feed: Any, spark: Any, tmp_path: Path,
                                  engine: Tierq) -> None:
    """With --max-wait-seconds the run waits for workers to make room instead of
    stopping (the wait here is a worker consuming, instead of sleeping)."""
    folder = write_parquet(spark, tmp_path / "rows", [{"id": f"k{i}"} for i in range(6)])
    drained: list[str] = []

    def worker_meanwhile(seconds: float) -> None:
        drained.extend(consume(engine, "wait", 2))

    result = feed("--queue", "wait", "--source", f"rows={folder}", "--key-column", "id",
                  "--max-backlog", "2", "--max-wait-seconds", "30", "--poll-seconds", "1",
                  sleep=worker_meanwhile)
    assert (result.created, result.deferred, result.stopped_by) == (6, 0, "drained")
    assert drained == [f"k{i}" for i in range(4)]


def test_gives_up_waiting_after_max_wait(feed: Any, spark: Any, tmp_path: Path) -> None:
    folder = write_parquet(spark, tmp_path / "rows", [{"id": f"k{i}"} for i in range(4)])
    waits: list[float] = []
    result = feed("--queue", "slow", "--source", f"rows={folder}", "--key-column", "id",
                  "--max-backlog", "3", "--max-wait-seconds", "2.5", "--poll-seconds", "1",
                  sleep=waits.append)
    assert (result.created, result.deferred, result.stopped_by) == (3, 1, "backlog")
    assert waits == [1.0, 1.0, 0.5]
