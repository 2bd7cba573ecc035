"""Fixtures of the dispatch tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.dispatch.journal import JOURNAL
from tierq.local.consumers import LocalFunctions
from tierq.logic import dispatch


@pytest.fixture
def functions() -> Iterator[LocalFunctions]:
    """In-process consumer functions (module:function), installed for the test."""
    local = LocalFunctions()
    previous = dispatch.install(local)
    JOURNAL.reset()
    yield local
    dispatch.install(previous)
    JOURNAL.reset()
