"""Big payloads' objects (``sql/queries/payloads.sql``, migration 0025)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from psycopg.rows import scalar_row, tuple_row

from tierq.dal.store.base import Conn, StoreBase


class PayloadQueries(StoreBase):
    def payload_keys_add(self, key: str, tenant: str, now: datetime) -> None:
        self._execute("payload_keys_add", {"key": key, "tenant": tenant, "now": now})

    def payload_keys_pending(self, tenant: str, since: datetime) -> int:
        [count] = self._fetch("payload_keys_pending", {"tenant": tenant, "since": since},
                              scalar_row)
        return int(count)

    def payload_keys_states(self, keys: Sequence[str]) -> dict[str, str]:
        rows = self._fetch("payload_keys_states", {"keys": list(keys)}, tuple_row)
        return {str(key): str(state) for key, state in rows}

    def payload_keys_use(self, keys: Sequence[tuple[str, str]],
                         conn: Conn) -> dict[tuple[str, str], str]:
        """Lock the rows of these (key, tenant) pairs' keys until ``conn`` commits and mark
        the pending ones used; each pair whose key this shard handed out to that tenant,
        with the key's state before."""
        pairs = sorted(set(keys))
        rows = self._fetch("payload_keys_use", {"keys": [k for k, _ in pairs],
                                                "tenants": [t for _, t in pairs]},
                           tuple_row, conn)
        found = {(str(key), str(tenant)): str(state) for key, tenant, state in rows}
        if found:
            self._execute("payload_keys_mark_used",
                          {"keys": sorted({key for key, _ in found})}, conn)
        return found

    def payload_objects_register(self, keys: Sequence[str], ids: Sequence[str],
                                 now: datetime, conn: Conn | None = None) -> None:
        self._execute("payload_objects_register", {"keys": list(keys), "ids": list(ids),
                                                   "now": now}, conn)

    def payload_keys_after(self, after: str, limit: int) -> list[str]:
        """Up to ``limit`` keys not deleted after ``after``, in key order."""
        return self._fetch("payload_keys_after", {"after": after, "limit": limit}, scalar_row)

    def payload_tombstones_forget(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` tombstones made before ``before``, oldest first; how many
        went."""
        return self._execute("payload_tombstones_forget", {"before": before, "limit": limit})

    def payload_keys_mark_deleted(self, keys: Sequence[str], now: datetime,
                                  pending_before: datetime) -> list[str]:
        """Tombstone the keys among ``keys`` no task needs, in one transaction that locks
        their rows first (those an enqueue holds are skipped); the keys tombstoned."""
        def body(conn: Conn) -> list[str]:
            locked = self._fetch("payload_keys_lock", {"keys": list(keys)}, scalar_row, conn)
            if not locked:
                return []
            return self._fetch("payload_keys_mark_deleted",
                               {"keys": locked, "now": now, "pending_before": pending_before},
                               scalar_row, conn)
        return self.db.run_transaction(body, what="a payload sweep")

    def payload_keys_restore(self, keys: Sequence[str]) -> int:
        return self._execute("payload_keys_restore", {"keys": list(keys)})

    def payload_objects_forget(self, keys: Sequence[str]) -> int:
        return self._execute("payload_objects_forget", {"keys": list(keys)})

    def payload_object_of_task(self, key: str, task_id: str, tenant: str) -> bool:
        """Whether task ``task_id`` carries object ``key`` and is ``tenant``'s."""
        return bool(self._fetch("payload_object_of_task",
                                {"key": key, "task_id": task_id, "tenant": tenant},
                                scalar_row))

    def payload_bulk_pointers(self, conn: Conn, kind: str
                              ) -> list[tuple[int, str, str, str, bool]]:
        """A bulk chunk's staged rows whose payload looks like a pointer: (ord, id, tenant,
        payload JSON, whether its task was created)."""
        return self._fetch("payload_bulk_pointers", {"kind": kind}, tuple_row, conn)
