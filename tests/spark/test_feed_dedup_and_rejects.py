"""Dedup by key (inside a batch: the first occurrence wins; against live tasks: ON CONFLICT
DO NOTHING) without reordering anything, and rows that cannot be mapped going to the
rejects output with their reason while the job goes on."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.spark.data import write_csv, write_json, write_parquet
from tierq.engine import Tierq
from tierq.models import TaskIn

pytestmark = pytest.mark.spark


def line(database_url: str, queue: str) -> list[tuple[str, Any, int]]:
    """(key, payload, seq) in line order."""
    with psycopg.connect(database_url) as conn:
        return [(r[0], r[1], r[2]) for r in conn.execute(
            "SELECT key, payload, seq FROM tierq_tasks WHERE queue = %s ORDER BY seq",
            (queue,))]


def test_duplicates_inside_a_run_and_against_live_tasks(
        feed: Any, spark: Any, tmp_path: Path, database_url: str, engine: Tierq) -> None:
    # k3 is already queued: it keeps its place and payload
    engine.enqueue("d", [TaskIn(payload={"from": "http"}, key="k3")])
    ids = ["k0", "k1", "k0", "k2", "k3", "k1", "k4", "k0"]
    rows = [{"id": k, "n": i} for i, k in enumerate(ids)]
    folder = write_parquet(spark, tmp_path / "rows", rows)
    # batch_rows=3: rounds [k0 k1 k0] [k2 k3 k1] [k4 k0]: the second k0 is a duplicate in
    # its round; the later k1 and k0 meet live tasks written by earlier rounds
    result = feed("--queue", "d", "--source", f"rows={folder}", "--key-column", "id",
                  "--batch-rows", "3")
    assert (result.created, result.ignored, result.rejected) == (4, 4, 0)
    got = line(database_url, "d")
    assert [(k, p) for k, p, _ in got] == [
        ("k3", {"from": "http"}),
        ("k0", {"id": "k0", "n": 0}),
        ("k1", {"id": "k1", "n": 1}),
        ("k2", {"id": "k2", "n": 3}),
        ("k4", {"id": "k4", "n": 6}),
    ]
    # the same rows fed again under another feed name: all ignored, nothing moves
    again = feed("--queue", "d", "--source", f"rows={folder}", "--key-column", "id",
                 "--feed", "replay")
    assert (again.created, again.ignored) == (0, 8)
    assert line(database_url, "d") == got


def test_duplicates_in_one_round_keep_the_first_occurrence(
        feed: Any, tmp_path: Path, database_url: str) -> None:
    rows = [{"id": "b", "v": 1}, {"id": "a", "v": 2}, {"id": "b", "v": 3},
            {"id": "c", "v": 4}, {"id": "a", "v": 5}]
    path = write_json(tmp_path / "rows.json", rows)
    result = feed("--queue", "one", "--source", f"rows={path}", "--key-column", "id",
                  "--write-partitions", "3", "--chunk-rows", "1")
    assert (result.created, result.ignored) == (3, 2)
    assert [(k, p["v"]) for k, p, _ in line(database_url, "one")] == [("b", 1), ("a", 2),
                                                                       ("c", 4)]


def test_keys_repeated_across_writers_in_crossed_orders_keep_their_first_occurrence(
        feed: Any, spark: Any, tmp_path: Path, database_url: str) -> None:
    """One round, two write partitions: the first writes k0..k999, the second the same
    keys from k999 down to k0. Their chunks meet in the middle in crossed orders (PostgreSQL
    may abort one chunk as a deadlock; it is written again), and past it the second
    partition's later occurrences are often committed first and then taken over: every
    key ends with its first occurrence, in first-occurrence order."""
    n = 1000
    rows = ([{"id": f"k{i}", "v": i} for i in range(n)]
            + [{"id": f"k{2 * n - 1 - r}", "v": r} for r in range(n, 2 * n)])
    folder = write_parquet(spark, tmp_path / "rows", rows)
    result = feed("--queue", "cross", "--source", f"rows={folder}", "--key-column", "id",
                  "--write-partitions", "2", "--chunk-rows", "50", "--no-warm")
    assert (result.created, result.ignored, result.rounds) == (n, n, 1)
    got = line(database_url, "cross")
    assert [(k, p["v"]) for k, p, _ in got] == [(f"k{i}", i) for i in range(n)]


def test_the_same_key_in_two_tenants_is_two_tasks(feed: Any, tmp_path: Path,
                                                   database_url: str) -> None:
    path = write_csv(tmp_path / "t.csv", [{"id": "x", "t": "acme"}, {"id": "x", "t": "beta"},
                                          {"id": "x", "t": "acme"}])
    result = feed("--queue", "t", "--source", f"t={path}", "--key-column", "id",
                  "--tenant-column", "t")
    assert (result.created, result.ignored) == (2, 1)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT tenant FROM tierq_tasks ORDER BY seq").fetchall() == [
            ("acme",), ("beta",)]
        assert conn.execute("SELECT tenant FROM tierq_queue_tenants WHERE queue = 't' "
                            "ORDER BY tenant").fetchall() == [("acme",), ("beta",)]


def read_rejects(path: Path) -> list[dict[str, Any]]:
    out = []
    for part in sorted(path.glob("part-*.json")):
        out += [json.loads(x) for x in part.read_text().splitlines() if x.strip()]
    return sorted(out, key=lambda r: (r["source"], r["row"]))


def test_rows_that_cannot_be_mapped_go_to_rejects_with_their_reason(
        feed: Any, tmp_path: Path, database_url: str, make_tq: Any) -> None:
    soon = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S")
    far = (datetime.now(UTC) + timedelta(days=800)).strftime("%Y-%m-%d %H:%M:%S")
    rows = [
        {"id": "ok1", "prio": "7", "tenant": "acme", "when": "", "text": "fine"},
        {"id": "", "prio": "1", "tenant": "", "when": "", "text": "no key"},
        {"id": "p1", "prio": "high", "tenant": "", "when": "", "text": "priority text"},
        {"id": "p2", "prio": "12", "tenant": "", "when": "", "text": "priority too big"},
        {"id": "p3", "prio": "2.5", "tenant": "", "when": "", "text": "priority fraction"},
        {"id": "t1", "prio": "", "tenant": "bad tenant!", "when": "", "text": "tenant"},
        {"id": "r1", "prio": "", "tenant": "", "when": "someday", "text": "run_at"},
        {"id": "r2", "prio": "", "tenant": "", "when": far, "text": "run_at far"},
        {"id": "big", "prio": "", "tenant": "", "when": "", "text": "x" * 400},
        {"id": "ok2", "prio": "", "tenant": "", "when": soon, "text": "later"},
        {"id": "ok3", "prio": "", "tenant": "", "when": "", "text": "the text \\u0000"},
        {"id": "nul", "prio": "", "tenant": "", "when": "", "text": "a NUL: \x00"},
    ]
    path = write_csv(tmp_path / "mixed.csv", rows)
    rejects = tmp_path / "rejects"
    small_payloads = make_tq(max_payload_bytes=300)
    result = feed("--queue", "m", "--source", f"mixed={path}", "--key-column", "id",
                  "--priority-column", "prio", "--tenant-column", "tenant",
                  "--run-at-column", "when", "--payload-columns", "text",
                  "--rejects", str(rejects), "--batch-rows", "4", "--no-warm",
                  engine=small_payloads)
    assert (result.created, result.ignored, result.rejected, result.deferred) == (3, 0, 9, 0)

    got = read_rejects(rejects)
    assert [(r["row"], r["reason"]) for r in got] == [
        (1, "key: missing"),
        (2, "priority: must be an integer from 0 to 9, got high"),
        (3, "priority: must be an integer from 0 to 9, got 12"),
        (4, "priority: must be an integer from 0 to 9, got 2.5"),
        (5, "tenant: letters, digits, _ . - only, at most 64, not starting with . or -"),
        (6, "run_at: not a timestamp: someday"),
        (7, "run_at: must be within a year from now"),
        (8, "payload: 411 characters once serialised; the limit is 300"),
        (11, "payload: contains a NUL character (\\u0000), which cannot be stored"),
    ]
    assert all(r["source"] == "mixed" and r["feed"] == "m" and r["part"].endswith("mixed.csv")
               for r in got)
    assert json.loads(got[1]["row_json"]) == {"id": "p1", "prio": "high", "tenant": None,
                                              "when": None, "text": "priority text"}

    with psycopg.connect(database_url) as conn:
        tasks = conn.execute(
            "SELECT key, tenant, priority, payload, state, ready_since IS NULL "
            "FROM tierq_tasks WHERE queue = 'm' ORDER BY seq").fetchall()
    assert tasks == [("ok1", "acme", 7, {"text": "fine"}, "cold", False),
                     ("ok2", "_", 0, {"text": "later"}, "delayed", True),
                     ("ok3", "_", 0, {"text": "the text \\u0000"}, "cold", False)]


def test_rejects_of_parquet_rounds_are_written_once_each_where_they_are(
        feed: Any, spark: Any, tmp_path: Path, database_url: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """A round's rejects come from the round's rows read a second time: across rounds
    that cut files in the middle, and two sources merged, each reject is written once,
    naming its source, file and row."""
    def rows(prefix: str, n: int) -> list[dict[str, Any]]:
        return [{"id": "" if i % 7 == 3 else f"{prefix}{i}", "prio": str(i % 12)}
                for i in range(n)]

    left = write_parquet(spark, tmp_path / "left", rows("l", 40), files=3)
    right = write_parquet(spark, tmp_path / "right", rows("r", 25), files=2)
    rejects = tmp_path / "rejects"
    caplog.set_level(logging.INFO, logger="tierq.feeder")
    result = feed("--queue", "pr", "--source", f"left={left}", "--source",
                  f"right={right}", "--key-column", "id", "--priority-column", "prio",
                  "--batch-rows", "9", "--rejects", str(rejects), "--no-warm")

    def bad(source: str, n: int, per_file: int) -> list[tuple[str, str, int, str]]:
        """(source, file, row in the file, reason) of each row the mapping rejects."""
        return [(source, f"part-{i // per_file:05d}.parquet", i % per_file,
                 "key: missing" if i % 7 == 3 else
                 f"priority: must be an integer from 0 to 9, got {i % 12}")
                for i in range(n) if i % 7 == 3 or i % 12 > 9]

    # 40 rows in files of 14, 14, 12; 25 in files of 13, 12
    expected = bad("left", 40, 14) + bad("right", 25, 13)
    got = sorted((r["source"], r["part"].rsplit("/", 1)[-1], r["row"], r["reason"])
                 for r in read_rejects(rejects))
    assert result.rounds == 8
    assert result.rejected == len(expected) > 0
    assert result.created == 65 - len(expected)
    assert got == sorted(expected)
    # each round with rejects said how many it wrote (counted as they were written), and
    # they agree with what its writers counted: no warning
    written = [int(m.group(1)) for r in caplog.records
               if (m := re.search(r"(\d+) reject\(s\) written in", r.getMessage()))]
    assert sum(written) == len(expected) and 0 < len(written) <= 8
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                and "reject" in r.getMessage()]
    with psycopg.connect(database_url) as conn:
        count = conn.execute("SELECT count(*) FROM tierq_tasks WHERE queue = 'pr'").fetchone()
    assert count == (65 - len(expected),)
