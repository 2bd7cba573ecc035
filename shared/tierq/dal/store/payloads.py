"""Big payloads' objects (``sql/queries/payloads.sql``, migration 0025)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tierq.dal.store.base import Conn, StoreBase, positional
from tierq.dal.store.rows import PayloadObject


class PayloadQueries(StoreBase):
    def payload_objects_register(self, keys: Sequence[str], ids: Sequence[str],
                                 now: datetime, conn: Conn | None = None) -> None:
        self._execute("payload_objects_register", {"keys": list(keys), "ids": list(ids),
                                                   "now": now}, conn)

    def payload_objects_unused(self, after: str, limit: int) -> list[PayloadObject]:
        """Up to ``limit`` objects after ``after`` in key order, each with whether no task
        that named it has a row left."""
        return self._fetch("payload_objects_unused", {"after": after, "limit": limit},
                           positional(PayloadObject))

    def payload_objects_forget(self, keys: Sequence[str]) -> int:
        return self._execute("payload_objects_forget", {"keys": list(keys)})
