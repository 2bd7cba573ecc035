"""Helpers of the dispatch tests: the local consumer functions installed for a test, and
running the dispatcher until a queue is done."""

from __future__ import annotations

import time

from tierq.engine import Tierq
from tierq.maintenance.dispatcher import DispatcherSummary, forget_dispatcher


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
