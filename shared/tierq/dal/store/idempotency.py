"""Idempotency-Key records (``sql/queries/idempotency.sql``)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from psycopg.rows import scalar_row

from tierq.dal.store.base import Conn, StoreBase, positional
from tierq.dal.store.rows import ClaimedKey, IdempotencyRecord


class IdempotencyQueries(StoreBase):
    def commit_relaxed(self, conn: Conn) -> None:
        """``conn``'s open transaction commits without waiting for the WAL flush."""
        conn.execute("SET LOCAL synchronous_commit = off")

    def idempotency_claim(self, conn: Conn, scope_key: bytes, fingerprint: bytes,
                          owner: UUID, now: datetime, lease_until: datetime,
                          expires_at: datetime) -> ClaimedKey | None:
        """Take the key for this request; None when it is someone else's to answer."""
        rows = self._fetch("idempotency_claim", {
            "scope_key": scope_key, "fingerprint": fingerprint, "owner": owner, "now": now,
            "lease_until": lease_until, "expires_at": expires_at},
            positional(ClaimedKey), conn)
        return rows[0] if rows else None

    def idempotency_get(self, conn: Conn, scope_key: bytes) -> IdempotencyRecord | None:
        rows = self._fetch("idempotency_get", {"scope_key": scope_key},
                           positional(IdempotencyRecord), conn)
        return rows[0] if rows else None

    def idempotency_record(self, conn: Conn, *, scope_key: bytes, fingerprint: bytes,
                           owner: UUID, done: bool, status: int | None, response: str,
                           now: datetime, lease_until: datetime,
                           expires_at: datetime) -> bool:
        """Record a response for the key's owner; False when another owner holds the key."""
        return bool(self._fetch("idempotency_record", {
            "scope_key": scope_key, "fingerprint": fingerprint, "owner": owner, "done": done,
            "status": status, "response": response, "now": now, "lease_until": lease_until,
            "expires_at": expires_at}, scalar_row, conn))

    def idempotency_abandon(self, conn: Conn, scope_key: bytes, owner: UUID,
                            now: datetime) -> None:
        self._execute("idempotency_abandon", {"scope_key": scope_key, "owner": owner,
                                              "now": now}, conn)

    def idempotency_purge(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` records expired before ``before``; how many."""
        return self._execute("idempotency_purge", {"before": before, "limit": limit})
