"""Engines connected as through RDS Proxy (``TIERQ_DB_POOLER=transaction``): nothing
prepared, timeouts per transaction, the hottest statements run as their PL/pgSQL
functions (migration 0029). The modules here run integration tests again on such
engines; each test fails unless every engine that ran one of those statements had found
all their functions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.stores import TierqFactory
from tierq.engine import Tierq


@pytest.fixture
def make_tq(make_tq: TierqFactory) -> Iterator[TierqFactory]:
    """The suite's engine factory, behind a transaction pooler (a test's own
    ``db_pooler`` wins)."""
    made: list[Tierq] = []

    def factory(clock: Any = None, **overrides: Any) -> Tierq:
        tq = make_tq(clock, **{"db_pooler": "transaction", **overrides})
        assert tq.db.routines and not tq.db.session_settings
        made.append(tq)
        return tq

    yield factory
    for tq in made:
        # (none before the first of those statements ran; every one after)
        wanted = tq.ctx.store.routines_wanted
        assert tq.ctx.store.routines_in_use in (frozenset(), wanted), \
            "an engine behind the pooler ran statements that have functions as themselves"
