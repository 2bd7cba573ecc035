"""Engines connected as through a transaction-pooling proxy (RDS Proxy on AWS, PgBouncer in
transaction mode: ``TIERQ_DB_POOLER=transaction``): nothing prepared, timeouts per
transaction, the hottest statements run as their PL/pgSQL functions (migration 0029). The
modules here run integration tests again on such engines."""

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

    def factory(clock: Any = None, **overrides: Any) -> Tierq:
        tq = make_tq(clock, **{"db_pooler": "transaction", **overrides})
        assert tq.db.routines and not tq.db.session_settings
        return tq

    yield factory
