"""Batch rows through the engine (``TIERQ_BATCH_ROWS``, logic/batch_rows.py), on the real
PostgreSQL and Valkey: which enqueued batches become one batch row, a plain ack ends its
members, and every other transition moves a member out into ``tierq_tasks`` first, so
each gives the outcome it gives a task with a row of its own."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.stores import TierqFactory
from tierq.core.batch_ids import batch_member, batch_of
from tierq.engine import Tierq
from tierq.maintenance import reaper

QUEUE = "q"


@pytest.fixture
def tq(make_tq: TierqFactory) -> Tierq:
    return make_tq(batch_rows=True)


def stored(pg: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """(Batch rows, their tasks, rows of tierq_tasks)."""
    [(batches, members, rows)] = pg.execute(
        "SELECT (SELECT count(*) FROM tierq_batches),"
        " (SELECT coalesce(sum(tasks), 0) FROM tierq_batches),"
        " (SELECT count(*) FROM tierq_tasks)").fetchall()
    return batches, members, rows


def test_a_plain_batch_is_one_batch_row_and_its_acks_end_it(tq: Tierq,
                                                            pg: psycopg.Connection[Any]) -> None:
    enqueued = tq.enqueue(QUEUE, [{"payload": {"n": n}, "priority": n % 3} for n in range(6)])
    ids = [str(t.id) for t in enqueued]
    assert all(batch_member(i) for i in ids)
    assert {batch_of(i)[0] for i in ids} == {ids[0]}  # type: ignore[index]
    assert stored(pg) == (1, 6, 0)
    claimed = tq.claim(QUEUE, max=6)
    assert sorted(str(t.id) for t in claimed) == sorted(ids)
    assert {(str(t.id), t.payload["n"]) for t in claimed} == {(ids[n], n) for n in range(6)}
    acked = tq.ack(QUEUE, claimed[:4])
    assert sorted(map(str, acked.acked)) == sorted(str(t.id) for t in claimed[:4])
    assert reaper.run(tq.ctx).batches_swept == 0
    tq.ack(QUEUE, claimed[4:])
    summary = reaper.run(tq.ctx)
    assert (summary.batches_swept, summary.batch_tasks_swept) == (1, 6)
    assert stored(pg) == (0, 0, 0)


@pytest.mark.parametrize("task", [
    {"payload": 1, "key": "k"},
    {"payload": 1, "group": "g"},
    {"payload": 1, "delay_seconds": 30},
    {"payload": 1, "max_attempts": 2},
])
def test_a_batch_with_a_task_of_its_own_kind_keeps_a_row_per_task(
        tq: Tierq, pg: psycopg.Connection[Any], task: dict[str, Any]) -> None:
    tq.enqueue(QUEUE, [{"payload": 0}, task])
    assert stored(pg) == (0, 0, 2)


def test_without_the_setting_every_task_has_its_row(make_tq: TierqFactory,
                                                    pg: psycopg.Connection[Any]) -> None:
    tq = make_tq()
    enqueued = tq.enqueue(QUEUE, [{"payload": n} for n in range(3)])
    assert not any(batch_member(str(t.id)) for t in enqueued)
    assert stored(pg) == (0, 0, 3)
