"""The downgrade's move out of batch rows (``tierq.maintenance.batch_unpack``, ``tierq
unpack-batches``), on the real PostgreSQL and Valkey: every member without an end becomes a
row that a version serving no batch row finishes with its own statements, nothing acked
comes back, and batch rows still being written fail the command."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from tests.support.stores import TierqFactory
from tierq.cli import app
from tierq.core.batch_ids import batch_member
from tierq.engine import Tierq
from tierq.maintenance import batch_unpack
from tierq.maintenance.batch_unpack import UnpackConfig

QUEUE = "q"


@pytest.fixture
def tq(make_tq: TierqFactory) -> Tierq:
    return make_tq(batch_rows=True)


def layout(pg: psycopg.Connection[Any]) -> tuple[int, int]:
    """(Batch rows, rows of tierq_tasks)."""
    [(batches, rows)] = pg.execute(
        "SELECT (SELECT count(*) FROM tierq_batches),"
        " (SELECT count(*) FROM tierq_tasks)").fetchall()
    return batches, rows


def test_every_member_without_an_end_becomes_a_row_the_old_statements_finish(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """Three batch rows: members acked, leased and waiting. After the move the acked ones
    are gone, the others are rows with their ids, payloads, priorities and seqs, the batch
    rows are swept, and the row statements 0.1.0 runs (``ack_delete``, a claim) finish
    them."""
    sent = {}
    for b in range(3):
        tasks = [{"payload": {"b": b, "n": n}, "priority": n % 2} for n in range(4)]
        for outcome, task in zip(tq.enqueue(QUEUE, tasks), tasks, strict=True):
            sent[str(outcome.id)] = (task["payload"], task["priority"])
    enqueued = list(tq.ctx.store.batch_members(list(sent), None))
    assert all(batch_member(i) for i in sent) and len(enqueued) == 12
    claimed = tq.claim(QUEUE, max=6)
    acked = {str(i) for i in tq.ack(QUEUE, claimed[:2]).acked}
    assert len(acked) == 2
    leased = claimed[2:]

    summary = batch_unpack.run(tq.ctx.store)

    assert (summary.moved, summary.left, summary.swept, summary.batch_rows_left) == (10, 0, 3, 0)
    assert layout(pg) == (0, 10)
    rows = {i: (payload, priority, seq, state) for i, payload, priority, seq, state in pg.execute(
        "SELECT id::text, payload, priority, seq, state FROM tierq_tasks")}
    assert set(rows) == set(sent) - acked
    for member in enqueued:  # (each as its batch row held it)
        if member.id in rows:
            assert rows[member.id] == (*sent[member.id], member.seq, "warm")
    # (the leases taken before the move are the rows' now: 0.1.0's ack deletes them)
    [attempt] = {t.attempt for t in leased}
    gone = tq.ctx.store.ack_delete(QUEUE, [str(t.id) for t in leased],
                                   [t.tenant for t in leased], attempt)
    assert {r.id for r in gone} == {str(t.id) for t in leased}
    rest = tq.claim(QUEUE, max=10)
    assert {str(t.id) for t in rest} == set(rows) - {str(t.id) for t in leased}
    [attempt] = {t.attempt for t in rest}
    tq.ctx.store.ack_delete(QUEUE, [str(t.id) for t in rest], [t.tenant for t in rest], attempt)
    assert layout(pg) == (0, 0)


def test_batch_rows_written_while_it_runs_are_left_and_counted_then_moved_next_pass(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    """An enqueue after the first pass's walk (the setting still on somewhere) writes a
    batch row: with one pass its members are counted as left; a second pass moves them."""
    tq.enqueue(QUEUE, [{"payload": n} for n in range(3)])
    written: list[int] = []

    def enqueue_once(line: str) -> None:
        if line.startswith("pass") and not written:
            written.append(len(tq.enqueue(QUEUE, [{"payload": n} for n in range(5)])))

    one = batch_unpack.run(tq.ctx.store, UnpackConfig(passes=1), say=enqueue_once)
    assert (one.moved, one.left, one.batch_rows_left) == (3, 5, 1)
    two = batch_unpack.run(tq.ctx.store, UnpackConfig(passes=3))
    assert (two.moved, two.left, two.passes) == (5, 0, 2)
    assert layout(pg) == (0, 8)


def test_a_member_acked_between_the_read_and_the_move_is_not_moved(
        tq: Tierq, pg: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """An ack that ends a member after the command read it as unended, before its move:
    the move (the batch's lock, then the ends read again) leaves it, so no row of it is
    made and the ack's outcome stands."""
    enqueued = tq.enqueue(QUEUE, [{"payload": n} for n in range(4)])
    claimed = tq.claim(QUEUE, max=1)
    store = tq.ctx.store
    original = store.move_out_of_batches

    def ack_first(queue: Any, ids: Any, tenants: Any, **kwargs: Any) -> list[str]:
        assert str(claimed[0].id) in ids
        assert tq.ack(QUEUE, claimed).acked
        return original(queue, ids, tenants, **kwargs)

    monkeypatch.setattr(store, "move_out_of_batches", ack_first)
    summary = batch_unpack.run(store)
    assert (summary.moved, summary.left, summary.swept) == (3, 0, 1)
    rows = {i for (i,) in pg.execute("SELECT id::text FROM tierq_tasks")}
    assert rows == {str(t.id) for t in enqueued} - {str(claimed[0].id)}


def test_slices_move_every_batch_row(tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    for b in range(7):
        tq.enqueue(QUEUE, [{"payload": [b, n]} for n in range(b + 1)])
    lines: list[str] = []
    summary = batch_unpack.run(tq.ctx.store, UnpackConfig(slice=2), say=lines.append)
    assert (summary.moved, summary.left, summary.swept) == (28, 0, 7)
    assert sum(line.startswith("  moved") for line in lines) == 4  # (7 batch rows, 2 a slice)
    assert layout(pg) == (0, 28)


def test_a_schema_without_batch_rows_has_nothing_to_move(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    pg.execute("ALTER TABLE tierq_batches RENAME TO tierq_batches_gone")
    try:
        summary = batch_unpack.run(tq.ctx.store)
    finally:
        pg.execute("ALTER TABLE tierq_batches_gone RENAME TO tierq_batches")
    assert not summary.table and summary.moved == 0


def test_the_command_moves_them_and_fails_while_batch_rows_are_written(
        tq: Tierq, pg: psycopg.Connection[Any], app_database_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    tq.enqueue(QUEUE, [{"payload": n} for n in range(4)])
    runner = CliRunner()
    env = {"DATABASE_URL": app_database_url, "TIERQ_SHARD_URLS": ""}
    done = runner.invoke(app, ["unpack-batches"], env=env, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "4 task(s) moved out of batch rows" in done.output
    assert layout(pg) == (0, 4)

    # (still written: each pass finds a new batch row, so the last leaves one)
    original = batch_unpack._sweep

    def sweep_and_enqueue(store: Any) -> int:
        swept = original(store)
        tq.enqueue(QUEUE, [{"payload": "again"}, {"payload": "again"}])
        return swept

    monkeypatch.setattr(batch_unpack, "_sweep", sweep_and_enqueue)
    failed = runner.invoke(app, ["unpack-batches", "--passes", "2"], env=env,
                           catch_exceptions=False)
    assert failed.exit_code == 1
    assert "still being written" in failed.output
    assert "TIERQ_BATCH_ROWS" in failed.output


@pytest.mark.parametrize("args", [["--slice", "0"], ["--passes", "0"], ["--passes", "x"]])
def test_the_command_refuses_bad_options(args: list[str], app_database_url: str) -> None:
    result = CliRunner().invoke(app, ["unpack-batches", *args],
                                env={"DATABASE_URL": app_database_url})
    assert result.exit_code == 2
