"""The phase runner of the benchmarks (bench/phases.py): a phase's figures come from every
process's result, so a process that ends without one fails the phase, and one that ended
cleanly is waited for rather than called lost."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from bench import phases
from bench.phases import PhaseFailed, Role, Sync, run_phase


def finishes(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    """A consumer that finishes its share at once."""
    sync.ready_and_wait(spec["index"])
    sync.add_finished(spec["n"])
    return {"t_end": time.time(), "n": spec["n"]}


def ends_without_a_result(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    """A consumer whose process ends, status 0, before it can report."""
    sync.ready_and_wait(spec["index"])
    os._exit(0)


def roles(*targets: Any) -> list[Role]:
    return [Role("consumer", target, {"index": i, "n": 5}) for i, target in enumerate(targets)]


def test_a_phase_gathers_every_processs_result() -> None:
    result = run_phase("ok", roles(finishes, finishes, finishes), total=15, timeout=60,
                       preload=("tests.bench.test_phases",))
    assert sorted(r["n"] for r in result.results) == [5, 5, 5]
    assert result.seconds >= 0


def test_a_process_that_ends_without_a_result_fails_the_phase_after_the_grace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(phases, "RESULT_GRACE", 4.0)
    started = time.monotonic()
    with pytest.raises(PhaseFailed, match="exited without a result: lost-consumer-1"):
        run_phase("lost", roles(finishes, ends_without_a_result), total=10, timeout=60,
                  preload=("tests.bench.test_phases",))
    # (it waited for the result first: the set-up and the first look take about a second)
    assert time.monotonic() - started >= 4.0
