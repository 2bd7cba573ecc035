"""Fixtures of the dispatch tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.dispatch.journal import JOURNAL
from tierq.aws.runtime import use_consumers
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions


@pytest.fixture
def functions(tq: Tierq) -> Iterator[LocalFunctions]:
    """In-process consumer functions (module:function), given to the test's engines: ``tq``
    and the Lambda runtime's."""
    local = LocalFunctions()
    tq.ctx.consumers = local
    previous = use_consumers(local)
    JOURNAL.reset()
    yield local
    use_consumers(previous)
    JOURNAL.reset()
