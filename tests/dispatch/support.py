"""Helpers of the dispatch tests: running the dispatcher until a queue is done, and reading
the tasks PostgreSQL holds whichever layout stored them (rows or batch rows)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import psycopg

from tests.support.every_task import EVERY_TASK
from tierq.engine import Tierq
from tierq.maintenance.dispatcher import DispatcherSummary, forget_dispatcher

# Every task PostgreSQL holds (``EVERY_TASK``) with the attempts recorded of it: a member
# in its batch row has none recorded (0), as a row has none until an outcome records one.
WITH_ATTEMPTS = f"""(
    SELECT every_task.*, coalesce(r.attempts, 0) AS attempts
    FROM {EVERY_TASK} LEFT JOIN tierq_tasks r USING (id)
) AS task"""


def task_states(pg: psycopg.Connection[Any], queue: str | None = None) -> Counter[str]:
    """How many tasks PostgreSQL holds in each state, of ``queue`` or of every queue.

    It reads ``EVERY_TASK``, so a member still in its batch row counts as a row does and
    an acked task (a deleted row or an ended member) is not counted.
    """
    if queue is None:
        found = pg.execute(f"SELECT state, count(*) FROM {EVERY_TASK} GROUP BY state")
    else:
        found = pg.execute(f"SELECT state, count(*) FROM {EVERY_TASK} WHERE queue = %s "
                           "GROUP BY state", (queue,))
    return Counter({state: int(n) for state, n in found.fetchall()})


def run_until(tq: Tierq, done: object, *, timeout: float = 60.0,
              **overrides: object) -> list[DispatcherSummary]:
    """Dispatcher passes until ``done()`` holds (then its running batches are waited for)."""
    summaries: list[DispatcherSummary] = []
    deadline = time.monotonic() + timeout
    assert callable(done)
    try:
        while not done():
            assert time.monotonic() < deadline, f"not done after {timeout}s: {summaries[-3:]}"
            summaries.append(tq.run_job("dispatcher").summary() if not overrides else
                             registry_run(tq, **overrides))
    finally:
        forget_dispatcher(tq.ctx)
    return summaries


def registry_run(tq: Tierq, **overrides: object) -> DispatcherSummary:
    from tierq.maintenance.registry import job

    summary = job("dispatcher").run(tq.ctx, tq.job_config("dispatcher"), **overrides)
    assert isinstance(summary, DispatcherSummary)
    return summary
