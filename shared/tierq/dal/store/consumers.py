"""Statements of push delivery: the queues with a consumer function (tierq.logic.dispatch)."""

from __future__ import annotations

from psycopg.rows import scalar_row

from tierq.dal.store.base import StoreBase


class ConsumerQueries(StoreBase):
    def consumer_queues(self) -> list[str]:
        """The queues that name a consumer function, by name."""
        return self._fetch("consumer_queues", None, scalar_row)
