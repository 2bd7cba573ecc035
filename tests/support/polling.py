"""Waiting for something that happens in another process or thread."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], T], timeout: float = 15.0, what: str = "",
               interval: float = 0.1) -> T:
    """Call ``check`` until it returns something true, and return that; an AssertionError
    naming ``what`` once ``timeout`` seconds have passed without (``check`` is called at
    least once, and once more at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g}s: {what or 'the condition'}")
        time.sleep(interval)
