"""A failing assertion in a child process reaches the test as itself, with the child's
message and traceback, at once — not as a timeout of the parent's wait
(tests/support/processes.py, used by the claimer-process tests)."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from tests.support.processes import ChildFailed, Children


def put_square(results: Any, n: int) -> None:
    results.put(n * n)


def assert_even(results: Any, n: int) -> None:
    assert n % 2 == 0, f"the child was given an odd number: {n}"
    results.put(n)


def exit_hard(results: Any, code: int) -> None:
    os._exit(code)


def test_results_of_children_that_succeed() -> None:
    children = Children()
    try:
        results = children.queue()
        for n in (2, 3):
            children.start(put_square, results, n)
        assert sorted(children.get(results, 2, timeout=60)) == [4, 9]
        children.join(timeout=30)
    finally:
        children.close()


def test_a_failing_assertion_in_a_child_is_raised_in_the_parent_with_its_message() -> None:
    children = Children()
    try:
        results = children.queue()
        children.start(assert_even, results, 2)
        children.start(assert_even, results, 7)
        started = time.monotonic()
        with pytest.raises(ChildFailed) as failed:
            children.get(results, 2, timeout=600)
        assert time.monotonic() - started < 30  # the failure, not the 600 s timeout
        message = str(failed.value)
        assert "AssertionError: the child was given an odd number: 7" in message
        assert "assert_even-2" in message and "in assert_even" in message  # its traceback
    finally:
        children.close()


def test_a_child_that_dies_without_a_result_is_reported_by_its_exit_code() -> None:
    children = Children()
    try:
        results = children.queue()
        children.start(exit_hard, results, 3)
        with pytest.raises(ChildFailed, match="exited with code 3"):
            children.get(results, 1, timeout=600)
        with pytest.raises(ChildFailed, match="exited with code 3"):
            children.join(timeout=30)
    finally:
        children.close()
